"""Wakes keep their spread: a node whose sweep runs only every ten minutes, sweeping
instances another node parked (so no wake of its own is scheduled for them), claims each
near its own ``wake_at`` - never before it - rather than all together at the next scan."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from flowpark.engine.clock import SystemClock
from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.flows import Backoff, Catalog, Flow
from flowpark.runtime.scheduler import Sweeper
from flowpark.store import SqlStore, make_async_engine, upgrade
from tests.engine.test_short_wakes import Count, Key, Polls
from tests.support.eventually import eventually

WAITS = (0.6, 1.0, 1.4)


def _flow(name: str, wait: float) -> Flow:
    return Flow(name, "1.0.0", input=Key).poll_until(
        Count(),
        until=lambda bag: bag.get(Polls).polls >= 3,
        interval=Backoff.fixed(timedelta(seconds=wait)),
        timeout=timedelta(minutes=5),
        reads=(Polls,),
    )


async def test_a_sweep_claims_each_wake_near_its_own_instant(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/flowpark.db"
    upgrade(url)
    db = make_async_engine(url)
    catalog = Catalog()
    for n, wait in enumerate(WAITS):
        catalog.register(_flow(f"test.spread{n}", wait))
    journal = SqlStore(db)
    parker = Engine(journal, catalog, SystemClock(), EngineConfig(node_id="parker"))
    sweeping = Engine(journal, catalog, SystemClock(), EngineConfig(node_id="sweeper"))
    sweeper = Sweeper(sweeping, interval_seconds=600)
    try:
        ids = []
        for n in range(len(WAITS)):
            started = await parker.start(catalog.latest(f"test.spread{n}"), {"key": str(n)})
            ids.append(started.instance.id)
        sweeper.start()

        async def each_made_attempt_one() -> list[float]:
            lateness = []
            for instance_id, wait in zip(ids, WAITS, strict=True):
                rows = {r.scope: r for r in (await journal.runs.load(instance_id)).steps}
                assert 1 in rows, f"{instance_id} has not made attempt 1"
                due = rows[0].committed_at + timedelta(seconds=wait)
                lateness.append((rows[1].started_at - due).total_seconds())
            return lateness

        lateness = await eventually(each_made_attempt_one, timeout=10, interval=0.05)
        # never early; late by at most a loaded machine's scheduling (the scan is 600 s away:
        # claimed at the next scan, each would be minutes late)
        assert all(0.0 <= late < 2.0 for late in lateness), lateness
    finally:
        await sweeper.stop()
        await db.dispose()
