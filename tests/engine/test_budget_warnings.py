"""A wait's warning before its budget ends (``warn_before``), on the virtual clock and both
stores: its instant is stored with the budget before the first call; reached, it writes the
event ``budget.warning`` once and the wait goes on (no extra attempt); the hard end behaves as
before; an extension moves both; an ``await_signal`` warns the same way."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flowpark.engine.decide.deadlines import (
    BUDGET_WARNING,
    POLL_BUDGET,
    ends_at,
    open_budget,
    warns_at,
)
from flowpark.engine.node.operator import extend_budget
from flowpark.engine.records import InstanceState, StepKind
from flowpark.flows import Backoff, Flow
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Check, Order, Start, Status, done

EVERY_MINUTE = Backoff.fixed(timedelta(minutes=1))


def _poll(warn_before: Any) -> Flow:
    flow = Flow("t.warn", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(
        Check(),
        until=done,
        interval=EVERY_MINUTE,
        timeout=timedelta(minutes=10),
        reads=(Status,),
        warn_before=warn_before,
    )
    return flow


def _await(warn_before: Any) -> Flow:
    flow = Flow("t.warn-await", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(READY, timeout=timedelta(hours=1), warn_before=warn_before)
    return flow


def _subs() -> dict[str, Scripted]:
    return {"t.start": Scripted(None), "t.check": Scripted(Status(done=False))}


async def _warnings(h: FlowHarness) -> list[dict[str, Any]]:
    return [e for e in await h.store.reads.list_events() if e["name"] == BUDGET_WARNING]


async def test_a_poll_warns_once_at_its_stored_instant_and_still_times_out(store_url: str) -> None:
    async with FlowHarness.open(
        [_poll("PT2M30S")], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.warn", {})).instance
        entered = h.clock.now()
        snap = await h.snapshot(inst.id)
        budget = next(r for r in snap.steps if r.capability_id == POLL_BUDGET)
        first_call = next(r for r in snap.steps if r.capability_id == "t.check")
        # stored with the budget, before attempt 0's call
        assert budget.sequence is not None and first_call.sequence is not None
        assert budget.sequence < first_call.sequence
        assert ends_at(budget) == entered + timedelta(minutes=10)
        assert warns_at(budget) == entered + timedelta(minutes=7, seconds=30)

        calls_at_warning = None
        while (await h.instance(inst.id)).state is InstanceState.SUSPENDED:
            await h.advance_to_next_wake(inst.id)
            snap = await h.snapshot(inst.id)
            shown = open_budget(snap.instance.state, snap.steps)
            if shown is not None:  # what the instance view and the budget bar show
                assert shown.warn_at == entered + timedelta(minutes=7, seconds=30)
                assert shown.warned == (h.clock.now() >= shown.warn_at)
            if calls_at_warning is None and await _warnings(h):
                assert h.clock.now() == entered + timedelta(minutes=7, seconds=30)
                calls_at_warning = await h.calls(inst.id, "t.check")
                assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        final = await h.instance(inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "flow.poll_not_satisfied"
        assert h.clock.now() == entered + timedelta(minutes=10)
        [event] = await _warnings(h)
        assert event["payload"]["instanceId"] == inst.id and event["payload"]["wait"] == "poll"
        # the warning's wake made no call: attempts 0-7 before it, 8 and 9 after
        assert calls_at_warning == 8
        assert await h.calls(inst.id, "t.check") == 10


async def test_a_fraction_warns_that_share_of_the_budget_before_the_end(store_url: str) -> None:
    async with FlowHarness.open(
        [_poll(0.25)], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.warn", {})).instance
        budget = next(r for r in (await h.snapshot(inst.id)).steps if r.kind is StepKind.DEADLINE)
        assert warns_at(budget) == ends_at(budget) - timedelta(minutes=2, seconds=30)


async def test_an_extension_moves_the_warning_with_the_end(store_url: str) -> None:
    async with FlowHarness.open(
        [_poll("PT2M30S")], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.warn", {})).instance
        entered = h.clock.now()
        for _ in range(3):
            await h.advance_to_next_wake(inst.id)
        extension = await extend_budget(h.engine, inst.id, timedelta(minutes=10))
        assert extension.ends_at == entered + timedelta(minutes=20)
        rows = [r for r in (await h.snapshot(inst.id)).steps if r.kind is StepKind.DEADLINE]
        assert warns_at(rows[-1]) == entered + timedelta(minutes=17, seconds=30)
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert h.clock.now() == entered + timedelta(minutes=20)
        [event] = await _warnings(h)
        assert (
            event["payload"]["warnAt"] == (entered + timedelta(minutes=17, seconds=30)).isoformat()
        )


async def test_an_await_signal_warns_and_still_takes_its_signal(store_url: str) -> None:
    async with FlowHarness.open(
        [_await(0.25)], database_url=store_url, migrate=False, substitutes=_subs()
    ) as h:
        inst = (await h.start("t.warn-await", {})).instance
        entered = h.clock.now()
        parked = await h.instance(inst.id)
        assert parked.wake_at == entered + timedelta(minutes=45)  # the warning first
        await h.advance_to_next_wake(inst.id)
        [event] = await _warnings(h)
        assert event["payload"]["endsAt"] == (entered + timedelta(hours=1)).isoformat()
        warned = await h.instance(inst.id)
        assert warned.state is InstanceState.SUSPENDED
        assert warned.wake_at == entered + timedelta(hours=1)  # then the timeout
        h.clock.advance(timedelta(minutes=5))
        await h.signal(inst.id, READY.name, {"job_id": "j"})
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.COMPLETED
        assert len(await _warnings(h)) == 1


def test_a_warning_must_come_before_the_end() -> None:
    for bad in ("PT10M", "PT11M", 1.0, 0.0, -0.5, "PT0S"):
        with pytest.raises(ValueError, match="warn_before"):
            _poll(bad)
    with pytest.raises(ValueError, match="needs a timeout"):
        Flow("t.x", "1.0.0", input=Order).await_signal(READY, warn_before="PT1M")
