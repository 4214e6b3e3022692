"""job.await on the virtual clock: the production engine and store (SQLite and PostgreSQL),
the sample's real capabilities, and the fake job service over (in-process) HTTP on the same
clock.

The fake job is QUEUED for 2 s, RUNNING until 6 s after its start, then SUCCEEDED (unless a
test says otherwise). ``job.await`` polls every 2 s; :class:`~tests.engine.pacing.Paced`
lets its sleeps move the virtual clock.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from flowpark.engine.records import InstanceState, Outcome, StepKind, StepRow
from flowpark.errors import InstanceKeyInUse
from flowpark.flows import Flow
from flowpark.samples.job_polling import (
    JOB_FAILED,
    JOB_WAIT_FAILED,
    AwaitJob,
    JobClient,
    JobWaits,
    await_job_options,
    build_job_flow,
)
from flowpark.testing import FlowHarness
from tests.engine.pacing import JobWorld, Paced

JOB = "job-1"
NEVER = timedelta(days=365)


def at(t0: datetime, seconds: float) -> datetime:
    return t0 + timedelta(seconds=seconds)


@pytest.fixture
async def world() -> AsyncIterator[JobWorld]:
    w = JobWorld()
    try:
        yield w
    finally:
        await w.aclose()


def paced_await(world: JobWorld, gate: asyncio.Event | None = None, **options: Any) -> Paced:
    """The sample's ``job.await`` (options optionally replaced), paced by the clock; with a
    ``gate``, each of its sleeps waits for the event first."""
    opts = replace(await_job_options(), **options) if options else None
    return Paced(AwaitJob(JobClient(world.http, JobWorld.BASE_URL), opts), gate=gate)


def flow(world: JobWorld) -> Flow:
    return build_job_flow(JobClient(world.http, JobWorld.BASE_URL))


def open_harness(store_url: str | None, world: JobWorld, paced: Paced) -> Any:
    """The harness on ``store_url`` (SQLite, and PostgreSQL under the postgres marker)."""
    return FlowHarness.open(
        [flow(world)], substitutes={"job.await": paced}, database_url=store_url, migrate=False
    )


async def progress(h: FlowHarness, instance_id: str) -> list[str]:
    return [
        m.payload["state"] for m in await h.store.streams.read_stream(instance_id, "JobProgress")
    ]


async def rows(h: FlowHarness, instance_id: str, capability_id: str) -> list[StepRow]:
    snap = await h.snapshot(instance_id)
    return [r for r in snap.steps if r.capability_id == capability_id and r.kind is StepKind.STEP]


async def test_job_completes_with_its_result_and_reports_each_state_once(
    world: JobWorld, store_url: str | None
) -> None:
    # the try waits at its first sleep until the start's answer was read: ungated, the paced
    # wait could finish the job while the start read the instance back
    answered = asyncio.Event()
    paced = paced_await(world, gate=answered)
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        t0 = h.clock.now()
        started = await h.start("job.await", {}, instance_key=JOB)
        # the start answers once the in-process wait begins; the wait goes on meanwhile
        assert started.instance.state is InstanceState.RUNNING
        assert started.instance.try_number == 1
        answered.set()
        await h.engine.drain()
        inst = await h.instance(started.instance.id)
        assert inst.state is InstanceState.COMPLETED, inst.failure
        assert inst.result == {"jobId": JOB, "output": f"job {JOB} done"}
        assert h.clock.now() == at(t0, 6)  # polls at 0, 2, 4 and 6 s
        assert world.service.calls["status"] == 4
        assert world.service.calls["start"] == 1
        # QUEUED, then RUNNING once: the unchanged round at 4 s only heartbeat
        assert await progress(h, inst.id) == ["QUEUED", "RUNNING"]
        (waited,) = await rows(h, inst.id, "job.await")
        assert (waited.outcome, waited.try_number) == (Outcome.SUCCESS, 1)
        assert (waited.started_at, waited.committed_at) == (t0, at(t0, 6))
        assert inst.try_number is None and inst.lease_owner is None
        assert await h.calls(inst.id, "job.record_wait_failure") == 0


async def test_a_failed_job_fails_the_flow_without_retries_or_the_failure_route(
    world: JobWorld, store_url: str | None
) -> None:
    paced = paced_await(world)
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        world.service.start(JOB)
        world.service.fail(JOB, "disk full")
        started = await h.start("job.await", {}, instance_key=JOB)
        await h.engine.drain()
        inst = await h.instance(started.instance.id)
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == JOB_FAILED
        assert "disk full" in inst.failure.message
        assert paced.tries == 1
        assert await h.calls(inst.id, "job.record_wait_failure") == 0
        assert await progress(h, inst.id) == []


async def test_a_job_that_never_ends_spends_its_tries_then_the_failure_route_runs_once(
    world: JobWorld, store_url: str | None
) -> None:
    world.service.succeed_after = NEVER
    paced = paced_await(world, execute_timeout=timedelta(seconds=20))
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        t0 = h.clock.now()
        inst_id = (await h.start("job.await", {}, instance_key=JOB)).instance.id
        await h.engine.drain()
        for _ in range(2):  # the retries: each wakes at the recorded next_try_at
            inst = await h.instance(inst_id)
            assert inst.state is InstanceState.SUSPENDED and not await h.holds_lease(inst_id)
            await h.advance_to_next_wake(inst_id)
            await h.engine.drain()

        tries = await rows(h, inst_id, "job.await")
        # 3 tries (maximum_tries), each cut at the 20 s execute timeout, 1 s then 2 s apart
        assert [
            (r.try_number, r.started_at, r.committed_at, r.next_try_at, r.final) for r in tries
        ] == [
            (1, t0, at(t0, 20), at(t0, 21), False),
            (2, at(t0, 21), at(t0, 41), at(t0, 43), False),
            (3, at(t0, 43), at(t0, 63), None, True),
        ]
        assert {r.error_type for r in tries} == {"execute_timeout"}
        assert paced.tries == 3
        assert await h.calls(inst_id, "job.record_wait_failure") == 1
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == JOB_WAIT_FAILED
        assert "execute_timeout" in inst.failure.message
        assert "job.await did not finish within 0:00:20" in inst.failure.message
        assert inst.failure.details["try_number"] == 3
        # the retries resumed from the checkpoint (RUNNING): no message twice
        assert await progress(h, inst_id) == ["QUEUED", "RUNNING"]


async def test_the_samples_ten_minute_wait_leaves_no_time_for_a_retry(
    world: JobWorld, store_url: str | None
) -> None:
    world.service.succeed_after = NEVER
    paced = paced_await(world)
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        t0 = h.clock.now()
        inst_id = (await h.start("job.await", {}, instance_key=JOB)).instance.id
        await h.engine.drain()
        (only,) = await rows(h, inst_id, "job.await")
        # execute_timeout == total_duration == 10 min: a retry would start past it
        assert (only.error_type, only.final, only.committed_at) == (
            "execute_timeout",
            True,
            t0 + JobWaits.MAX_JOB_WAIT,
        )
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == JOB_WAIT_FAILED
        assert "execute_timeout: job.await did not finish within 0:10:00" in (inst.failure.message)
        assert await progress(h, inst_id) == ["QUEUED", "RUNNING"]


async def test_a_try_lost_with_its_node_is_retried_from_the_checkpoint_on_another_node(
    world: JobWorld, store_url: str | None
) -> None:
    world.service.succeed_after = timedelta(minutes=2)
    # node a's try gets stuck right after reporting RUNNING (its 2nd sleep, at 2 s)
    paced = paced_await(world)
    paced.hold = lambda ctx, sleeps: ctx.try_number == 1 and sleeps == 2
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        t0 = h.clock.now()
        inst_id = (await h.start("job.await", {}, instance_key=JOB)).instance.id
        await paced.held.wait()
        assert await progress(h, inst_id) == ["QUEUED", "RUNNING"]
        await h.engine.close(release=False)  # node a dies: its try commits nothing
        dead = await h.instance(inst_id)
        assert dead.state is InstanceState.RUNNING and dead.try_number == 1
        assert dead.heartbeat_value == "RUNNING"
        assert dead.lease_expires_at == at(t0, 2) + JobWaits.HEARTBEAT_TIMEOUT

        b = h.with_engine(node_id="b")
        h.clock.set(dead.lease_expires_at)
        assert (await b.sweep()).claimed == 0  # the heartbeat timeout has not passed yet
        h.clock.advance(timedelta(seconds=1))
        report = await b.sweep()  # b declares the try lost and schedules the next
        assert report.claimed == 1
        assert [o.state for o in report.outcomes] == [InstanceState.SUSPENDED]
        (lost,) = await rows(h, inst_id, "job.await")
        assert (lost.try_number, lost.error_type, lost.final) == (1, "heartbeat_timeout", False)
        assert lost.started_at == t0
        assert lost.next_try_at == at(t0, 63) + JobWaits.FIRST_RETRY_DELAY

        h.clock.set(lost.next_try_at)
        report = await b.sweep()
        assert [o.state for o in report.outcomes] == [InstanceState.RUNNING]
        await b.drain()
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.COMPLETED, inst.failure
        assert inst.result == {"jobId": JOB, "output": f"job {JOB} done"}
        assert h.clock.now() == at(t0, 120)
        retried = (await rows(h, inst_id, "job.await"))[1]
        assert (retried.try_number, retried.outcome) == (2, Outcome.SUCCESS)
        assert paced.tries == 2
        # try 2 started from the checkpoint RUNNING: no progress message twice
        assert await progress(h, inst_id) == ["QUEUED", "RUNNING"]
        assert await h.calls(inst_id, "job.record_wait_failure") == 0


async def test_instance_keys_are_unique_among_running_instances_and_reusable_after(
    world: JobWorld, store_url: str | None
) -> None:
    # the first try waits at its first sleep until the key checks are done: ungated, its
    # paced sleeps let it finish the job (and free the key) while a slow store still
    # answered the repeat, and the third start was then created instead of refused
    running = asyncio.Event()
    paced = paced_await(world, gate=running)
    async with open_harness(store_url, world, paced) as h:
        world.clock = paced.clock = h.clock
        first = await h.start("job.await", {}, instance_key=JOB, idempotency_key="k1")
        assert first.created and first.instance.state is InstanceState.RUNNING
        again = await h.start("job.await", {}, instance_key=JOB, idempotency_key="k1")
        assert (again.created, again.instance.id) == (False, first.instance.id)
        with pytest.raises(InstanceKeyInUse) as caught:
            await h.start("job.await", {}, instance_key=JOB, idempotency_key="k2")
        assert caught.value.code == "instance_key_in_use"
        assert caught.value.fields["instance_id"] == first.instance.id
        assert (await h.instance(first.instance.id)).state is InstanceState.RUNNING
        running.set()
        await h.engine.drain()
        assert (await h.instance(first.instance.id)).state is InstanceState.COMPLETED

        later = await h.start("job.await", {}, instance_key=JOB, idempotency_key="k3")
        assert later.created and later.instance.id != first.instance.id
        await h.engine.drain()
        # the job id is the key: the ended job is found, not started again
        assert (await h.instance(later.instance.id)).state is InstanceState.COMPLETED
        assert world.service.calls["start"] == 2
        assert len(world.service._jobs) == 1
