"""One walk of the decider over a plan: the semantics of capability steps, polls, awaits, emits
and fail steps (pure; see :mod:`flowpark.engine.decide.decider`). Tries are
:mod:`flowpark.engine.decide.try_walk`; the state rebuilt from the rows is
:mod:`flowpark.engine.decide.replay`.

A handler answers the next step's index (the walk goes on), an :class:`Ending` (the walk
ends: complete, fail or cancel) or a decision (the frontier is here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from flowpark.engine.decide.deadlines import (
    BUDGET_WARNING,
    POLL_BUDGET,
    SIGNAL_TIMEOUT,
    deadline_row,
    ends_at,
    warns_at,
)
from flowpark.engine.decide.decisions import (
    Emit,
    Execute,
    Note,
    ReadMailbox,
    Record,
    RefuseSignal,
    RunDecision,
    Suspend,
    TakeSignal,
)
from flowpark.engine.decide.replay import Ending, budget_used, evaluate
from flowpark.engine.decide.try_walk import TryWalk
from flowpark.engine.observe import WARNED, PollEnd
from flowpark.engine.records import (
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.engine.values import jsonable, revive
from flowpark.errors import FlowFailure
from flowpark.flows.capability import RecoveryError, bag_key
from flowpark.flows.plan import AwaitSignalStep, CapabilityStep, EmitStep, FailStep, PollStep

__all__ = ["Ending", "Walk", "budget_used", "evaluate"]

Next = int | Ending | RunDecision
"""What a step handler answers: the next step, an ending, or the frontier's decision."""


