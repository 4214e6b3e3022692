"""Providers on the virtual clock: a try without budget is deferred (parked at the instant
budget is expected, never past a deadline, neither a try nor an attempt); a pushback parks
until the provider's ``Retry-After`` without spending the retry policy; deferred work
nearest its deadline goes first."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace
from typing import ClassVar, cast

from pydantic import BaseModel

from flowpark.engine.decide.decisions import Execute
from flowpark.engine.execute.deferral import pushback_reason
from flowpark.engine.execute.tries import PushedBack
from flowpark.engine.records import InstanceState, Outcome, StepKind, WakeKind
from flowpark.flows import (
    Backoff,
    Capability,
    CapabilityOptions,
    Flow,
    Provider,
    ProviderPushback,
    RetryPolicy,
    StepContext,
)
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Check, Job, Order, Start, Status, done

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
S = timedelta(seconds=1)
SLOW = Provider("slow", rate_per_second=1.0, burst=1)


class Call(Capability):
    """One call of the provider ``slow``."""

    id = "p.call"
    idempotent = True
    provider = SLOW
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Job,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job(job_id="j"))


def call_flow(name: str = "p.calls", deadline: timedelta | None = None) -> Flow:
    return Flow(name, "1.0.0", input=Order, deadline=deadline).step(Call())


class StatusError(Exception):
    """What ``httpx.HTTPStatusError`` looks like to the engine (duck typing)."""

    def __init__(self, status: int, retry_after: str | None = None) -> None:
        super().__init__(f"HTTP {status}")
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        self.response = SimpleNamespace(status_code=status, headers=headers)


async def _rows(h: FlowHarness, instance_id: str) -> list[tuple[str, int, str]]:
    snap = await h.snapshot(instance_id)
    return [(r.kind.value, r.scope, r.outcome.value) for r in snap.steps]


async def test_a_try_without_budget_is_deferred_to_the_expected_instant_not_run() -> None:
    async with FlowHarness.open([call_flow()], start=T0) as h:
        first = await h.start("p.calls", {})
        second = await h.start("p.calls", {})
        third = await h.start("p.calls", {})
        assert first.instance.state == "completed"
        for started, due in ((second, T0 + S), (third, T0 + 2 * S)):
            inst = await h.instance(started.instance.id)
            assert (inst.state, inst.wake_kind, inst.wake_at) == (
                "suspended",
                "provider_budget",
                due,
            )
            assert await _rows(h, started.instance.id) == []  # no row: not a try
        await h.advance_to_next_wake(second.instance.id)
        assert (await h.instance(second.instance.id)).state == "completed"
        assert (await h.instance(third.instance.id)).state == "suspended"
        await h.advance_to_next_wake(third.instance.id)
        snap = await h.snapshot(third.instance.id)
        assert snap.instance.state == "completed"
        (row,) = snap.steps
        assert (row.try_number, row.started_at) == (1, T0 + 2 * S)
        minutes = await h.store.providers.tallies("slow", T0)
        assert sum(m.deferred for m in minutes) >= 2


class SlowCheck(Check):
    id = "p.check"
    provider = Provider("vendor", rate_per_second=0.05, burst=1)  # one call per 20 s


def poll_flow() -> Flow:
    flow = Flow("p.poll", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(SlowCheck(), until=done, interval=Backoff.fixed(S), timeout=10 * S)
    flow.on_timeout(lambda b: b.fail("p.not_done", "not done in time"))
    return flow


async def test_a_budget_that_ends_while_deferred_runs_on_timeout_at_its_end() -> None:
    subs = {"p.check": Scripted(Status(done=False))}
    async with FlowHarness.open([poll_flow()], start=T0, substitutes=subs) as h:
        first = await h.start("p.poll", {})
        deferred = await h.start("p.poll", {})
        inst = await h.instance(deferred.instance.id)
        # attempt 0 deferred: its budget row is stored first, the park is capped at its end
        assert inst.wake_kind == "provider_budget"
        assert inst.wake_at == T0 + 10 * S  # budget expected at T0 + 20 s: capped
        rows = await _rows(h, deferred.instance.id)
        assert rows == [("step", 0, "success"), ("deadline", 0, "success")]  # start, budget
        await h.advance_to_next_wake(deferred.instance.id)
        ended = await h.snapshot(deferred.instance.id)
        assert ended.instance.state == "failed"
        assert ended.instance.failure is not None
        assert ended.instance.failure.code == "p.not_done"
        assert ended.instance.updated_at <= T0 + 10 * S + S  # within one scan interval
        assert not [r for r in ended.steps if r.capability_id == "p.check"]  # never tried
        # the first instance's budget ended at the same instant, after its attempts
        assert (await h.instance(first.instance.id)).state == "failed"
        assert await h.calls(first.instance.id, "p.check") >= 1


class Ocr(Capability):
    id = "p.ocr"
    idempotent = True
    provider = Provider("ocr", rate_per_second=10.0, burst=5)
    options = CapabilityOptions(retry=RetryPolicy(maximum_tries=2, initial_interval=S))
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Job,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job(job_id="j"))


def ocr_flow() -> Flow:
    return Flow("p.ocr", "1.0.0", input=Order).step(Ocr())


async def test_a_429_with_retry_after_seconds_parks_until_then_and_spends_no_try() -> None:
    subs = {"p.ocr": Scripted(StatusError(429, "30"), StatusError(503, "30"), Job(job_id="j"))}
    async with FlowHarness.open([ocr_flow()], start=T0, substitutes=subs) as h:
        started = await h.start("p.ocr", {})
        inst = await h.instance(started.instance.id)
        assert inst.wake_kind == "provider_pushback"
        assert inst.wake_at is not None
        assert T0 + 30 * S <= inst.wake_at <= T0 + 36 * S  # Retry-After, jittered a little
        assert await _rows(h, started.instance.id) == []  # not a failed try
        (state,) = await h.store.providers.states()
        assert (state.effective_rate, state.pushbacks) == (5.0, 1)
        assert state.paused_until == T0 + 30 * S
        stamp = T0.isoformat(timespec="seconds")
        assert state.lowered_reason == f"429 from p.ocr at {stamp}; Retry-After 30 s"
        # the 503 after it parks again: still no row, the retry policy (2 tries) unspent
        await h.advance_to_next_wake(started.instance.id)
        assert (await h.instance(started.instance.id)).wake_kind == "provider_pushback"
        await h.advance_to_next_wake(started.instance.id)
        snap = await h.snapshot(started.instance.id)
        assert snap.instance.state == "completed"
        assert [(r.try_number, r.outcome) for r in snap.steps] == [(1, Outcome.SUCCESS)]


async def test_a_retry_after_http_date_parks_until_that_instant() -> None:
    later = T0 + timedelta(minutes=2)
    subs = {
        "p.ocr": Scripted(StatusError(429, format_datetime(later, usegmt=True)), Job(job_id="j"))
    }
    async with FlowHarness.open([ocr_flow()], start=T0, substitutes=subs) as h:
        started = await h.start("p.ocr", {})
        inst = await h.instance(started.instance.id)
        assert inst.wake_at is not None and later <= inst.wake_at <= later + 10 * S
        h.clock.set(later - S)
        await h.sweep()  # not due yet: nothing runs before the provider's instant
        assert (await h.instance(started.instance.id)).state == "suspended"
        await h.advance_to_next_wake(started.instance.id)
        assert (await h.instance(started.instance.id)).state == "completed"


class Status429(Check):
    id = "p.status"
    provider = Provider("vendor2", rate_per_second=50.0, burst=10)
    options = CapabilityOptions(
        retry=RetryPolicy(maximum_tries=3, total_duration=timedelta(minutes=3))
    )


async def test_a_pushback_longer_than_the_retry_window_does_not_fail_a_long_poll() -> None:
    flow = Flow("p.long", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(
        Status429(), until=done, interval=Backoff.fixed(timedelta(minutes=1)), timeout=4 * 3600 * S
    )
    pushbacks = [StatusError(429, "5") for _ in range(60)]  # 5 minutes of 429s
    subs = {"p.status": Scripted(Status(done=False), *pushbacks, Status(done=True))}
    async with FlowHarness.open([flow], start=T0, substitutes=subs) as h:
        started = await h.start("p.long", {})
        inst = await h.wait_until(lambda i: i.state.ended, started.instance.id, limit=200)
        assert inst.state == "completed"
        snap = await h.snapshot(started.instance.id)
        assert [r for r in snap.steps if r.outcome is Outcome.FAILURE] == []
        tries = [(r.scope, r.try_number) for r in snap.steps if r.kind is StepKind.STEP]
        assert tries[-1] == (1, 1)  # attempt 1 succeeded at its first try
        assert h.clock.now() - T0 > timedelta(minutes=5)


def deadline_flow(name: str, deadline: timedelta) -> Flow:
    flow = Flow(name, "1.0.0", input=Order, deadline=deadline)
    flow.step(Start())
    flow.poll_until(Check(), until=done, interval=Backoff.fixed(10 * S), timeout=5 * 3600 * S)
    flow.step(Call())
    return flow


async def test_among_deferred_work_the_nearest_deadline_goes_first() -> None:
    flows = [deadline_flow(f"p.d{h}", timedelta(hours=h)) for h in (3, 2, 1)]
    checks = Scripted(Status(done=False), Status(done=False), Status(done=False), Status(done=True))
    async with FlowHarness.open(flows, start=T0, substitutes={"t.check": checks}) as h:
        ids = {}
        for hours in (3, 2, 1):  # started farthest deadline first
            ids[hours] = (await h.start(f"p.d{hours}", {})).instance.id
        h.clock.set(T0 + 10 * S)  # every poll's attempt 1 is due: one sweep claims all
        report = await h.sweep()
        assert report.claimed == 3
        calls = {hours: await h.calls(i, "p.call") for hours, i in ids.items()}
        assert calls == {1: 1, 2: 0, 3: 0}
        two, three = await h.instance(ids[2]), await h.instance(ids[3])
        assert (two.wake_kind, three.wake_kind) == ("provider_budget", "provider_budget")
        assert two.wake_at is not None and three.wake_at is not None
        assert two.wake_at < three.wake_at


async def test_two_engines_on_one_store_stay_within_the_limit(store_url: str) -> None:
    provider = Provider("shared", rate_per_second=5.0, burst=1)

    class Shared(Call):
        id = "p.shared"

    Shared.provider = provider
    flow = Flow("p.shared", "1.0.0", input=Order).step(Shared())
    async with FlowHarness.open([flow], start=T0, database_url=store_url) as h:
        other = h.with_engine(node_id="other")
        ids = [(await h.start("p.shared", {})).instance.id for _ in range(30)]
        for turn in range(400):
            target = await h.store.reads.next_wake()
            if target is None:
                break
            if target > h.clock.now():
                h.clock.set(target)
            await (other if turn % 2 else h.engine).sweep()
        starts = []
        for i in ids:
            starts += [r.started_at for r in (await h.snapshot(i)).steps]
        starts.sort()
        assert len(starts) == 30  # every call made, once
        for first in starts:  # in any 1 s window: the rate plus the bucket
            assert sum(1 for s in starts if first <= s < first + S) <= 5 + 1
        for i in ids:
            assert (await h.instance(i)).state == InstanceState.COMPLETED


class Flaky(Capability):
    id = "p.flaky"
    idempotent = True
    options = CapabilityOptions(
        retry=RetryPolicy(initial_interval=10 * S, maximum_tries=3, jitter=0.5)
    )

    async def execute(self, ctx: StepContext) -> None:
        return None


async def test_retry_jitter_spreads_the_retries_of_instances_that_failed_together() -> None:
    flow = Flow("p.flaky", "1.0.0", input=Order).step(Flaky())
    subs = {"p.flaky": Scripted(RuntimeError("down"))}
    async with FlowHarness.open([flow], start=T0, substitutes=subs) as h:
        ids = [(await h.start("p.flaky", {})).instance.id for _ in range(20)]
        wakes: list[datetime] = []
        for i in ids:
            inst = await h.instance(i)
            assert inst.wake_kind == WakeKind.RETRY and inst.wake_at is not None
            (row,) = (await h.snapshot(i)).steps
            assert row.next_try_at == inst.wake_at
            wakes.append(inst.wake_at)
        assert len(set(wakes)) == 20  # no two retries at one instant
        assert all(T0 + 5 * S <= w <= T0 + 10 * S for w in wakes)
        assert max(wakes) - min(wakes) > 2 * S


class Watch(Capability):
    """A heartbeating wait on a provider: checkpoints, then the provider pushes back once."""

    id = "p.watch"
    idempotent = True
    provider = Provider("watched", rate_per_second=10.0, burst=5)
    options = CapabilityOptions(heartbeat_timeout=timedelta(seconds=30))
    seen: ClassVar[list[object]] = []

    async def execute(self, ctx: StepContext) -> None:
        Watch.seen.append(ctx.last_heartbeat_value(str))
        if len(Watch.seen) == 1:
            await ctx.heartbeat("page-3")
            raise ProviderPushback(timedelta(seconds=20), status=429)


async def test_a_heartbeating_try_pushed_back_parks_and_keeps_its_checkpoint() -> None:
    Watch.seen.clear()
    flow = Flow("p.watch", "1.0.0", input=Order).step(Watch())
    async with FlowHarness.open([flow], start=T0) as h:
        started = await h.start("p.watch", {})
        await h.engine.drain()
        inst = await h.instance(started.instance.id)
        assert (inst.state, inst.wake_kind) == ("suspended", "provider_pushback")
        assert inst.try_step_id is None  # the try in flight was cleared by the park
        assert await _rows(h, started.instance.id) == []
        await h.advance_to_next_wake(started.instance.id)
        await h.engine.drain()
        snap = await h.snapshot(started.instance.id)
        assert snap.instance.state == "completed"
        assert Watch.seen == [None, "page-3"]  # the next try read the checkpoint
        assert [r.try_number for r in snap.steps] == [1]


async def test_a_deferral_never_parks_past_the_flow_deadline() -> None:
    flow = call_flow("p.due", deadline=5 * S)
    async with FlowHarness.open([flow], start=T0) as h:
        await h.start("p.due", {})  # takes the one token
        h.engine.providers._of(SLOW).cursor = T0 + 60 * S  # deferred work queued for a minute
        late = await h.start("p.due", {})
        inst = await h.instance(late.instance.id)
        assert (inst.wake_kind, inst.wake_at) == ("provider_budget", T0 + 5 * S)
        await h.advance_to_next_wake(late.instance.id)
        ended = await h.instance(late.instance.id)
        assert ended.state == "failed" and ended.failure is not None
        assert ended.failure.code == "flow.deadline_exceeded"
        assert await h.calls(late.instance.id, "p.call") == 0


class UndoCall(Capability):
    id = "p.undo"
    idempotent = True
    provider = SLOW

    async def execute(self, ctx: StepContext) -> None:
        return None


async def test_a_compensation_without_budget_is_deferred_while_unwinding() -> None:
    flow = Flow("p.undo", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(UndoCall())
    flow.await_signal(READY, timeout=timedelta(hours=1))
    async with FlowHarness.open([flow], start=T0) as h:
        ids = [(await h.start("p.undo", {})).instance.id for _ in range(2)]
        first, second = [await h.engine.cancel(i) for i in ids]
        assert first.state == "cancelled"
        assert (second.state, second.wake_kind) == ("suspended", "provider_budget")
        assert second.ending == "cancelled"
        await h.advance_to_next_wake(ids[1])
        done = await h.snapshot(ids[1])
        assert done.instance.state == "cancelled"
        assert [r.kind for r in done.steps if r.capability_id == "p.undo"] == [
            StepKind.COMPENSATION
        ]


class PacedCheck(Check):
    id = "p.paced"
    provider = Provider("paced", rate_per_second=4.0, burst=1)


async def test_overdue_instances_after_a_restart_go_out_at_the_providers_pace() -> None:
    flow = Flow("p.paced", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(PacedCheck(), until=done, interval=Backoff.fixed(10 * S), timeout=3600 * S)
    subs = {"p.paced": Scripted(*[Status(done=False)] * 4, Status(done=True))}
    async with FlowHarness.open([flow], start=T0, substitutes=subs) as h:
        ids = []
        for _ in range(4):  # attempt 0 of each, within the provider's first second
            ids.append((await h.start("p.paced", {})).instance.id)
            h.clock.advance(S / 4)
        h.clock.set(T0 + 300 * S)  # no node was up: every attempt 1 is long overdue
        for _ in range(100):
            states = [(await h.instance(i)).state for i in ids]
            if all(state == "completed" for state in states):
                break
            await h.advance_to_next_wake()
        starts = []
        for i in ids:
            snap = await h.snapshot(i)
            assert snap.instance.state == "completed"
            starts += [r.started_at for r in snap.steps if r.scope == 1 and r.kind is StepKind.STEP]
        starts.sort()
        assert len(starts) == 4
        assert starts[0] == T0 + 300 * S  # the first goes at once
        gaps = [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]
        assert all(gap >= 0.24 for gap in gaps), gaps  # then one per 1/4 s, not all at once


async def test_a_try_whose_slot_is_near_waits_for_it_in_process_not_parked() -> None:
    import asyncio

    from flowpark.engine.config import EngineConfig
    from tests.support.eventually import eventually

    config = EngineConfig(node_id="harness", provider_wait=S)  # as on a real clock
    async with FlowHarness.open([call_flow()], start=T0, config=config) as h:
        first = await h.start("p.calls", {})
        assert first.instance.state == "completed"  # the slot due now
        waiting = asyncio.create_task(h.start("p.calls", {}))
        # the next slot is 1 s ahead (1 call/s): the run waits on the engine clock for it
        await eventually(lambda: h.clock.next_sleeper_due() == T0 + S, timeout=10)
        assert not waiting.done()
        h.clock.set(T0 + S)
        second = await waiting
        snap = await h.snapshot(second.instance.id)
        assert snap.instance.state == "completed"  # never parked: no deferral
        (row,) = snap.steps
        assert row.started_at == T0 + S  # the call went out at its slot, not before


def test_a_lowered_reason_reads_for_people_when_the_retry_after_was_parsed_a_moment_ago() -> None:
    # the engine's clock moved on between parsing the header (Retry-After: 2) and writing the
    # reason: the seconds are the provider's, not 1.99991; the instant is to the second
    now = T0 + timedelta(microseconds=761_480)
    pushed = PushedBack(now + timedelta(seconds=1.99991), 429, "HTTP 429")
    decision = cast(Execute, SimpleNamespace(capability_id="p.ocr"))
    reason = pushback_reason(pushed, decision, now)
    assert reason == f"429 from p.ocr at {T0.isoformat(timespec='seconds')}; Retry-After 2 s"
