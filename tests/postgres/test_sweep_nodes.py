"""Several engines ("nodes") sweeping one store: each due instance is claimed by exactly one
node, a parked instance wakes at its own ``wake_at`` and not at some lease's expiry, a
(re)started node never adopts an instance another node holds with a live lease, a node
claims no more than its free run slots, a stopping node claims nothing more, and a dead
node's instances come before a backlog of overdue wakes.

Each test runs on SQLite and PostgreSQL (``store_url``); the production engine and
``SqlStore`` with virtual clocks.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from sqlalchemy import make_url, text

from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.engine.records import InstanceState
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, poll_flow
from tests.postgres.nodes import (
    INTERVAL,
    Held,
    count_rows,
    duplicate_executions,
    keeper_asleep,
    slow_flow,
    slow_subs,
)
from tests.support.eventually import eventually
from tests.support.harness import sql_of

#: due instances the three nodes sweep: on PostgreSQL 300; on SQLite, whose one writer at
#: a time serialises the claims anyway, 100 (still a dozen interleaved claims of 8 slots)
DUE = {"postgresql": 300, "sqlite": 100}


def poll_subs(check: Scripted) -> dict[str, Scripted]:
    return {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }


async def test_three_nodes_sweeping_due_instances_make_exactly_one_attempt_each(
    store_url: str,
) -> None:
    due = DUE[make_url(store_url).get_backend_name()]
    check = Scripted(Status(done=False))
    # small batches and few slots: each node makes many claim statements that interleave
    config = EngineConfig(node_id="starter", sweep_batch=25, concurrency=8)
    async with FlowHarness.open(
        [poll_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=poll_subs(check),
        config=config,
    ) as h:
        for first in range(0, due, 20):
            await asyncio.gather(
                *(h.start("t.poll", {"order_id": f"o-{n}"}) for n in range(first, first + 20))
            )
        assert check.calls == due  # attempt 0 of each, inside its start
        h.clock.advance(INTERVAL)
        nodes = [h.with_engine(node_id=f"node-{n}") for n in "abc"]
        reports = await asyncio.gather(*(node.sweep() for node in nodes))

        assert sum(r.claimed for r in reports) == due
        assert sum(r.advanced for r in reports) == due
        assert sum(r.failed_runs for r in reports) == 0
        assert sum(1 for r in reports if r.claimed) >= 2, [r.claimed for r in reports]
        assert check.calls == 2 * due  # exactly one attempt 1 per instance
        assert await count_rows(h, "t.check", scope=1) == due
        assert await count_rows(h, "t.check") == 2 * due
        assert await duplicate_executions(h) == []
        # nothing is due any more: another round of sweeps claims nothing
        again = await asyncio.gather(*(node.sweep() for node in nodes))
        assert [r.claimed for r in again] == [0, 0, 0]


async def test_a_parked_instance_is_not_woken_before_its_interval_by_a_short_lease(
    store_url: str,
) -> None:
    check = Scripted(Status(done=False))
    config = EngineConfig(node_id="node-a", lease=timedelta(seconds=5))
    async with FlowHarness.open(
        [poll_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=poll_subs(check),
        config=config,
    ) as h:
        started = h.clock.now()
        inst = (await h.start("t.poll", {"order_id": "o-1"})).instance
        assert inst.state is InstanceState.SUSPENDED
        assert inst.wake_at == started + INTERVAL
        assert inst.lease_owner is None and inst.lease_expires_at is None
        b = h.with_engine(node_id="node-b")
        instants = [timedelta(seconds=s) for s in (1, 4, 5, 6, 10, 11, 15, 29, 30, 31, 45, 59)]
        instants += [INTERVAL - timedelta(milliseconds=1)]
        for offset in instants:
            h.clock.set(started + offset)
            reports = await asyncio.gather(h.sweep(), b.sweep())
            assert [r.claimed for r in reports] == [0, 0], offset
            assert check.calls == 1, offset
        h.clock.set(started + INTERVAL)
        reports = await asyncio.gather(h.sweep(), b.sweep())
        assert sum(r.claimed for r in reports) == 1
        assert check.calls == 2
        assert await count_rows(h, "t.check") == 2


async def test_a_restarted_node_does_not_adopt_an_instance_another_node_holds(
    store_url: str,
) -> None:
    held = Held(Status(done=True))
    subs = slow_subs(Status(done=False), held, Status(done=True))
    async with FlowHarness.open(
        [slow_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=subs,
        config=EngineConfig(node_id="node-a"),
    ) as h:
        lease = h.engine.lease
        inst = (await h.start("t.slow", {"order_id": "o-1"})).instance
        h.clock.set(inst.wake_at)  # type: ignore[arg-type]
        a_sweep = asyncio.create_task(h.sweep())  # node A: attempt 1, held mid-call
        await asyncio.wait_for(held.entered.wait(), 10)
        await keeper_asleep(h.clock, lease)
        # node B starts (and restarts) while A works; so does a second process that
        # reuses A's node id: their first sweeps find nothing to adopt
        for node_id in ("node-b", "node-b", "node-a"):
            for _ in range(4):
                h.clock.advance(timedelta(seconds=9))
                await keeper_asleep(h.clock, lease)  # A renews every lease / 3
                report = await h.with_engine(node_id=node_id).sweep()
                assert report.claimed == 0, node_id
        assert subs["t.slow"].calls == 2
        holder = await h.instance(inst.id)
        assert holder.state is InstanceState.RUNNING and holder.lease_owner == "node-a"
        held.release.set()
        report = await asyncio.wait_for(a_sweep, 10)
        assert (report.claimed, report.advanced, report.failed_runs) == (1, 1, 0)
        final = await h.instance(inst.id)
        assert final.state is InstanceState.COMPLETED
        assert subs["t.slow"].calls == 2
        assert await count_rows(h, "t.slow", scope=1) == 1
        assert await duplicate_executions(h) == []


async def test_a_stopping_node_claims_nothing_more_and_leaves_due_work_to_others(
    store_url: str,
) -> None:
    config = EngineConfig(node_id="node-a", sweep_batch=2, concurrency=2)
    stopping: list[Engine] = []

    def not_done_then_stop(ctx: object) -> Status:
        if stopping and check.calls == 23:  # the third call of node A's sweep
            stopping[0].stop_claiming()
        return Status(done=False)

    check = Scripted(not_done_then_stop)
    async with FlowHarness.open(
        [poll_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=poll_subs(check),
        config=config,
    ) as h:
        for n in range(20):
            await h.start("t.poll", {"order_id": f"o-{n}"})
        h.clock.advance(INTERVAL)
        stopping.append(h.engine)
        report = await h.sweep()
        assert report.claimed <= 4 and report.advanced == report.claimed
        other = await h.with_engine(node_id="node-b").sweep()
        assert other.claimed == 20 - report.claimed
        assert check.calls == 40
        assert (await h.sweep()).claimed == 0  # node A stays stopped


async def test_a_dead_nodes_instance_is_taken_over_before_a_backlog_of_overdue_wakes(
    store_url: str,
) -> None:
    subs = {
        **poll_subs(Scripted(Status(done=False))),
        "t.slow": Scripted(Status(done=False), Status(done=True)),
    }
    async with FlowHarness.open(
        [poll_flow(), slow_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        backlog = [(await h.start("t.poll", {"order_id": f"o-{n}"})).instance.id for n in range(10)]
        held = (await h.start("t.slow", {"order_id": "x"})).instance
        assert held.wake_at is not None
        h.clock.set(held.wake_at)
        # node A claims it, then dies: its lease ends after every backlog wake
        claim = await h.store.runs.claim(
            held.id, "node-a", h.clock.now(), h.clock.now() + timedelta(seconds=30)
        )
        assert claim is not None
        h.clock.advance(timedelta(seconds=31))
        b = h.with_engine(node_id="node-b")
        report = await b.sweep(limit=1)
        assert [o.instance_id for o in report.outcomes] == [held.id]
        assert (await h.instance(held.id)).state is InstanceState.COMPLETED
        for instance_id in backlog:  # still parked, overdue: the next sweeps take them
            assert (await h.instance(instance_id)).state is InstanceState.SUSPENDED


async def test_a_node_claims_no_more_than_its_free_run_slots(store_url: str) -> None:
    release = asyncio.Event()
    in_flight: list[int] = []

    async def held_check(ctx: object) -> Status:
        in_flight.append(1)
        await release.wait()
        return Status(done=False)

    check = Scripted(Status(done=False))
    config = EngineConfig(node_id="node-a", sweep_batch=10, concurrency=4)
    async with FlowHarness.open(
        [poll_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=poll_subs(check),
        config=config,
    ) as h:
        for n in range(40):
            await h.start("t.poll", {"order_id": f"o-{n}"})
        check.outcomes = [held_check]  # attempt 1 of each is held until released
        h.clock.advance(INTERVAL)
        sweep = asyncio.create_task(h.sweep())
        await eventually(lambda: len(in_flight) == 4, timeout=10, what="4 runs in flight")
        # nothing claimed waits for a slot: exactly the runs in flight hold leases
        async with sql_of(h).engine.connect() as conn:
            leased = (
                await conn.execute(
                    text("SELECT count(*) FROM flow_instance WHERE lease_owner = 'node-a'")
                )
            ).scalar_one()
        assert leased == 4
        release.set()
        report = await asyncio.wait_for(sweep, 30)
        assert (report.claimed, report.advanced) == (40, 40)
        assert await count_rows(h, "t.check", scope=1) == 40