class Walk(TryWalk):
    """One walk over the plan, from step 0 to the frontier."""

    # -- the walk ------------------------------------------------------------------
    def run(self) -> Ending | RunDecision:
        """Walk from step 0 to the frontier: its decision, or the walk's ending."""
        cursor = 0
        plan = self.plan
        while cursor < plan.end:
            step = plan.steps[cursor]
            following: Next
            if isinstance(step, CapabilityStep):
                following = self.step(step)
            elif isinstance(step, PollStep):
                following = self.poll(step)
            elif isinstance(step, AwaitSignalStep):
                following = self.await_signal(step)
            elif isinstance(step, EmitStep):
                following = self.emit(step)
            else:
                assert isinstance(step, FailStep)
                following = self.interrupts() or Ending(
                    InstanceState.FAILED,
                    FlowFailure(step.code, step.message, {"step_id": step.index}),
                )
            if not isinstance(following, int):
                return following
            cursor = following
        return self.interrupts() or Ending(InstanceState.COMPLETED)

    def noted(self, decision: RunDecision) -> RunDecision:
        """``decision`` with what this walk noted (a poll that timed out now)."""
        if not self.notes:
            return decision
        return replace(decision, notes=decision.notes + tuple(self.notes))

    # -- steps -------------------------------------------------------------------------
    def step(self, step: CapabilityStep) -> Next:
        """A step: its deciding row routes on (success: next; failure: the failure route,
        else the flow fails)."""
        row = self.replay_execution(step, 0, step.index)
        if not isinstance(row, StepRow):
            return row
        if row.outcome is Outcome.SUCCESS:
            self.recovery = None
            if step.compensation is not None:
                self.compensations.append((step, 0))
            stop = self.decided(row)
            if stop is not None:
                return stop
            assert step.next is not None
            return step.next
        if step.failure_target is not None:
            self.recovery = RecoveryError(
                row.error_type or "error", row.error_detail or "", row.try_number
            )
            return step.failure_target
        return self.step_failed(step, row)

    def block_taken(self, start: int | None, stop: int) -> bool:
        """Whether a row exists in the block ``[start, stop)`` (an on_timeout block)."""
        return start is not None and any(i in self.touched for i in range(start, stop))

    def timed_out(self, target: int | None, failure: FlowFailure) -> int | Ending:
        """A wait's timeout: its on_timeout block, else the flow fails with ``failure``."""
        return target if target is not None else Ending(InstanceState.FAILED, failure)

    def poll(self, step: PollStep) -> Next:
        """A poll: replay its attempts; at the frontier a signal that ends it, its budget's
        end, a park until the next attempt, or the next attempt."""
        body = self.plan.steps[step.body_index]
        assert isinstance(body, CapabilityStep)
        scope = self.replay_poll(step, body)
        if not isinstance(scope, int) or scope < 0:
            self.replay_warning(step.warning_target)
            return scope if isinstance(scope, Ending) else step.satisfied_target
        if self.block_taken(step.timeout_target, step.satisfied_target):
            self.replay_warning(step.warning_target)
            return step.timeout_target  # type: ignore[return-value]
        accept = step.signal.name if step.signal is not None else None
        end = self.budget_end(step, body)
        warn = self.warning(step.index, self.deadline(step.index, 0))
        if scope > 0 and end is not None and not self.wake_for(step.index, scope)[0]:
            last = [r for r in self.found(body.index, scope - 1) if r.outcome is Outcome.SUCCESS]
            # just made: report it, wait the interval (or until the warning, if sooner)
            if last and self.made_now(last[0]) and (warn is None or warn > self.now):
                self.notes.append(Note(step.index, "unsatisfied", attempt=scope - 1))
                wake_at = min(self.now + step.interval.delay(scope - 1, self.instance.id), end)
                wake_at = wake_at if warn is None else min(wake_at, warn)
                return self.park(wake_at, step.index, scope, accept, WakeKind.POLL)
        if step.signal is not None and self.stale({step.index, body.index}):
            return ReadMailbox(step.index)
        stop = self.interrupts()
        if stop is not None:
            return stop
        if step.signal is not None:
            taken = self.take(step.index, scope, step.signal.name, step.signal.model, step.match)
            if taken is not None:
                if isinstance(taken, TakeSignal):
                    used = budget_used(self.steps, step.index, self.now)
                    self.notes.append(Note(step.index, PollEnd.SIGNALLED, used))
                return taken
        if warn is not None and end is not None and warn <= self.now < end:
            return self.warn(step.index, warn, end)
        warning = self.on_warning(step.index, step.warning_target, end, accept)
        if warning is not None:
            return warning
        if step.warn_before is not None and end is not None and self.now < end:
            due = self.attempt_due(step, body, scope)  # woken for the warning: not due yet
            if due is not None and self.now < due and not self.woken:
                return self.park(min(due, end), step.index, scope, accept, WakeKind.POLL)
        store: tuple[StepRow, ...] = ()
        if end is None:  # entering the poll: its budget is stored before attempt 0
            end = self.now + step.timeout
            warn_at = None if step.warn_before is None else end - step.warn_before
            budget = deadline_row(
                self.instance.id, step.index, 0, POLL_BUDGET, self.now, end, warn_at=warn_at
            )
            store = (budget,)
        if self.now >= end:
            self.notes.append(
                Note(step.index, PollEnd.TIMED_OUT, budget_used(self.steps, step.index, self.now))
            )
            return self.timed_out(step.timeout_target, _not_satisfied(step, body, scope))
        row = self.replay_execution(
            body, scope, step.index, budget_end=end, accept=accept, poll=step.index
        )
        if isinstance(row, StepRow):  # a final failure (replay went past every success)
            if self.made_now(row):
                self.notes.append(Note(step.index, "failed", attempt=scope))
            return self.step_failed(body, row)
        if store and isinstance(row, Execute | Record | Suspend):
            return replace(row, store_first=store + row.store_first)
        return row

    def replay_poll(self, step: PollStep, body: CapabilityStep) -> int | Ending:
        """Replay the poll's committed attempts: -1 when one satisfied it (or a signal
        ended it), else the scope of the next attempt (or an ending: a decision of the
        body's capability, an ``until`` that raised)."""
        scope = 0
        while True:
            signalled = self.found(step.index, scope, StepKind.SIGNAL)
            if signalled:
                self.apply(signalled[0])
                return -1
            success = [r for r in self.found(body.index, scope) if r.outcome is Outcome.SUCCESS]
            if not success:
                return scope
            self.apply(success[0])
            stop = self.decided(success[0])
            if stop is not None:
                return stop
            satisfied = evaluate("until", lambda: bool(step.until(self.view())))
            if isinstance(satisfied, Ending):
                return satisfied
            if satisfied:
                if self.made_now(success[0]):  # satisfied by this run's attempt
                    used = budget_used(self.steps, step.index, self.now)
                    self.notes.append(Note(step.index, PollEnd.SATISFIED, attempt=scope))
                    self.notes.append(Note(step.index, PollEnd.SATISFIED, used))
                return -1
            scope += 1

    def warning(self, step: int, stored: StepRow | None) -> datetime | None:
        """The warning instant ``stored`` (the wait's deadline row) holds while the warning
        was not given yet (no ``emit`` row at the wait's step), else None."""
        if stored is None or self.found(step, 0, StepKind.EMIT):
            return None
        return warns_at(stored)

    def warn(self, step: int, warn_at: datetime, end: datetime) -> Emit:
        """The wait's warning: its event, with an ``emit`` row at its step (once)."""
        self.notes.append(Note(step, WARNED))
        plan = self.plan
        payload = {
            "instanceId": self.instance.id,
            "flow": plan.name,
            "version": plan.version,
            "stepId": step,
            "wait": plan.steps[step].label,
            "warnAt": warn_at.isoformat(),
            "endsAt": end.isoformat(),
        }
        return Emit(step, BUDGET_WARNING, payload)

    def replay_warning(self, target: int | None) -> None:
        """Apply the ``on_warning`` capability's success to the bag, if it ran (a wait
        that ended replays it as it ran)."""
        if target is not None:
            done = [r for r in self.found(target, 0) if r.outcome is Outcome.SUCCESS]
            if done:
                self.apply(done[0])

    def on_warning(
        self, step: int, target: int | None, end: datetime | None, accept: str | None
    ) -> Next | None:
        """The wait's ``on_warning`` capability, once its warning was given: replayed (its
        row applied to the bag), else its next try while the wait's end is ahead (a park
        for a retry keeps accepting ``accept``); None when there is none or it is done (a
        try that failed for good too: the wait goes on)."""
        if target is None or not self.found(step, 0, StepKind.EMIT):
            return None
        body = self.plan.steps[target]
        assert isinstance(body, CapabilityStep)
        if end is not None and self.now >= end and not self.found(target, 0):
            return None  # the end came first: the wait's timeout, not its warning
        # parked on the wait's own step: a signal that ends the wait still claims it
        row = self.replay_execution(body, 0, step, budget_end=end, accept=accept)
        if isinstance(row, StepRow):
            if row.outcome is Outcome.SUCCESS:
                stop = self.decided(row)
                if stop is not None:
                    return stop
            return None
        if end is not None and self.now >= end:
            return None  # a retry the end overtook: the timeout decides
        return row

    def attempt_due(self, step: PollStep, body: CapabilityStep, scope: int) -> datetime | None:
        """When attempt ``scope`` is due: the commit of the attempt before it plus the
        interval for it (None for attempt 0, without that row, or when this run made it:
        the walk parks for the interval itself)."""
        last = [r for r in self.found(body.index, scope - 1) if r.outcome is Outcome.SUCCESS]
        if scope == 0 or not last or self.made_now(last[0]):
            return None
        return last[0].committed_at + step.interval.delay(scope - 1, self.instance.id)

    def budget_end(self, step: PollStep, body: CapabilityStep) -> datetime | None:
        """The poll's budget end: the stored instant (as extended), or None before it is."""
        stored = self.deadline(step.index, 0)
        if stored is not None:
            return ends_at(stored)
        # a journal written before budgets were stored: from attempt 0's row
        first = self.found(body.index, 0)
        return first[0].started_at + step.timeout if first else None

    def take(
        self,
        step: int,
        scope: int,
        name: str,
        model: type[BaseModel],
        match: Callable[[Any, Any], bool] | None,
    ) -> TakeSignal | RefuseSignal | None:
        """The oldest waiting signal ``name``: taken when it belongs to the wait at
        ``step`` (its match holds over the bag and the payload; a match that raises
        refuses), else refused; None when none waits."""
        signal = next(
            (s for s in self.mailbox.signals if s.name == name and s.taken_at is None), None
        )
        if signal is None:
            return None
        if match is not None and not self.matches(signal, model, match):
            return RefuseSignal(signal, step)
        return TakeSignal(signal, step, self.signal_row(step, scope, signal, model))

    def matches(
        self, signal: SignalRecord, model: type[BaseModel], match: Callable[[Any, Any], bool]
    ) -> bool:
        """Whether ``match`` holds for ``signal`` (False when it raises)."""
        try:
            return bool(match(self.view(), revive(model, signal.payload)))
        except Exception:  # noqa: BLE001 - user code: a match that raises refuses
            return False

    def signal_row(
        self, step: int, scope: int, signal: SignalRecord, model: type[BaseModel]
    ) -> StepRow:
        """The journal row of taking ``signal`` at (step, scope): its payload in the bag."""
        payload = revive(model, signal.payload).model_dump(mode="json", by_alias=True)
        return StepRow(
            self.instance.id,
            step,
            scope,
            StepKind.SIGNAL,
            signal.name,
            Outcome.SUCCESS,
            self.now,
            self.now,
            values={bag_key(model): payload},
        )

    def await_signal(self, step: AwaitSignalStep) -> Next:
        """An ``await_signal``: the signal taken, its timeout (stored with the park that
        begins the wait), or a park until either."""
        taken = self.found(step.index, 0, StepKind.SIGNAL)
        if taken:
            self.replay_warning(step.warning_target)
            self.apply(taken[0])
            return step.satisfied_target
        if self.block_taken(step.timeout_target, step.satisfied_target):
            self.replay_warning(step.warning_target)
            return step.timeout_target  # type: ignore[return-value]
        if self.stale({step.index}):
            return ReadMailbox(step.index)
        stop = self.interrupts()
        if stop is not None:
            return stop
        signal = self.take(step.index, 0, step.signal.name, step.signal.model, step.match)
        if signal is not None:
            return signal
        wake = warn = None
        store: tuple[StepRow, ...] = ()
        if step.timeout is not None:  # stored when the wait begins (the park carries it)
            stored = self.deadline(step.index, 0)
            if stored is None:
                parked, wake = self.wake_for(step.index, 0)
                if not parked:  # (parked with none: a journal from before they were)
                    end = self.now + step.timeout
                    lead = step.warn_before
                    stored = deadline_row(
                        self.instance.id,
                        step.index,
                        0,
                        SIGNAL_TIMEOUT,
                        self.now,
                        end,
                        warn_at=None if lead is None else end - lead,
                    )
                    store = (stored,)
            if stored is not None:
                wake = ends_at(stored)
                warn = self.warning(step.index, stored)
        if warn is not None and wake is not None and warn <= self.now < wake:
            return self.warn(step.index, warn, wake)
        warning = self.on_warning(step.index, step.warning_target, wake, step.signal.name)
        if warning is not None:
            return warning
        if wake is not None and self.now >= wake:
            return self.timed_out(
                step.timeout_target,
                FlowFailure(
                    "flow.signal_not_received",
                    f"signal {step.signal.name} did not arrive within {step.timeout}",
                    {"step_id": step.index},
                ),
            )
        if warn is not None and wake is not None and warn > self.now:
            wake = min(warn, wake)  # woken for the warning first
        return self.park(wake, step.index, 0, step.signal.name, WakeKind.SIGNAL, store)

    def emit(self, step: EmitStep) -> Next:
        """An emit: its event with its row, once."""
        if self.found(step.index, 0, StepKind.EMIT):
            return step.next
        stop = self.interrupts()
        if stop is not None:
            return stop
        payload = evaluate(f"emit {step.name}", lambda: jsonable(step.factory(self.view())))
        if isinstance(payload, Ending):
            return payload
        return Emit(step.index, step.name, payload)


def _not_satisfied(step: PollStep, body: CapabilityStep, attempts: int) -> FlowFailure:
    """The failure of a poll whose budget ended unsatisfied (``flow.poll_not_satisfied``)."""
    return FlowFailure(
        "flow.poll_not_satisfied",
        f"{body.capability.id} was not satisfied within {step.timeout}",
        {"step_id": step.index, "capability_id": body.capability.id, "attempts": attempts},
    )
