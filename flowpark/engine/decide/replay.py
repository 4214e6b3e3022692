"""The state a decider's walk rebuilds from the journal rows: the bag, the rows by
execution, the wake the claim found, the compensation stack, and the checks every frontier
makes (an ending being unwound, a cancel, the flow deadline) (pure; see
:mod:`flowpark.engine.decide.decider`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from flowpark.engine.context import BagView
from flowpark.engine.decide.deadlines import ends_at
from flowpark.engine.decide.decisions import (
    MailboxView,
    Note,
    Suspend,
)
from flowpark.engine.records import (
    InstanceRecord,
    InstanceState,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.engine.values import DECISION_KEY
from flowpark.errors import FlowFailure
from flowpark.flows.capability import RecoveryError
from flowpark.flows.plan import CapabilityStep, Plan

__all__ = ["Ending", "Replay", "budget_used", "evaluate"]


@dataclass(frozen=True)
class Ending:
    """The walk ends: ``state`` completed (``result``; ``early`` when a capability's
    Complete decided it), failed or cancelled (``failure``)."""

    state: InstanceState
    failure: FlowFailure | None = None
    result: Any = None
    early: bool = False

    @staticmethod
    def cancelled() -> Ending:
        """The ending of a requested cancel (``flow.cancelled``)."""
        return Ending(
            InstanceState.CANCELLED, FlowFailure("flow.cancelled", "the instance was cancelled")
        )


def evaluate(what: str, expression: Callable[[], Any]) -> Any:
    """Run a flow expression (``until``, an emit factory, ``returns``); an exception in it
    ends the flow failed with ``flow.expression_failed`` (an :class:`Ending`) instead of
    wedging the instance."""
    try:
        return expression()
    except Exception as exc:  # noqa: BLE001 - user code
        return Ending(
            InstanceState.FAILED,
            FlowFailure(
                "flow.expression_failed",
                f"{what} raised {type(exc).__name__}: {exc}",
                {"expression": what, "error_type": type(exc).__name__},
            ),
        )


def budget_used(steps: Sequence[StepRow], poll: int, now: datetime) -> float:
    """The share of the poll's stored budget (as extended) spent at ``now`` since the poll
    was entered (0.0 when no budget is stored)."""
    stored = [r for r in steps if r.kind is StepKind.DEADLINE and (r.step_id, r.scope) == (poll, 0)]
    if not stored:
        return 0.0
    last = stored[-1]
    budget = (ends_at(last) - last.started_at).total_seconds()
    used = (now - last.started_at).total_seconds() / budget if budget > 0 else 0.0
    return max(used, 0.0)


class Replay:
    """The state of one walk: the bag, the compensation stack and the recovery error as
    the rows rebuild them (scratch of one :meth:`Decider.decide` call)."""

    def __init__(
        self,
        plan: Plan,
        input: BaseModel,
        instance: InstanceRecord,
        steps: Sequence[StepRow],
        mailbox: MailboxView,
        now: datetime,
        claimed: int,
        woken: bool,
    ) -> None:
        self.plan = plan
        self.input = input
        self.instance = instance
        self.steps = steps
        self.mailbox = mailbox
        self.now = now
        self.claimed = claimed
        self.woken = woken
        self.bag: dict[str, Any] = {}
        rows: dict[tuple[int, int, StepKind], list[StepRow]] = {}
        for row in steps:
            key = (row.step_id, row.scope, row.kind)
            found = rows.get(key)
            if found is None:
                rows[key] = [row]
            else:
                found.append(row)
                if found[-2].try_number > row.try_number:
                    found.sort(key=lambda r: r.try_number)
        self.rows = rows
        self._touched: set[int] | None = None
        self.compensations: list[tuple[CapabilityStep, int]] = []
        self.recovery: RecoveryError | None = None
        self.notes: list[Note] = []
        inst = instance
        self.wake = (
            (inst.wake_step_id, inst.wake_scope, inst.wake_at)
            if inst.wake_step_id is not None
            else None
        )

    # -- helpers -------------------------------------------------------------------
    @property
    def touched(self) -> set[int]:
        """The steps with any row."""
        if self._touched is None:
            self._touched = {row.step_id for row in self.steps}
        return self._touched

    def made_now(self, row: StepRow) -> bool:
        """Whether ``row`` is one this run wrote (after the rows its claim loaded)."""
        return any(r is row for r in self.steps[self.claimed :])

    def view(self) -> BagView:
        """The state bag as the rows rebuilt it so far."""
        return BagView(self.instance.id, self.input, self.bag)

    def found(self, step_id: int, scope: int, kind: StepKind = StepKind.STEP) -> list[StepRow]:
        """The rows of ``(step_id, scope)`` of ``kind``, in try order."""
        return self.rows.get((step_id, scope, kind), [])

    def deadline(self, step_id: int, scope: int) -> StepRow | None:
        """The deadline row in force at (step_id, scope) (the latest extension), or None."""
        rows = self.found(step_id, scope, StepKind.DEADLINE)
        return rows[-1] if rows else None

    def apply(self, row: StepRow) -> None:
        """Put a successful row's values into the bag."""
        for key, value in row.values.items():
            if key != DECISION_KEY:
                self.bag[key] = value

    def wake_for(self, step_id: int, scope: int) -> tuple[bool, datetime | None]:
        """Whether the claim found the instance parked at (step_id, scope), and its wake."""
        if self.wake is not None and self.wake[:2] == (step_id, scope):
            return True, self.wake[2]
        return False, None

    def interrupts(self) -> Ending | None:
        """At the frontier: an ending being unwound, a requested cancel, a passed deadline."""
        inst = self.instance
        if inst.ending is not None:
            return Ending(inst.ending, inst.failure)
        if inst.cancel_requested:
            return Ending.cancelled()
        deadline = inst.deadline_at
        if deadline is not None and self.now >= deadline:
            return Ending(
                InstanceState.FAILED,
                FlowFailure(
                    "flow.deadline_exceeded",
                    f"flow {self.plan.name} passed its deadline {deadline.isoformat()}",
                    {"deadline_at": deadline.isoformat()},
                ),
            )
        return None

    def park(
        self,
        wake_at: datetime | None,
        step: int,
        scope: int,
        accept: str | None,
        kind: WakeKind,
        store_first: tuple[StepRow, ...] = (),
    ) -> Suspend:
        """A park, capped by the flow deadline (then waiting for ``deadline``)."""
        deadline = self.instance.deadline_at
        if deadline is not None and (wake_at is None or deadline < wake_at):
            wake_at, kind = deadline, WakeKind.DEADLINE
        return Suspend(wake_at, step, scope, kind, accept, store_first=store_first)

    def decided(self, row: StepRow) -> Ending | None:
        """A Fail or Complete decision a capability returned (recorded in its row)."""
        decision = row.values.get(DECISION_KEY)
        if not decision:
            return None
        if "fail" in decision:
            f = decision["fail"]
            return Ending(
                InstanceState.FAILED, FlowFailure(f["code"], f["message"], f.get("details") or {})
            )
        return Ending(InstanceState.COMPLETED, result=decision["complete"], early=True)

    def stale(self, region: set[int]) -> bool:
        """Whether the mailbox may miss a signal: not read in this run, or rows were
        committed since at steps outside ``region`` (the wait's own)."""
        read_at = self.mailbox.read_at
        if read_at is None:
            return True
        return any(row.step_id not in region for row in self.steps[read_at:])
