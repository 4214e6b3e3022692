"""Tries as the decider sees them: replaying an execution's rows, the next try (its retry
window stored first), a park until it is due, a try lost with its step, and a
compensation's next try while unwinding (pure; see :mod:`flowpark.engine.decide.decider`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flowpark.engine.decide.deadlines import RETRY_TOTAL, deadline_row
from flowpark.engine.decide.decisions import (
    Execute,
    Record,
    RunDecision,
    Suspend,
)
from flowpark.engine.decide.replay import Ending, Replay
from flowpark.engine.decide.retries import failure_row, next_try_at, retry_start, window_ended_row
from flowpark.engine.records import (
    InstanceState,
    Outcome,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.engine.values import execution_key
from flowpark.errors import FlowFailure
from flowpark.flows.plan import CapabilityStep

__all__ = ["DEFERRED_BY", "DETAIL_LIMIT", "TryWalk"]
#: Most characters of a failed compensation's last error message kept in the details.
DETAIL_LIMIT = 500
#: The wakes of a deferral (a park with its provider's reason), by what deferred it.
DEFERRED_BY: dict[WakeKind | None, str] = {
    WakeKind.PROVIDER_BUDGET: "budget",
    WakeKind.PROVIDER_PUSHBACK: "pushback",
}


class TryWalk(Replay):
    """The tries of a walk (:class:`flowpark.engine.decide.steps.Walk` adds the steps)."""

    def replay_execution(
        self,
        step: CapabilityStep,
        scope: int,
        wake_step: int,
        *,
        budget_end: datetime | None = None,
        accept: str | None = None,
        poll: int | None = None,
    ) -> StepRow | Ending | RunDecision:
        """Replay (step, scope): its deciding row (a success or a final failure), or the
        frontier's decision (the next try, a park until it is due), or an ending."""
        rows = self.found(step.index, scope)
        for row in rows:
            if row.outcome is Outcome.SUCCESS:
                self.apply(row)
                return row
        if rows and rows[-1].final:
            return rows[-1]
        stop = self.interrupts()
        if stop is not None:
            return stop
        if self.lost_try(step, scope):
            return self.record_lost(step, scope)
        parked, wake_at = self.wake_for(wake_step, scope)
        due = wake_at
        retrying = bool(rows) and rows[-1].next_try_at is not None
        if retrying:
            due = rows[-1].next_try_at
        elif not parked:
            due = None
        if parked and self.woken:  # an operator's wake: the next try or attempt runs now
            due = None
        kind = WakeKind.RETRY if retrying or wake_step == step.index else WakeKind.POLL
        if due is not None and self.now < due:
            wake = min(due, budget_end) if budget_end is not None else due
            return self.park(wake, wake_step, scope, accept, kind)
        late = self.now - wake_at if parked and wake_at is not None else None
        deferred = None
        reason = DEFERRED_BY.get(self.instance.wake_kind) if parked else None
        if reason is not None and wake_at is not None:  # an operator's wake: now
            deferred = (min(wake_at, self.now), reason)
        return self.execute(step, scope, StepKind.STEP, late, budget_end, poll, deferred=deferred)

    def execute(
        self,
        step: CapabilityStep,
        scope: int,
        kind: StepKind,
        late: Any = None,
        budget_end: datetime | None = None,
        poll: int | None = None,
        *,
        last_try: bool = False,
        deferred: tuple[datetime, str] | None = None,
    ) -> Execute | Record:
        """The next try of (step, scope) of ``kind``: its retry window stored first before
        the first try; no try when the window ended (a final failure row instead)."""
        capability = step.capability if kind is StepKind.STEP else step.compensation
        assert capability is not None
        retry = capability.options.retry
        previous = self.found(step.index, scope, kind)
        try_number = len(previous) + 1
        window = self.deadline(step.index, scope) if kind is StepKind.STEP else None
        first = retry_start(retry, kind, window, previous)
        total = retry.total_duration if retry is not None else None
        store: tuple[StepRow, ...] = ()
        if total is not None and kind is StepKind.STEP:
            if first is None:
                store = (
                    deadline_row(
                        self.instance.id, step.index, scope, RETRY_TOTAL, self.now, self.now + total
                    ),
                )
                first = self.now
            if previous and self.now >= first + total:  # woken late: no try starts
                row = window_ended_row(
                    self.instance.id,
                    step.index,
                    scope,
                    capability.id,
                    try_number,
                    first + total,
                    self.now,
                )
                return Record(row)
        return Execute(
            step.index,
            scope,
            kind,
            capability.id,
            try_number,
            execution_key(self.instance.id, step.index, scope, kind),
            dict(self.bag),
            store_first=store,
            retry_from=first,
            budget_ends_at=budget_end,
            recovery=self.recovery if kind is StepKind.STEP else None,
            late_by=late,
            deferred=deferred,
            poll=poll,
            last_try=last_try,
        )

    def lost_try(self, step: CapabilityStep, scope: int) -> bool:
        """Whether the claim found a heartbeating try at (step, scope) in flight whose
        holder is gone (its lease expired)."""
        inst = self.instance
        return (
            inst.try_step_id == step.index
            and inst.try_scope == scope
            and inst.try_number == len(self.found(step.index, scope)) + 1
        )

    def record_lost(self, step: CapabilityStep, scope: int) -> Record:
        """The failed row of a try lost with a dead node (its heartbeats stopped)."""
        inst, now = self.instance, self.now
        previous = self.found(step.index, scope)
        try_number = len(previous) + 1
        retry = step.capability.options.retry
        started = inst.try_started_at or now
        detail = (
            f"no heartbeat from try {try_number} since {(inst.heartbeat_at or started).isoformat()}"
        )
        first = retry_start(retry, StepKind.STEP, self.deadline(step.index, scope), previous)
        key = execution_key(inst.id, step.index, scope, StepKind.STEP)
        next_at = next_try_at(retry, try_number, "heartbeat_timeout", now, first or started, key)
        row = failure_row(
            inst.id,
            step.index,
            scope,
            StepKind.STEP,
            step.capability.id,
            try_number,
            ("heartbeat_timeout", detail),
            started,
            now,
            next_at,
        )
        return Record(row, clears_try=True)

    def step_failed(self, step: CapabilityStep, row: StepRow) -> Ending:
        """The ending of a step that failed for good with no failure route."""
        return Ending(
            InstanceState.FAILED,
            FlowFailure(
                "flow.step_failed",
                f"{step.capability.id} failed after {row.try_number} tries: "
                f"{row.error_type}: {row.error_detail}",
                {
                    "capability_id": step.capability.id,
                    "error_type": row.error_type,
                    "detail": row.error_detail,
                    "step_id": step.index,
                    "tries": row.try_number,
                },
            ),
        )

    def compensate(self, step: CapabilityStep, scope: int) -> RunDecision | None:
        """The compensation of (step, scope) while unwinding: its next try, a park until it
        is due, or None when it is done (succeeded, or failed for good). A compensation
        that failed for good runs once more when an operator's retry row (kind ``retry``,
        ``after_try`` its last try) asks for it: one try, final if it fails."""
        rows = self.found(step.index, scope, StepKind.COMPENSATION)
        if any(r.outcome is Outcome.SUCCESS for r in rows):
            return None
        last = rows[-1] if rows else None
        if last is not None and (last.final or last.next_try_at is None):
            asked = self.found(step.index, scope, StepKind.RETRY)
            if asked and asked[-1].values.get("after_try") == last.try_number:
                return self.execute(step, scope, StepKind.COMPENSATION, last_try=True)
            return None  # failed for good (recorded, logged when it happened)
        if last is not None and last.next_try_at and self.now < last.next_try_at:
            return Suspend(last.next_try_at, step.index, scope, WakeKind.RETRY, unwinding=True)
        return self.execute(step, scope, StepKind.COMPENSATION)

    def failed_compensations(self) -> list[dict[str, Any]]:
        """The compensations of the stack that failed for good (no try succeeded and the
        last one's failure is final), latest first as the unwind ran them: each
        ``{"capability_id", "step_id", "scope", "undoes", "error_type", "detail",
        "tries"}`` (``undoes``: the capability of the step it undoes; ``detail`` cut to
        :data:`DETAIL_LIMIT` characters)."""
        failed: list[dict[str, Any]] = []
        for step, scope in reversed(self.compensations):
            rows = self.found(step.index, scope, StepKind.COMPENSATION)
            if not rows or any(r.outcome is Outcome.SUCCESS for r in rows):
                continue
            last = rows[-1]
            if not (last.final or last.next_try_at is None):
                continue
            failed.append(
                {
                    "capability_id": last.capability_id,
                    "step_id": step.index,
                    "scope": scope,
                    "undoes": step.capability.id,
                    "error_type": last.error_type,
                    "detail": (last.error_detail or "")[:DETAIL_LIMIT],
                    "tries": last.try_number,
                }
            )
        return failed
