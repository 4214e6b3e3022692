"""What the engine reports to its observer when nodes meet: the node that takes a lapsed
lease over reports a takeover; the old holder, whose write is refused, a fencing refusal;
the attempts, tries, wake lateness and the poll's end are reported by the node that ran
them (SQLite and PostgreSQL, virtual clocks)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from flowpark.engine.clock import VirtualClock
from flowpark.engine.observe import Observer
from flowpark.testing import FlowHarness
from tests.engine.flows import Status
from tests.postgres.nodes import Held, slow_flow, slow_subs

LEASE = timedelta(seconds=30)
SCAN = timedelta(seconds=1)


class Recorder(Observer):
    """Keeps every event as ``(name, args)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []

    def named(self, name: str) -> list[tuple[Any, ...]]:
        return [args for event, args in self.events if event == name]


def _recording(name: str) -> Any:
    def record(self: Recorder, *args: Any) -> None:
        self.events.append((name, args))

    return record


for _event in (
    "started",
    "ended",
    "tried",
    "attempted",
    "woke",
    "poll_ended",
    "signal_taken",
    "taken_over",
    "fencing_refused",
    "swept",
):
    setattr(Recorder, _event, _recording(_event))


async def test_takeover_and_fencing_refusal_are_reported_by_their_nodes(store_url: str) -> None:
    held = Held(Status(done=True))
    subs = slow_subs(Status(done=False), held, Status(done=True))
    async with FlowHarness.open(
        [slow_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        inst = (await h.start("t.slow", {"order_id": "o-1"})).instance
        assert inst.wake_at is not None
        clock_a = VirtualClock(inst.wake_at)  # A's clock stands still: its keeper starves
        a = h.with_engine(node_id="node-a", clock=clock_a)
        a.observer = seen_a = Recorder()
        a_sweep = asyncio.create_task(a.sweep())
        await asyncio.wait_for(held.entered.wait(), 10)

        clock_b = VirtualClock(clock_a.now() + LEASE + SCAN)
        b = h.with_engine(node_id="node-b", clock=clock_b)
        b.observer = seen_b = Recorder()
        report = await b.sweep()
        assert (report.claimed, report.advanced) == (1, 1)
        held.release.set()  # A's call returns; its commit carries a stale token
        await asyncio.wait_for(a_sweep, 10)

    assert seen_b.named("taken_over") == [("t.slow",)]
    assert seen_b.named("fencing_refused") == []
    assert seen_a.named("fencing_refused") == [("t.slow",)]
    assert seen_a.named("taken_over") == []
    # B ran attempt 1 (satisfied) and the step after it, and ended the instance
    assert seen_b.named("attempted") == [("t.slow", "t.slow", "satisfied")]
    assert [args[:2] for args in seen_b.named("tried")] == [
        ("t.slow", "success"),
        ("t.after", "success"),
    ]
    assert seen_b.named("ended") == [("t.slow", "1.0.0", "completed", None)]
    ((flow, used, how),) = seen_b.named("poll_ended")
    assert (flow, how) == ("t.slow", "satisfied") and 0 < used < 1
    # A woke attempt 1 on time (its clock at wake_at); its refused run ended nothing
    assert seen_a.named("woke") == [("t.slow", 0.0)]
    assert seen_a.named("ended") == []
    assert [args[1] for args in seen_a.named("swept")] == [1]
