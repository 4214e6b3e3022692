"""The limits of one try (``Engine.limits``: ``CallLimits.call``) on the virtual clock,
with an in-memory journal: ``execute_timeout``, the lease keeper (renewal every third of
the lease, a retry after a tenth when the store is unreachable, a refused renewal ending
the try, a renewal in flight finishing), the heartbeat watchdog, the pre-call renewal and
the run's cancellation. Time moves only when a test moves the clock."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from flowpark.engine.clock import VirtualClock
from flowpark.engine.context import ExecutionContext
from flowpark.engine.execute.executor import Executor
from flowpark.engine.execute.limits import CapabilityTimeout
from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.engine.records import Ack, Claim, InstanceRecord, InstanceState
from flowpark.errors import StaleFencingToken, StoreUnavailable
from flowpark.flows import Capability, CapabilityOptions, Flow, StepContext
from flowpark.flows.catalog import Catalog
from flowpark.outages import OUTAGES
from flowpark.store.memory_providers import MemoryProviderLimits  # noqa: E402
from tests.support.eventually import eventually

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
S = timedelta(seconds=1)


class In(BaseModel):
    pass


class RenewingStore:
    """``renew_lease`` records each renewal's ``lease_until`` and plays ``outcomes`` in
    turn: None (renewed), an exception to raise, or an Event to wait for first."""

    def __init__(self) -> None:
        self.renewals: list[datetime] = []
        self.outcomes: list[BaseException | asyncio.Event | None] = []
        self.providers = MemoryProviderLimits()  # the engine's budget is built over it

    @property
    def runs(self) -> RenewingStore:
        """A run's port: the lease keeper's renewals and a heartbeat's writes (this fake
        plays them)."""
        return self

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        self.renewals.append(lease_until)
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if isinstance(outcome, asyncio.Event):
            await outcome.wait()
        elif outcome is not None:
            raise outcome
        return Ack()

    async def record_heartbeat(self, *args: Any) -> Ack:
        return Ack()


class Body(Capability):
    """A capability whose body is a test function; records how its tries ended."""

    id = "t.body"

    def __init__(self, body: Callable[[StepContext], Any]) -> None:
        self.body = body
        self.cancelled = 0
        self.entered = asyncio.Event()

    async def execute(self, ctx: StepContext) -> Any:
        self.entered.set()
        try:
            return await self.body(ctx)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


class World:
    def __init__(self) -> None:
        self.clock = VirtualClock(T0)
        self.store = RenewingStore()
        flow = Flow("t.limits", "1.0.0", input=In)
        flow.step(Body(hang))
        catalog = Catalog()
        catalog.register(flow)
        self.engine = Engine(
            self.store,  # type: ignore[arg-type]  # a stand-in with renew_lease only
            catalog,
            self.clock,
            EngineConfig(node_id="n", lease=LEASE),
        )
        plan = catalog.latest("t.limits")
        record = InstanceRecord(
            id="i-1",
            flow_name=plan.name,
            flow_version=plan.version,
            state=InstanceState.RUNNING,
            input={},
            created_at=T0,
            updated_at=T0,
            lease_expires_at=T0 + LEASE,
        )
        self.run = Executor(self.engine, plan, record, Claim(record.id, 7), [], [])

    def call(self, cap: Capability, opts: CapabilityOptions) -> asyncio.Task[Any]:
        ctx = ExecutionContext(
            self.run,
            step_id=0,
            scope=0,
            try_number=1,
            recovery_error=None,
            checkpoint=None,
            heartbeat_timeout=opts.heartbeat_timeout,
        )
        return asyncio.ensure_future(self.engine.limits.call(cap, ctx, opts, self.run))


async def hang(ctx: StepContext) -> None:
    await asyncio.Future()


#: loop turns a wait on the virtual clock may take (no wall-clock time passes)
TURNS = 1000
PLAIN = CapabilityOptions(execute_timeout=timedelta(hours=1))
BEATING = CapabilityOptions(execute_timeout=timedelta(hours=1), heartbeat_timeout=30 * S)


async def test_a_short_try_costs_one_task_and_leaves_no_timer_behind() -> None:
    w = World()
    seen: list[int] = []

    async def body(ctx: StepContext) -> str:
        seen.append(len(asyncio.all_tasks()))
        return "done"

    assert await w.call(Body(body), PLAIN) == "done"
    assert await w.call(Body(body), BEATING) == "done"
    # this test, the call and its capability: no timer, keeper or watchdog task
    assert seen == [3, 3]
    assert w.clock.next_sleeper_due() is None
    assert w.store.renewals == []


async def test_execute_timeout_is_measured_on_the_engine_clock() -> None:
    w = World()
    cap = Body(hang)
    call = w.call(cap, CapabilityOptions(execute_timeout=5 * S))
    await cap.entered.wait()
    w.clock.advance(5 * S - timedelta(microseconds=1))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not call.done()
    w.clock.advance(timedelta(microseconds=1))
    with pytest.raises(CapabilityTimeout) as info:
        await call
    assert info.value.kind == "execute_timeout"
    assert str(info.value) == "t.body did not finish within 0:00:05"
    assert cap.cancelled == 1
    assert w.clock.next_sleeper_due() is None


async def test_the_keeper_renews_whenever_two_thirds_of_the_lease_are_left() -> None:
    w = World()
    cap = Body(hang)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    assert w.clock.next_sleeper_due() == T0 + LEASE / 3
    for n in range(1, 4):
        w.clock.advance(LEASE / 3)
        await eventually(
            functools.partial(
                lambda n: (
                    len(w.store.renewals) == n
                    and w.clock.next_sleeper_due() == w.clock.now() + LEASE / 3
                ),
                n,
            ),
            what=f"renewal {n} and the keeper asleep",
            turns=TURNS,
        )
        assert w.run.lease_expires_at == w.clock.now() + LEASE
    assert w.store.renewals == [T0 + LEASE / 3 * n + LEASE for n in (1, 2, 3)]
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert cap.cancelled == 1


async def test_a_renewal_the_store_cannot_make_is_tried_again_after_a_tenth_of_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    OUTAGES.recovered("lease")  # a line of its own, whatever another test logged before
    w = World()
    w.store.outcomes = [StoreUnavailable("database unreachable")]
    cap = Body(hang)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    w.clock.advance(LEASE / 3)
    await eventually(
        lambda: w.clock.next_sleeper_due() == T0 + LEASE / 3 + LEASE / 10,
        what="the retry timer",
        turns=TURNS,
    )
    assert w.run.lease_expires_at == T0 + LEASE  # not renewed
    assert "store unavailable (lease): database unreachable" in caplog.text
    w.clock.advance(LEASE / 10)
    await eventually(
        lambda: len(w.store.renewals) == 2 and w.run.lease_expires_at == w.clock.now() + LEASE,
        what="the retry",
        turns=TURNS,
    )
    assert not call.done()
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)


async def test_a_refused_renewal_ends_the_try_at_once() -> None:
    w = World()
    refused = StaleFencingToken("stale")
    w.store.outcomes = [refused]
    cap = Body(hang)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    w.clock.advance(LEASE / 3)
    with pytest.raises(StaleFencingToken) as info:
        await call
    assert info.value is refused
    assert cap.cancelled == 1
    assert w.clock.next_sleeper_due() is None


async def test_a_renewal_in_flight_finishes_when_the_try_ends() -> None:
    w = World()
    release = asyncio.Event()
    w.store.outcomes = [release]
    finish = asyncio.Event()

    async def body(ctx: StepContext) -> str:
        await finish.wait()
        return "done"

    cap = Body(body)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    w.clock.advance(LEASE / 3)
    await eventually(lambda: len(w.store.renewals) == 1, what="the renewal started", turns=TURNS)
    finish.set()  # the capability returns while the renewal waits on the store
    for _ in range(20):
        await asyncio.sleep(0)
    assert not call.done()
    release.set()
    assert await call == "done"
    assert w.run.lease_expires_at == T0 + LEASE / 3 + LEASE  # the renewal completed
    assert cap.cancelled == 0
    assert w.clock.next_sleeper_due() is None  # and the keeper did not go on


async def test_a_try_starts_on_a_renewed_lease_when_less_than_two_thirds_are_left() -> None:
    w = World()
    w.clock.advance(LEASE / 3 + S)  # 19 s of 30 left
    seen: list[int] = []

    async def body(ctx: StepContext) -> None:
        seen.append(len(w.store.renewals))

    await w.call(Body(body), PLAIN)
    assert seen == [1]
    assert w.store.renewals == [T0 + LEASE / 3 + S + LEASE]

    w = World()
    w.clock.advance(LEASE / 3)  # exactly two thirds left: the try starts at once
    seen.clear()

    async def hangs(ctx: StepContext) -> None:
        seen.append(len(w.store.renewals))
        await asyncio.Future()

    cap = Body(hangs)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    assert seen == [0]
    # the keeper renews on the loop's next turns, the clock standing still
    await eventually(lambda: len(w.store.renewals) == 1, what="the keeper's renewal", turns=TURNS)
    assert w.store.renewals == [w.clock.now() + LEASE]
    assert not call.done()
    call.cancel()
    await asyncio.gather(call, return_exceptions=True)


async def test_a_refused_pre_call_renewal_starts_no_try() -> None:
    w = World()
    w.clock.advance(LEASE)
    w.store.outcomes = [StaleFencingToken("stale")]
    cap = Body(hang)
    with pytest.raises(StaleFencingToken):
        await w.call(cap, PLAIN)
    assert not cap.entered.is_set()


async def test_the_watchdog_ends_a_try_whose_heartbeats_stop() -> None:
    w = World()
    w.clock.advance(LEASE)  # a heartbeating try renews nothing: its heartbeats do
    beat = asyncio.Event()

    async def body(ctx: StepContext) -> None:
        while True:
            await beat.wait()
            beat.clear()
            await ctx.heartbeat("alive")

    cap = Body(body)
    call = w.call(cap, BEATING)
    await cap.entered.wait()
    started = w.clock.now()
    w.clock.advance(20 * S)
    beat.set()
    await eventually(lambda: not beat.is_set(), what="the heartbeat", turns=TURNS)
    w.clock.advance(10 * S)  # 30 s since the start, 10 s since the heartbeat
    for _ in range(20):
        await asyncio.sleep(0)
    assert not call.done()
    assert w.clock.next_sleeper_due() == started + 50 * S
    w.clock.advance(20 * S)
    with pytest.raises(CapabilityTimeout) as info:
        await call
    assert info.value.kind == "heartbeat_timeout"
    assert str(info.value) == "t.body recorded no heartbeat for 0:00:30"
    assert cap.cancelled == 1
    assert w.store.renewals == []


async def test_execute_timeout_wins_when_both_timeouts_pass_in_one_move() -> None:
    w = World()
    cap = Body(hang)
    call = w.call(cap, CapabilityOptions(execute_timeout=40 * S, heartbeat_timeout=10 * S))
    await cap.entered.wait()
    w.clock.advance(timedelta(minutes=1))
    with pytest.raises(CapabilityTimeout) as info:
        await call
    assert info.value.kind == "execute_timeout"


async def test_cancelling_the_run_cancels_the_try() -> None:
    w = World()
    cap = Body(hang)
    call = w.call(cap, PLAIN)
    await cap.entered.wait()
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert cap.cancelled == 1
    assert w.clock.next_sleeper_due() is None


async def test_the_capabilitys_own_outcome_is_the_trys() -> None:
    w = World()

    async def fails(ctx: StepContext) -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        await w.call(Body(fails), PLAIN)
    assert w.clock.next_sleeper_due() is None
