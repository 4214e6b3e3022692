"""Restarts, versions, ephemeral runs and the jitter spread."""

from __future__ import annotations

import logging
import shutil
from collections import Counter
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from uuid6 import uuid7

from flowpark.engine.records import InstanceRecord, InstanceState
from flowpark.flows import Backoff
from flowpark.samples.document_processing import Waits
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, ephemeral_flow, poll_flow

ORDER = {"order_id": "o-1"}


def subs(check: Scripted) -> dict[str, Scripted]:
    return {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }


@pytest.fixture
def url(tmp_path: Path, _sqlite_template: Path) -> str:
    """A SQLite file migrated to head: what a restarted node finds (the store outlives the
    first harness)."""
    path = tmp_path / "restart.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


async def test_a_restart_mid_wait_resumes_every_instance_with_its_attempts_and_budget(
    url: str,
) -> None:
    expo = Backoff.exponential("PT1M", "PT30M")
    before: dict[str, tuple[int | None, object]] = {}
    async with FlowHarness.open(
        [poll_flow(interval=expo, budget=timedelta(hours=2))],
        database_url=url,
        migrate=False,
        substitutes=subs(Scripted(Status(done=False))),
    ) as h:
        ids = []
        for i in range(12):  # varied states: started at different times, so different scopes
            ids.append((await h.start("t.poll", {"order_id": f"o-{i}"})).instance.id)
            await h.advance(timedelta(minutes=1))
        await h.engine.cancel(ids[-1])
        for instance_id in ids:
            inst = await h.instance(instance_id)
            before[instance_id] = (inst.wake_scope, inst.state)
        stopped_at = h.clock.now()
    # a new node on the same database, later: nothing in memory survives but the rows
    check = Scripted(Status(done=False), Status(done=True))
    async with FlowHarness.open(
        [poll_flow(interval=expo, budget=timedelta(hours=2))],
        database_url=url,
        migrate=False,
        substitutes=subs(check),
        start=stopped_at + timedelta(seconds=1),
    ) as h2:
        for instance_id, (scope, state) in before.items():
            inst = await h2.instance(instance_id)
            assert (inst.wake_scope, inst.state) == (scope, state)
        resumed = ids[0]  # started first: the furthest along
        scope = before[resumed][0]
        assert scope is not None and scope >= 3
        rows = (await h2.snapshot(resumed)).steps
        last = [r for r in rows if r.capability_id == "t.check"][-1]
        wake = (await h2.instance(resumed)).wake_at
        # the backoff position survived the restart: the gap follows the schedule
        # 1 min doubling to 30 min (pinned): the wait after attempt n is 60 * 2**n s
        expected = timedelta(seconds=min(60 * 2 ** (scope - 1), 1800))
        assert wake is not None and wake - last.committed_at == expected
        await h2.advance_to_next_wake(resumed)
        scopes = [
            r.scope for r in (await h2.snapshot(resumed)).steps if r.capability_id == "t.check"
        ]
        assert scopes == list(range(scope + 1))
        for instance_id in ids[:-1]:
            final = await h2.wait_until(lambda i: i.state.ended, instance_id)
            assert final.state in (InstanceState.COMPLETED, InstanceState.FAILED)
        assert (await h2.instance(ids[-1])).state is InstanceState.CANCELLED


async def _parked_on_1_0_0(url: str) -> InstanceRecord:
    """Start ``t.poll`` 1.0.0 on ``url``: it parks on its first attempt (not done)."""
    async with FlowHarness.open(
        [poll_flow(version="1.0.0")],
        database_url=url,
        migrate=False,
        substitutes=subs(Scripted(Status(done=False))),
    ) as h:
        return (await h.start("t.poll", ORDER)).instance


def _node_serving(
    url: str, versions: list[str], start: datetime | None
) -> AbstractAsyncContextManager[FlowHarness]:
    """A node on ``url`` serving ``t.poll`` at ``versions`` (its polls done), its clock at
    ``start``."""
    return FlowHarness.open(
        [poll_flow(version=v) for v in versions],
        database_url=url,
        migrate=False,
        substitutes=subs(Scripted(Status(done=True))),
        start=start,
    )


async def test_an_instance_runs_on_its_version_and_waits_where_that_version_is_missing(
    url: str,
) -> None:
    old = await _parked_on_1_0_0(url)
    wake = old.wake_at
    # a node deployed with 2.0.0 only: leaves the 1.0.0 instance parked, counts it
    async with _node_serving(url, ["2.0.0"], wake) as h2:
        report = await h2.sweep()
        assert report.claimed == 0 and report.not_runnable == 1
        inst = await h2.instance(old.id)
        assert inst.state is InstanceState.SUSPENDED and inst.wake_at == wake
        new = (await h2.start("t.poll", ORDER)).instance
        assert new.flow_version == "2.0.0" and new.state is InstanceState.COMPLETED
    # a node with both versions: the old instance finishes on 1.0.0
    async with _node_serving(url, ["1.0.0", "2.0.0"], wake) as h3:
        report = await h3.sweep()
        assert report.advanced == 1 and report.not_runnable == 0
        done = await h3.instance(old.id)
        assert done.state is InstanceState.COMPLETED and done.flow_version == "1.0.0"


async def test_an_ephemeral_flow_runs_inside_the_call_and_writes_no_rows() -> None:
    after = Scripted(None)
    async with FlowHarness.open(
        [ephemeral_flow()], substitutes={"t.start": Scripted(Job(job_id="e-1")), "t.after": after}
    ) as h:
        started = await h.start("t.quick", ORDER)
        assert started.instance.state is InstanceState.COMPLETED
        assert started.result == {"job": "e-1"}
        assert after.calls == 1
        assert await h.store.reads.count_instances() == 0


def test_ten_thousand_instances_started_together_do_not_wake_in_the_same_second() -> None:
    schedule = Waits.OCR_POLLING
    for attempt, base in ((0, 5), (3, 40)):  # the sample's bases, pinned
        seconds = Counter(
            int(schedule.delay(attempt, str(uuid7())).total_seconds()) for _ in range(10_000)
        )
        assert max(seconds.values()) < 10_000 * 0.45
        assert len(seconds) >= int(base * 0.5) - 1  # spread over the whole jitter window
        assert min(seconds) >= int(base * 0.5) and max(seconds) <= base


def test_one_instance_gets_the_same_schedule_on_every_node() -> None:
    instance_id = str(uuid7())
    first = [Waits.OCR_POLLING.delay(n, instance_id) for n in range(8)]
    again = [Waits.OCR_POLLING.delay(n, instance_id) for n in range(8)]
    assert first == again


async def test_a_node_counts_the_instances_it_cannot_run_on_its_first_sweep_then_every_30_s(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from flowpark.engine.node.sweeps import NOT_RUNNABLE_EVERY

    wake = (await _parked_on_1_0_0(url)).wake_at
    async with _node_serving(url, ["2.0.0"], wake) as h2:
        caplog.set_level(logging.WARNING, logger="flowpark.engine")
        assert (await h2.sweep()).not_runnable == 1  # the first sweep counts
        h2.clock.advance(NOT_RUNNABLE_EVERY - timedelta(seconds=1))
        assert (await h2.sweep()).not_runnable is None  # not counted again yet
        h2.clock.advance(timedelta(seconds=1))
        assert (await h2.sweep()).not_runnable == 1
        warned = [r for r in caplog.records if "not registered on node" in r.getMessage()]
        assert len(warned) == 2, [r.getMessage() for r in warned]
