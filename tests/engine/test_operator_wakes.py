"""An operator's wake on the virtual clock: the wait it woke runs at once, also when its
provider has no budget then (the deferral keeps the wake: the try runs when budget comes,
not at its schedule), and a wake a bulk action recorded runs at the next sweep, at the
provider's pace."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from flowpark.engine.ports.operator import OperatorAction, WakeBatch, WakeMark
from flowpark.engine.records import InstanceState, StepKind, WakeKind
from flowpark.flows import Capability, CapabilityOptions, Flow, Provider, RetryPolicy, StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Order

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
S = timedelta(seconds=1)
HOUR = timedelta(hours=1)
#: an order id starting with this fails its first try (the next one is due an hour later)
FAILING = "fail-"


class Submit(Capability):
    """One call of a provider that takes one call a second; a failed try is retried an
    hour later."""

    id = "w.submit"
    idempotent = True
    provider = Provider("limited", rate_per_second=1.0, burst=1)
    puts = (Job,)
    options = CapabilityOptions(
        retry=RetryPolicy(initial_interval=HOUR, maximum_interval=HOUR, maximum_tries=5)
    )

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job(job_id="j"))


def _play(ctx: StepContext) -> BaseModel:
    if ctx.input.order_id.startswith(FAILING) and ctx.try_number == 1:
        raise RuntimeError("provider answered 503")
    return Job(job_id="j")


def _harness() -> AbstractAsyncContextManager[FlowHarness]:
    flow = Flow("w.submit", "1.0.0", input=Order).step(Submit())
    return FlowHarness.open([flow], start=T0, substitutes={"w.submit": Scripted(_play)})


async def _try_starts(h: FlowHarness, instance_id: str) -> list[datetime]:
    snap = await h.snapshot(instance_id)
    return [r.started_at for r in snap.steps if r.kind is StepKind.STEP]


async def _retrying(h: FlowHarness, order_id: str) -> str:
    """An instance whose first try failed now: its next try is due in an hour."""
    inst = (await h.start("w.submit", {"order_id": order_id})).instance
    assert (inst.state, inst.wake_kind) == (InstanceState.SUSPENDED, WakeKind.RETRY)
    assert inst.wake_at is not None and inst.wake_at >= h.clock.now() + HOUR
    return inst.id


async def test_a_woken_retry_deferred_for_budget_runs_when_budget_comes_not_at_its_schedule() -> (
    None
):
    async with _harness() as h:
        retrying = await _retrying(h, f"{FAILING}a")  # the slot of T0
        h.clock.set(T0 + 10 * S)
        other = await h.start("w.submit", {"order_id": "b"})  # the slot of T0 + 10 s
        assert other.instance.state is InstanceState.COMPLETED
        await h.engine.wake_now(retrying)  # no budget before T0 + 11 s: deferred
        inst = await h.instance(retrying)
        assert (inst.wake_kind, inst.wake_at, inst.woken) == (
            WakeKind.PROVIDER_BUDGET,
            T0 + 11 * S,
            True,
        )
        await h.advance_to_next_wake(retrying)
        inst = await h.instance(retrying)
        # the woken try went out with the provider's next slot, an hour before its schedule
        assert inst.state is InstanceState.COMPLETED and not inst.woken
        assert await _try_starts(h, retrying) == [T0, T0 + 11 * S]


async def test_wakes_a_bulk_action_recorded_run_at_the_next_sweep_at_the_providers_pace() -> None:
    async with _harness() as h:
        ids = []
        for n in range(3):  # one slot each: T0, T0 + 1 s, T0 + 2 s
            ids.append(await _retrying(h, f"{FAILING}{n}"))
            h.clock.advance(S)
        h.clock.set(T0 + 10 * S)
        now = h.clock.now()
        actions = tuple(
            OperatorAction(f"act-{n}", i, "wake", "ops", now, idempotency_key="bulk:k")
            for n, i in enumerate(ids)
        )

        def details(mark: WakeMark) -> dict[str, object]:
            return {"answer": {"instanceId": mark.instance_id, "woken": mark.marked}}

        done = await h.store.operator.record_wakes(WakeBatch(actions, now, details))
        assert [d.mark.marked for d in done if d.mark is not None] == [True] * 3
        for i in ids:  # recorded: nothing ran yet
            inst = await h.instance(i)
            assert (inst.wake_at, inst.woken) == (now, True)
            assert len(await _try_starts(h, i)) == 1
            assert [
                (a.action, a.actor, a.acted_at) for a in await h.store.operator.actions_of(i)
            ] == [("wake", "ops", now)]
        for _ in range(10):
            states = [(await h.instance(i)).state for i in ids]
            if all(state.ended for state in states):
                break
            await h.advance_to_next_wake()
        seconds = []
        for i in ids:
            inst = await h.instance(i)
            assert inst.state is InstanceState.COMPLETED and not inst.woken
            first, second = await _try_starts(h, i)
            seconds.append((second - T0).total_seconds())
        # every woken try went out, one per second as the provider allows, an hour early
        assert sorted(seconds) == [10.0, 11.0, 12.0]
