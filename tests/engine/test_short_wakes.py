"""Short waits do not wait for the sweep: a node that parks an instance
due before its next scan wakes it in-process through the same atomic claim; a restarted
node sweeps at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel

from flowpark.engine.clock import SystemClock
from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.flows import Backoff, Capability, Catalog, Flow, StepContext
from flowpark.runtime.scheduler import WAKE_GRANULARITY, Sweeper
from flowpark.store import SqlStore, make_async_engine, upgrade
from tests.support.eventually import eventually


class Key(BaseModel):
    key: str


class Polls(BaseModel):
    polls: int


class Count(Capability):
    id = "test.count"
    idempotent = True
    puts = (Polls,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Polls(polls=ctx.scope + 1))


def _flow(wait: timedelta) -> Flow:
    return Flow("test.short", "1.0.0", input=Key).poll_until(
        Count(),
        until=lambda bag: bag.get(Polls).polls >= 3,
        interval=Backoff.fixed(wait),
        timeout=timedelta(minutes=5),
        reads=(Polls,),
    )


async def _wait_state(journal: SqlStore, instance_id: str, state: str, within: float) -> None:
    async def reached() -> bool:
        return (await journal.reads.get_instance(instance_id)).state == state

    await eventually(reached, timeout=within, interval=0.02, what=f"{instance_id} {state}")


async def _wait_due(journal: SqlStore, instance_id: str) -> None:
    """Until the instance's wake instant has passed (it is parked and due)."""

    async def due() -> None:
        inst = await journal.reads.get_instance(instance_id)
        assert inst.state == "suspended" and inst.wake_at is not None, inst
        assert datetime.now(UTC) >= inst.wake_at + WAKE_GRANULARITY, inst.wake_at

    await eventually(due, timeout=5, interval=0.02, what=f"{instance_id} due")


async def test_a_short_wait_is_woken_in_process_long_before_the_next_scan(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/flowpark.db"
    upgrade(url)
    db = make_async_engine(url)
    catalog = Catalog()
    catalog.register(_flow(timedelta(milliseconds=200)))
    journal = SqlStore(db)
    engine = Engine(journal, catalog, SystemClock(), EngineConfig(node_id="n1"))
    sweeper = Sweeper(engine, interval_seconds=600)
    sweeper.start()
    try:
        started = await engine.start(catalog.latest("test.short"), {"key": "a"})
        assert started.instance.state == "suspended"
        # two 200 ms waits: done in well under a second, with the next scan 10 min away
        await _wait_state(journal, started.instance.id, "completed", within=5)
        assert sweeper.wakes_scheduled >= 2
    finally:
        await sweeper.stop()
        await db.dispose()


async def test_no_in_process_wake_when_disabled_and_a_restarted_node_sweeps_at_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/flowpark.db"
    upgrade(url)
    db = make_async_engine(url)
    catalog = Catalog()
    catalog.register(_flow(timedelta(milliseconds=100)))
    journal = SqlStore(db)
    engine = Engine(journal, catalog, SystemClock(), EngineConfig(node_id="n1"))
    try:
        # a node without a sweeper parks it (then "dies"): the row is all there is; once
        # the instance is due, it is still parked
        started = await engine.start(catalog.latest("test.short"), {"key": "b"})
        await _wait_due(journal, started.instance.id)
        assert (await journal.reads.get_instance(started.instance.id)).state == "suspended"
        # the next node sweeps at start-up, then (short wakes off) only every 10 minutes
        sweeper = Sweeper(engine, interval_seconds=600, short_wakes=False)
        sweeper.start()
        try:
            await eventually(lambda: sweeper.last_success is not None, what="the start-up sweep")
            # no wake job was scheduled for the second wait: only the periodic sweep
            assert [job.id for job in sweeper.scheduler.get_jobs()] == ["flowpark.sweep"]
            assert sweeper.wakes_scheduled == 0
            await _wait_due(journal, started.instance.id)
            inst = await journal.reads.get_instance(started.instance.id)
            assert inst.state == "suspended", "the second wake must wait for a scan"
        finally:
            await sweeper.stop()
        snapshot = await journal.runs.load(started.instance.id)
        attempts = [r.scope for r in snapshot.steps if r.kind == "step"]
        assert attempts == [0, 1]  # attempt 1 ran at start-up
    finally:
        await db.dispose()
