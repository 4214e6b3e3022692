"""Correlation: a wait's ``match`` decides which signals belong to it; one that does not
match is kept, marked refused, and ends nothing (both stores)."""

from __future__ import annotations

from datetime import timedelta

from flowpark.engine.records import InstanceState, StepKind
from flowpark.flows import Bag, Flow
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import (
    INTERVAL,
    READY,
    After,
    Check,
    Job,
    Order,
    Ready,
    Start,
    Status,
    Undo,
    done,
)


def _same_job(bag: Bag, signal: Ready) -> bool:
    return signal.job_id == bag.get(Job).job_id


def _matching_poll() -> Flow:
    flow = Flow("t.match", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(Undo())
    flow.poll_until(
        Check(), until=done, interval=INTERVAL, timeout=timedelta(minutes=10), reads=(Status,)
    )
    flow.or_signal(READY, match=_same_job)
    flow.step(After())
    flow.returns(lambda bag: {"job": (bag.find(Ready) or Ready(job_id="-")).job_id})
    return flow


def _matching_await() -> Flow:
    flow = Flow("t.match-await", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(Undo())
    flow.await_signal(READY, timeout=timedelta(hours=1), match=_same_job)
    flow.step(After())
    flow.returns(lambda bag: bag.get(Ready).model_dump())
    return flow


def _subs(check: Scripted) -> dict[str, Scripted]:
    return {
        "t.start": Scripted(Job(job_id="job-7")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.after": Scripted(None),
    }


async def test_a_signal_for_another_job_leaves_the_poll_parked(store_url: str | None) -> None:
    check = Scripted(Status(done=False))
    async with FlowHarness.open(
        [_matching_poll()], database_url=store_url, migrate=False, substitutes=_subs(check)
    ) as h:
        inst = (await h.start("t.match", {"order_id": "o-1"})).instance
        assert inst.state is InstanceState.SUSPENDED
        parked = await h.instance(inst.id)

        stale = await h.engine.deliver(inst.id, "t.ready", {"job_id": "job-made-up"}, "k1")
        assert stale.created and stale.state is InstanceState.SUSPENDED
        assert stale.signal.matched is False and stale.signal.outcome is False
        after = await h.instance(inst.id)
        assert after.state is InstanceState.SUSPENDED
        # the same wait, the same wake: the refused signal moved nothing
        assert (after.wake_step_id, after.wake_scope, after.wake_at) == (
            parked.wake_step_id,
            parked.wake_scope,
            parked.wake_at,
        )
        assert await h.calls(inst.id, "t.ready", StepKind.SIGNAL) == 0
        (kept,) = await h.store.reads.list_signals(inst.id)
        assert kept.matched is False and kept.taken_step_id == after.wake_step_id
        # the next attempt runs as planned, and the refused signal does not come back
        await h.advance_to_next_wake(inst.id)
        assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        assert check.calls == 2

        good = await h.engine.deliver(inst.id, "t.ready", {"job_id": "job-7"}, "k2")
        assert good.signal.outcome is True
        assert good.state is InstanceState.COMPLETED
        final = await h.instance(inst.id)
        assert final.result == {"job": "job-7"}
        signals = await h.store.reads.list_signals(inst.id)
        assert [s.outcome for s in signals] == [False, True]


async def test_an_await_takes_only_its_own_signal_even_from_the_mailbox(
    store_url: str | None,
) -> None:
    holder: dict[str, FlowHarness] = {}

    async def start_with_early_signals(ctx: object) -> Job:
        # two signals arrive while the instance runs: a stale one first, then its own
        h = holder["h"]
        await h.engine.deliver(ctx.instance_id, "t.ready", {"job_id": "old"}, "a")  # type: ignore[attr-defined]
        await h.engine.deliver(ctx.instance_id, "t.ready", {"job_id": "job-7"}, "b")  # type: ignore[attr-defined]
        return Job(job_id="job-7")

    subs = _subs(Scripted(Status()))
    subs["t.start"] = Scripted(start_with_early_signals)
    async with FlowHarness.open(
        [_matching_await()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        holder["h"] = h
        inst = (await h.start("t.match-await", {"order_id": "o-1"})).instance
        assert inst.state is InstanceState.COMPLETED
        assert inst.result == {"job_id": "job-7"}
        first, second = await h.store.reads.list_signals(inst.id)
        assert (first.outcome, second.outcome) == (False, True)


async def test_a_match_that_raises_refuses_and_the_wait_times_out_as_declared() -> None:
    def broken(bag: Bag, signal: Ready) -> bool:
        raise LookupError("no such field")

    flow = Flow("t.broken-match", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(READY, timeout=timedelta(minutes=5), match=broken)
    flow.on_timeout(lambda b: b.fail("t.no_callback", "no callback"))
    async with FlowHarness.open([flow], substitutes=_subs(Scripted(Status()))) as h:
        inst = (await h.start("t.broken-match", {"order_id": "o-1"})).instance
        refused = await h.engine.deliver(inst.id, "t.ready", {"job_id": "job-7"})
        assert refused.signal.outcome is False
        assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        await h.advance_to_next_wake(inst.id)
        final = await h.instance(inst.id)
        assert final.failure is not None and final.failure.code == "t.no_callback"
