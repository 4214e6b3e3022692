"""Compensations honour their retry policy, with parks between tries; one that fails for
good is recorded and shown (both stores)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from flowpark.api.views import answer_json, compensation_failures, instance_view
from flowpark.engine.node.operator import retry_compensations
from flowpark.engine.observe import Observer
from flowpark.engine.ports.operator import InstanceFilter
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    InstanceState,
    Outcome,
    StepKind,
    WakeKind,
)
from flowpark.errors import CompensationNotFailed
from flowpark.flows import CapabilityOptions, Flow, RetryPolicy
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Job, Order, Start

RETRY_DELAY = timedelta(seconds=30)


class UndoWithRetry(Start):
    id = "t.undo"
    idempotent = True
    puts = ()
    options = CapabilityOptions(
        retry=RetryPolicy(initial_interval=RETRY_DELAY, backoff_coefficient=1.0, maximum_tries=3)
    )


class Boom(Start):
    id = "t.boom"
    puts = ()


def _flow() -> Flow:
    flow = Flow("t.undo-retry", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(UndoWithRetry())
    flow.step(Boom())
    return flow


def _subs(undo: Scripted) -> dict[str, Scripted]:
    return {
        "t.start": Scripted(Job(job_id="j")),
        "t.undo": undo,
        "t.boom": Scripted(RuntimeError("provider down")),
    }


async def test_a_compensation_that_fails_twice_is_tried_again_after_durable_waits(
    store_url: str | None,
) -> None:
    closed: list[str] = []
    undo = Scripted(
        RuntimeError("timeout"),
        RuntimeError("timeout"),
        lambda ctx: closed.append(ctx.get(Job).job_id),
    )
    async with FlowHarness.open(
        [_flow()], database_url=store_url, migrate=False, substitutes=_subs(undo)
    ) as h:
        inst = (await h.start("t.undo-retry", {"order_id": "o-1"})).instance
        # the first try failed: the instance parks until the next try is due, holding
        # nothing (no lease), and is not ended yet
        parked = await h.instance(inst.id)
        assert parked.state is InstanceState.SUSPENDED
        assert parked.wake_kind is WakeKind.RETRY and parked.lease_owner is None
        assert parked.wake_at == h.clock.now() + RETRY_DELAY
        assert undo.calls == 1
        # a sweep before the wake does nothing
        await h.advance(RETRY_DELAY / 2)
        assert undo.calls == 1
        await h.advance_to_next_wake(inst.id)
        assert undo.calls == 2
        await h.advance_to_next_wake(inst.id)
        final = await h.instance(inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "flow.step_failed"
        assert closed == ["j"]  # the provider's job is closed
        rows = [r for r in (await h.snapshot(inst.id)).steps if r.kind is StepKind.COMPENSATION]
        assert [(r.try_number, r.outcome) for r in rows] == [
            (1, Outcome.FAILURE),
            (2, Outcome.FAILURE),
            (3, Outcome.SUCCESS),
        ]
        assert compensation_failures(rows) == []


async def test_a_compensation_that_fails_for_good_is_visible_in_the_instance_view(
    store_url: str | None,
) -> None:
    undo = Scripted(RuntimeError("job service says 500"))
    async with FlowHarness.open(
        [_flow()], database_url=store_url, migrate=False, substitutes=_subs(undo)
    ) as h:
        inst = (await h.start("t.undo-retry", {"order_id": "o-1"})).instance
        final = await h.wait_until(lambda i: i.state is not InstanceState.SUSPENDED, inst.id)
        assert final.state is InstanceState.FAILED
        assert undo.calls == 3  # maximum_tries
        snap = await h.snapshot(inst.id)
        view = answer_json(instance_view(snap.instance, snap.steps))
        (failed,) = view["compensationFailures"]
        assert failed["code"] == "compensation_failed"
        assert failed["capabilityId"] == "t.undo"
        assert failed["errorType"] == "RuntimeError"
        assert failed["errorDetail"] == "job service says 500"
        assert failed["tries"] == 3
        assert view["error"]["code"] == "flow.step_failed"


async def test_a_cancel_while_a_compensation_waits_for_its_next_try_does_not_stop_it() -> None:
    undo = Scripted(RuntimeError("timeout"), None)
    async with FlowHarness.open([_flow()], substitutes=_subs(undo)) as h:
        inst = (await h.start("t.undo-retry", {"order_id": "o-1"})).instance
        assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        await h.engine.cancel(inst.id)  # claims it: the try is not due, it parks again
        assert undo.calls == 1
        assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        await h.advance_to_next_wake(inst.id)
        final = await h.instance(inst.id)
        assert undo.calls == 2
        assert final.state is InstanceState.FAILED  # it was failing before the cancel


class _Counting(Observer):
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []
        self.endings: list[str] = []

    def compensation_failed(self, flow: str, capability: str) -> None:
        self.failed.append((flow, capability))

    def ended(self, flow: str, version: str, state: str, code: str | None) -> None:
        self.endings.append(state)


def _waiting_flow() -> Flow:
    flow = Flow("t.undo-cancel", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(UndoWithRetry())
    flow.await_signal(READY)
    return flow


async def test_a_cancel_whose_compensation_fails_for_good_marks_the_instance(
    store_url: str | None,
) -> None:
    undo = Scripted(RuntimeError("provider stopped: password=hunter2 refused"))
    async with FlowHarness.open(
        [_waiting_flow()], database_url=store_url, migrate=False, substitutes=_subs(undo)
    ) as h:
        counting = _Counting()
        h.engine.observer = counting
        inst = (await h.start("t.undo-cancel", {"order_id": "o-1"})).instance
        other = (await h.start("t.undo-cancel", {"order_id": "o-2"})).instance
        await h.engine.cancel(inst.id)
        final = await h.wait_until(lambda i: i.state is not InstanceState.SUSPENDED, inst.id)
        assert final.state is InstanceState.CANCELLED  # it still ends in its state
        assert undo.calls == 3
        assert final.failure is not None and final.failure.code == "flow.cancelled"
        (detail,) = final.failure.details[COMPENSATION_FAILURES]
        assert detail == {
            "capability_id": "t.undo",
            "step_id": 0,
            "scope": 0,
            "undoes": "t.start",
            "error_type": "RuntimeError",
            "detail": "provider stopped: password=hunter2 refused",
            "tries": 3,
        }
        assert counting.failed == [("t.undo-cancel", "t.undo")]  # once, at the last try
        where = InstanceFilter(compensation_failed=True)
        page = await h.engine.store.operator.list_instances(where, limit=10)
        assert [r.id for r in page.rows] == [inst.id]
        assert other.id != inst.id
        snap = await h.snapshot(inst.id)
        plan = h.engine.catalog.get("t.undo-cancel", "1.0.0")
        view = answer_json(instance_view(snap.instance, snap.steps, plan=plan))
        (shown,) = view["compensationFailures"]
        assert shown["step"] == {
            "stepId": 0,
            "kind": "capability",
            "label": "t.start",
            "capabilityId": "t.start",
        }
        assert shown["error"]["code"] == "RuntimeError"
        assert "hunter2" not in json.dumps(view)  # secrets masked in what is shown
        assert view["error"]["details"][COMPENSATION_FAILURES][0]["undoes"] == "t.start"


async def test_an_operator_retry_runs_the_failed_compensation_once_more(
    store_url: str | None,
) -> None:
    closed: list[str] = []
    undo = Scripted(
        RuntimeError("down"),
        RuntimeError("down"),
        RuntimeError("down"),
        RuntimeError("still down"),  # the first retry's one try
        lambda ctx: closed.append(ctx.get(Job).job_id),  # the second retry's
    )
    async with FlowHarness.open(
        [_waiting_flow()], database_url=store_url, migrate=False, substitutes=_subs(undo)
    ) as h:
        counting = _Counting()
        h.engine.observer = counting
        inst = (await h.start("t.undo-cancel", {"order_id": "o-1"})).instance
        with pytest.raises(CompensationNotFailed):  # nothing failed yet: it has not ended
            await retry_compensations(h.engine, inst.id)
        await h.engine.cancel(inst.id)
        await h.wait_until(lambda i: i.state is not InstanceState.SUSPENDED, inst.id)
        assert undo.calls == 3

        first = await retry_compensations(h.engine, inst.id)
        assert first.retried == ((0, 0, "t.undo"),)
        assert (first.state, first.still_failed) == (InstanceState.CANCELLED, 1)
        assert undo.calls == 4  # one try, no retry policy waits
        again = await h.instance(inst.id)
        assert again.state is InstanceState.CANCELLED and again.lease_owner is None
        assert again.failure is not None and again.failure.code == "flow.cancelled"
        (marked,) = again.failure.details[COMPENSATION_FAILURES]
        assert (marked["detail"], marked["tries"]) == ("still down", 4)
        where = InstanceFilter(compensation_failed=True)
        assert await h.engine.store.operator.count_matching(where) == 1
        assert counting.failed == [("t.undo-cancel", "t.undo")] * 2

        assert counting.endings == ["cancelled"]  # ended once, not again after the retry
        second = await retry_compensations(h.engine, inst.id)
        assert (second.state, second.still_failed) == (InstanceState.CANCELLED, 0)
        assert closed == ["j"]
        cleared = await h.instance(inst.id)
        assert cleared.state is InstanceState.CANCELLED
        assert cleared.failure is not None and cleared.failure.code == "flow.cancelled"
        assert COMPENSATION_FAILURES not in cleared.failure.details
        assert await h.engine.store.operator.count_matching(where) == 0
        # the journal keeps every try and both operator retries
        rows = (await h.snapshot(inst.id)).steps
        kept = [
            (r.kind, r.try_number, r.outcome)
            for r in rows
            if r.kind in (StepKind.COMPENSATION, StepKind.RETRY)
        ]
        assert kept == [
            (StepKind.COMPENSATION, 1, Outcome.FAILURE),
            (StepKind.COMPENSATION, 2, Outcome.FAILURE),
            (StepKind.COMPENSATION, 3, Outcome.FAILURE),
            (StepKind.RETRY, 1, Outcome.SUCCESS),
            (StepKind.COMPENSATION, 4, Outcome.FAILURE),
            (StepKind.RETRY, 2, Outcome.SUCCESS),
            (StepKind.COMPENSATION, 5, Outcome.SUCCESS),
        ]
        assert compensation_failures(rows) == []
        with pytest.raises(CompensationNotFailed):  # nothing is left to retry
            await retry_compensations(h.engine, inst.id)
        assert undo.calls == 5
