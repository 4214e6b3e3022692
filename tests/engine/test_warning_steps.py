"""A wait's ``on_warning`` capability (the budget ladder's first rung), on the virtual clock
and both stores: it runs once at the warning's stored instant, after the ``budget.warning``
event, without ending or moving the wait; the hard end behaves as before; an extension moves
both; an ``await_signal``'s still takes its signal afterwards."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowpark.engine.decide.deadlines import BUDGET_WARNING
from flowpark.engine.node.operator import extend_budget
from flowpark.engine.records import InstanceState, Outcome
from flowpark.flows import Capability, CapabilityOptions, Flow, RetryPolicy, StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Check, Order, Start, Status, done


class AskForReview(Capability):
    """Requests a review once; fails its first ``failures`` tries."""

    id = "t.ask_review"
    idempotent = True
    options = CapabilityOptions(
        retry=RetryPolicy(initial_interval=timedelta(seconds=20), maximum_tries=3)
    )

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.tries = 0

    async def execute(self, ctx: StepContext) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise RuntimeError("the paging service is down")
        ctx.request_review("o-1", "the budget is nearly spent")


def _poll(ask: AskForReview) -> Flow:
    from flowpark.flows import Backoff

    flow = Flow("t.ladder", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(
        Check(),
        until=done,
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(minutes=10),
        reads=(Status,),
        warn_before="PT2M30S",
        on_warning=ask,
    )
    return flow


def _subs() -> dict[str, Scripted]:
    return {"t.start": Scripted(None), "t.check": Scripted(Status(done=False))}


async def _reviews(h: FlowHarness) -> list[dict[str, Any]]:
    return await h.store.reads.list_reviews()


async def _warned_at(h: FlowHarness) -> list[Any]:
    return [
        e["created_at"] for e in await h.store.reads.list_events() if e["name"] == BUDGET_WARNING
    ]


async def test_the_warning_runs_its_capability_once_and_the_wait_still_times_out(
    store_url: str,
) -> None:
    ask = AskForReview()
    async with FlowHarness.open(
        [_poll(ask)], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.ladder", {})).instance
        entered = h.clock.now()
        warn_at = entered + timedelta(minutes=7, seconds=30)
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "flow.poll_not_satisfied"
        assert h.clock.now() == entered + timedelta(minutes=10)  # the hard end, unmoved
        assert ask.tries == 1 and await h.calls(inst.id, "t.ask_review") == 1
        [review] = await _reviews(h)
        assert (review["instance_id"], review["created_at"]) == (inst.id, warn_at)
        assert await _warned_at(h) == [warn_at]
        # the warning's run made no status call: attempts 0-9, as without a warning
        assert await h.calls(inst.id, "t.check") == 10


async def test_a_failing_warning_capability_retries_while_the_wait_goes_on(
    store_url: str,
) -> None:
    ask = AskForReview(failures=1)
    async with FlowHarness.open(
        [_poll(ask)], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.ladder", {})).instance
        entered = h.clock.now()
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert h.clock.now() == entered + timedelta(minutes=10)
        rows = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.ask_review"]
        assert [r.outcome for r in rows] == [Outcome.FAILURE, Outcome.SUCCESS]
        assert rows[1].started_at == entered + timedelta(minutes=7, seconds=50)  # +20 s
        assert len(await _reviews(h)) == 1
        assert await h.calls(inst.id, "t.check") == 10


async def test_an_extension_moves_the_warning_capability_with_the_end(store_url: str) -> None:
    ask = AskForReview()
    async with FlowHarness.open(
        [_poll(ask)], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.ladder", {})).instance
        entered = h.clock.now()
        for _ in range(3):
            await h.advance_to_next_wake(inst.id)
        await extend_budget(h.engine, inst.id, timedelta(minutes=10))
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert h.clock.now() == entered + timedelta(minutes=20)
        [review] = await _reviews(h)
        assert review["created_at"] == entered + timedelta(minutes=17, seconds=30)
        assert ask.tries == 1


async def test_an_await_signals_warning_capability_runs_then_the_signal_ends_it(
    store_url: str,
) -> None:
    ask = AskForReview()
    flow = Flow("t.ladder-await", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(READY, timeout=timedelta(hours=1), warn_before=0.25, on_warning=ask)
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.ladder-await", {})).instance
        entered = h.clock.now()
        await h.advance_to_next_wake(inst.id)  # the warning
        [review] = await _reviews(h)
        assert review["created_at"] == entered + timedelta(minutes=45)
        warned = await h.instance(inst.id)
        assert warned.state is InstanceState.SUSPENDED
        assert warned.wake_at == entered + timedelta(hours=1)  # then the timeout
        h.clock.advance(timedelta(minutes=5))
        await h.signal(inst.id, READY.name, {"job_id": "j"})
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.COMPLETED
        assert ask.tries == 1


def test_on_warning_needs_a_warning_instant() -> None:
    from flowpark.flows import Backoff

    with pytest.raises(ValueError, match="on_warning needs warn_before"):
        Flow("t.x", "1.0.0", input=Order).poll_until(
            Check(),
            until=done,
            interval=Backoff.fixed("PT1M"),
            timeout="PT1H",
            on_warning=AskForReview(),
        )
    with pytest.raises(ValueError, match="on_warning needs warn_before"):
        Flow("t.x", "1.0.0", input=Order).await_signal(
            READY, timeout="PT1H", on_warning=AskForReview()
        )


async def test_a_poll_that_is_the_first_step_stores_and_gives_its_warning() -> None:
    from flowpark.flows import Backoff

    class Looks(Capability):
        id = "t.check"
        idempotent = True
        puts = (Status,)

        async def execute(self, ctx: StepContext) -> None:
            return None

    ask = AskForReview()
    flow = Flow("t.first", "1.0.0", input=Order).poll_until(
        Looks(),
        until=done,
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(minutes=10),
        reads=(Status,),
        warn_before="PT2M",
        on_warning=ask,
    )
    async with FlowHarness.open([flow], substitutes=_subs()) as h:
        inst = (await h.start("t.first", {})).instance  # the budget row comes with the start
        entered = h.clock.now()
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert await _warned_at(h) == [entered + timedelta(minutes=8)]
        assert ask.tries == 1


async def test_an_await_signal_takes_its_signal_while_its_warning_capability_waits_to_retry(
    store_url: str,
) -> None:
    ask = AskForReview(failures=1)
    flow = Flow("t.ladder-retry", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(READY, timeout=timedelta(hours=1), warn_before=0.25, on_warning=ask)
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.ladder-retry", {})).instance
        await h.advance_to_next_wake(inst.id)  # the warning: its capability fails once
        assert ask.tries == 1
        parked = await h.instance(inst.id)
        assert parked.state is InstanceState.SUSPENDED
        h.clock.advance(timedelta(seconds=5))  # before the retry is due
        answer = await h.signal(inst.id, READY.name, {"job_id": "j"})
        assert answer.matched is True
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.COMPLETED
        assert ask.tries == 1 and await _reviews(h) == []
