"""The decider alone: plain values in (plan, instance row, journal rows, mailbox, instant),
one decision out. No store, no clock, no event loop."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from flowpark.engine.decide.deadlines import POLL_BUDGET, deadline_row, ends_at
from flowpark.engine.decide.decider import Decider
from flowpark.engine.decide.decisions import (
    BeginEnding,
    Execute,
    Finish,
    MailboxView,
    ReadMailbox,
    Suspend,
    TakeSignal,
)
from flowpark.engine.records import (
    InstanceRecord,
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.errors import FlowFailure, JournalMismatch
from flowpark.flows.catalog import Catalog
from flowpark.flows.plan import Plan
from tests.engine.flows import await_flow, poll_flow

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
ID = "0190a000-0000-7000-8000-00000000000a"
MIN = timedelta(minutes=1)
# poll_flow's plan: 0 start (undo), 1 poll, 2 check (its body), 3 escalate, 4 fail, 5 after


def _plan(flow: object) -> Plan:
    catalog = Catalog()
    catalog.register(flow)  # type: ignore[arg-type]
    return catalog.latest(flow.name)  # type: ignore[attr-defined]


POLL = _plan(poll_flow())
AWAIT = _plan(await_flow())


def _instance(**changes: object) -> InstanceRecord:
    record = InstanceRecord(
        id=ID,
        flow_name="t.poll",
        flow_version="1.0.0",
        state=InstanceState.RUNNING,
        input={"order_id": "o-1"},
        created_at=T0,
        updated_at=T0,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def _row(node: int, scope: int, name: str, values: dict[str, object], at: datetime) -> StepRow:
    return StepRow(ID, node, scope, StepKind.STEP, name, Outcome.SUCCESS, at, at, values=values)


STARTED = _row(0, 0, "t.start", {"Job": {"job_id": "j"}}, T0)
BUDGET = deadline_row(ID, 1, 0, POLL_BUDGET, T0, T0 + 10 * MIN)


def _check(scope: int, done: bool, at: datetime) -> StepRow:
    return _row(2, scope, "t.check", {"Status": {"done": done, "n": 0}}, at)


def decide(
    plan: Plan,
    instance: InstanceRecord,
    steps: list[StepRow],
    now: datetime,
    *,
    signals: tuple[SignalRecord, ...] = (),
    read_at: int | None = -1,
    claimed: int | None = None,
) -> object:
    mailbox = MailboxView(signals, len(steps) if read_at == -1 else read_at)
    return Decider(plan, instance.input).decide(instance, steps, mailbox, now, claimed=claimed)


def test_a_new_instance_runs_its_first_step() -> None:
    decision = decide(POLL, _instance(), [], T0)
    assert isinstance(decision, Execute)
    assert (decision.step, decision.scope, decision.kind, decision.try_number) == (
        0,
        0,
        StepKind.STEP,
        1,
    )
    assert decision.execution_key == f"{ID}:0:0"
    assert decision.store_first == ()


def test_entering_a_poll_stores_its_budget_before_attempt_zero() -> None:
    decision = decide(POLL, _instance(), [STARTED], T0 + 5 * timedelta(seconds=1))
    assert isinstance(decision, Execute)
    assert (decision.step, decision.scope) == (2, 0)
    assert decision.bag == {"Job": {"job_id": "j"}}
    [budget] = decision.store_first
    assert budget.kind is StepKind.DEADLINE and budget.capability_id == POLL_BUDGET
    assert ends_at(budget) == T0 + timedelta(seconds=5) + 10 * MIN
    assert decision.budget_ends_at == ends_at(budget)


def test_after_an_unsatisfied_attempt_of_this_run_the_poll_parks_for_its_interval() -> None:
    steps = [STARTED, BUDGET, _check(0, False, T0)]
    decision = decide(POLL, _instance(), steps, T0, claimed=2)
    assert isinstance(decision, Suspend)
    assert replace(decision, notes=()) == Suspend(
        T0 + MIN, 1, 1, WakeKind.POLL, accept_signal="t.ready"
    )
    assert [(n.how, n.attempt) for n in decision.notes] == [("unsatisfied", 0)]


def test_a_claimed_wake_not_yet_due_parks_again_and_a_due_one_runs_the_attempt() -> None:
    steps = [STARTED, BUDGET, _check(0, False, T0)]
    parked = _instance(wake_at=T0 + MIN, wake_step_id=1, wake_scope=1)
    early = decide(POLL, parked, steps, T0 + MIN / 2)
    assert early == Suspend(T0 + MIN, 1, 1, WakeKind.POLL, accept_signal="t.ready")
    due = decide(POLL, parked, steps, T0 + MIN + timedelta(seconds=3))
    assert isinstance(due, Execute) and (due.step, due.scope) == (2, 1)
    assert due.late_by == timedelta(seconds=3)


def test_the_next_attempt_is_the_lowest_scope_without_a_successful_row() -> None:
    steps = [STARTED, BUDGET, _check(0, False, T0), _check(1, False, T0 + MIN)]
    parked = _instance(wake_at=T0 + 2 * MIN, wake_step_id=1, wake_scope=2)
    decision = decide(POLL, parked, steps, T0 + 2 * MIN)
    assert isinstance(decision, Execute) and decision.scope == 2
    assert decision.execution_key == f"{ID}:2:2"


def test_a_satisfied_poll_goes_on_and_never_calls_again() -> None:
    steps = [STARTED, BUDGET, _check(0, False, T0), _check(1, True, T0 + MIN)]
    decision = decide(POLL, _instance(), steps, T0 + MIN)
    assert isinstance(decision, Execute) and (decision.step, decision.capability_id) == (
        5,
        "t.after",
    )


def test_a_waiting_signal_ends_the_poll_and_a_stale_mailbox_is_read_first() -> None:
    signal = SignalRecord("s-1", 1, ID, "t.ready", {"job_id": "j"}, T0)
    steps = [STARTED, BUDGET, _check(0, False, T0)]
    parked = _instance(wake_at=T0 + MIN, wake_step_id=1, wake_scope=1)
    taken = decide(POLL, parked, steps, T0 + MIN / 2, signals=(signal,))
    assert isinstance(taken, TakeSignal)
    assert (taken.step, taken.row.scope, taken.row.kind) == (1, 1, StepKind.SIGNAL)
    assert [n.how for n in taken.notes] == ["signalled"]
    stale = decide(POLL, parked, steps, T0 + MIN / 2, read_at=None)
    assert stale == ReadMailbox(1)


def test_a_budget_that_ended_unsatisfied_runs_the_on_timeout_block() -> None:
    steps = [STARTED, BUDGET] + [_check(n, False, T0 + n * MIN) for n in range(10)]
    parked = _instance(wake_at=T0 + 10 * MIN, wake_step_id=1, wake_scope=10)
    decision = decide(POLL, parked, steps, T0 + 10 * MIN)
    assert isinstance(decision, Execute) and decision.capability_id == "t.escalate"
    assert [n.how for n in decision.notes] == ["timed_out"]


def test_a_failing_flow_unwinds_then_compensates_in_reverse_then_finishes() -> None:
    steps = [STARTED, BUDGET] + [_check(n, False, T0 + n * MIN) for n in range(10)]
    steps.append(_row(3, 0, "t.escalate", {}, T0 + 10 * MIN))
    now = T0 + 10 * MIN
    begin = decide(POLL, _instance(), steps, now)
    assert isinstance(begin, BeginEnding) and begin.ending is InstanceState.FAILED
    assert begin.failure is not None and begin.failure.code == "t.not_done"
    ending = _instance(ending=InstanceState.FAILED, failure=begin.failure)
    undo = decide(POLL, ending, steps, now)
    assert isinstance(undo, Execute) and undo.kind is StepKind.COMPENSATION
    assert (undo.step, undo.capability_id, undo.execution_key) == (0, "t.undo", f"{ID}:0:0:undo")
    undone = StepRow(ID, 0, 0, StepKind.COMPENSATION, "t.undo", Outcome.SUCCESS, now, now)
    assert decide(POLL, ending, [*steps, undone], now) == Finish(
        InstanceState.FAILED, failure=begin.failure
    )


def test_a_compensation_failed_for_good_marks_the_finish_and_a_retry_row_runs_it_once() -> None:
    now = T0 + MIN
    why = FlowFailure("flow.cancelled", "the instance was cancelled")
    cancelled = _instance(cancel_requested=True, ending=InstanceState.CANCELLED, failure=why)
    failed = StepRow(
        ID,
        0,
        0,
        StepKind.COMPENSATION,
        "t.undo",
        Outcome.FAILURE,
        now,
        now,
        error_type="RuntimeError",
        error_detail="x" * 900,
        final=True,
    )
    finish = decide(POLL, cancelled, [STARTED, failed], now)
    assert isinstance(finish, Finish) and finish.state is InstanceState.CANCELLED
    assert finish.failure is not None and finish.failure.code == "flow.cancelled"
    (marked,) = finish.failure.details["compensation_failures"]
    assert marked["capability_id"] == "t.undo" and marked["undoes"] == "t.start"
    assert marked["detail"] == "x" * 500 and marked["tries"] == 1  # cut
    ended = replace(cancelled, failure=finish.failure)
    retry = StepRow(
        ID, 0, 0, StepKind.RETRY, "t.undo", Outcome.SUCCESS, now, now, values={"after_try": 1}
    )
    again = decide(POLL, ended, [STARTED, failed, retry], now)
    assert isinstance(again, Execute) and again.kind is StepKind.COMPENSATION
    assert (again.try_number, again.last_try) == (2, True)
    undone = replace(failed, outcome=Outcome.SUCCESS, try_number=2, final=False)
    cleared = decide(POLL, ended, [STARTED, failed, retry, undone], now)
    assert isinstance(cleared, Finish) and cleared.failure is not None
    assert cleared.failure.details == {}  # the mark is gone; code and message kept
    assert cleared.failure.code == "flow.cancelled"


def test_a_requested_cancel_unwinds_at_the_frontier() -> None:
    decision = decide(POLL, _instance(cancel_requested=True), [STARTED], T0)
    assert isinstance(decision, BeginEnding) and decision.ending is InstanceState.CANCELLED


def test_an_await_stores_its_timeout_with_the_park() -> None:
    steps = [STARTED]
    decision = decide(AWAIT, _instance(flow_name="t.await"), steps, T0)
    assert isinstance(decision, Suspend)
    assert (decision.step, decision.kind, decision.wake_at) == (1, WakeKind.SIGNAL, T0 + 60 * MIN)
    [timeout] = decision.store_first
    assert timeout.kind is StepKind.DEADLINE and ends_at(timeout) == T0 + 60 * MIN


def test_the_flow_completes_with_its_result() -> None:
    steps = [STARTED, BUDGET, _check(0, True, T0), _row(5, 0, "t.after", {}, T0)]
    assert decide(POLL, _instance(), steps, T0) == Finish(
        InstanceState.COMPLETED, result={"done": True}
    )


def test_a_row_that_does_not_fit_the_plan_is_journal_mismatch() -> None:
    renamed = replace(STARTED, capability_id="t.begin")
    with pytest.raises(JournalMismatch) as info:
        decide(POLL, _instance(), [renamed], T0)
    assert info.value.code == "journal_mismatch"
    assert info.value.fields["step_id"] == 0
    gone = replace(STARTED, step_id=9)
    with pytest.raises(JournalMismatch):
        decide(POLL, _instance(), [gone], T0)


def test_the_decider_is_a_function_of_its_inputs() -> None:
    steps = [STARTED, BUDGET, _check(0, False, T0)]
    parked = _instance(wake_at=T0 + MIN, wake_step_id=1, wake_scope=1)
    first = decide(POLL, parked, steps, T0 + MIN)
    assert decide(POLL, parked, steps, T0 + MIN) == first
    assert steps == [STARTED, BUDGET, _check(0, False, T0)]  # nothing mutated
