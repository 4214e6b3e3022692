"""The decider: what an instance does next, as a pure function of its plan, its instance
row, its journal, its mailbox and the engine clock's instant.

Each call walks the plan from step 0 over the committed rows (the frontier scan): a step
with a deciding row is not executed again; its values go back into the state bag and a
completed compensable step goes on the compensation stack. The first step without one is
the frontier, where the answer is one :mod:`flowpark.engine.decide.decisions` value: run a try,
park,
take a signal, emit, unwind, finish. So a resume, a restart on another node and the rebuilt
compensation stack all come from the same rows, and a test of the decider needs no store,
no clock and no event loop.

The semantics of the steps (a poll's attempts and budget, an ``await_signal``, tries and retry
windows, compensations) are in :mod:`flowpark.engine.decide.steps`; this module holds the entry
point,
the journal's fit to the plan, and the ending of a walk. Nothing here does I/O: flow
expressions (``until``, a match, an emit's factory, ``returns``) are the only user code it
calls, and an exception in one fails the flow (``flow.expression_failed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from flowpark.engine.decide.deadlines import (
    BUDGET_WARNING,
    POLL_BUDGET,
    RETRY_TOTAL,
    SIGNAL_TIMEOUT,
)
from flowpark.engine.decide.decisions import BeginEnding, Finish, MailboxView, RunDecision
from flowpark.engine.decide.steps import Ending, Walk, evaluate
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    InstanceRecord,
    InstanceState,
    StepKind,
    StepRow,
)
from flowpark.engine.values import jsonable, revive
from flowpark.errors import FlowFailure, JournalMismatch
from flowpark.flows.plan import AwaitSignalStep, CapabilityStep, EmitStep, Plan, PollStep

__all__ = ["Decider", "check_fit"]


class Decider:
    """Decides the next step of instances of one plan (no I/O; the only state it keeps is
    which rows of a journal it checked against the plan already).

    Args:
        plan: the flow version the instance runs.
        input: the instance's stored input (JSON); revived once into the plan's model.

    Raises:
        pydantic.ValidationError: the stored input does not fit the plan's input model.
    """

    def __init__(self, plan: Plan, input: Any) -> None:
        self.plan = plan
        self.input: BaseModel = revive(plan.input_model, input)
        self._fitted: tuple[int, int, StepRow | None] = (0, 0, None)

    def decide(
        self,
        instance: InstanceRecord,
        steps: Sequence[StepRow],
        mailbox: MailboxView,
        now: datetime,
        *,
        claimed: int | None = None,
        woken: bool = False,
    ) -> RunDecision:
        """The instance's next decision.

        Args:
            instance: the instance row, as the run knows it (its wake is the wake the
                claim found until the run's first row; ``ending``, ``cancel_requested``).
            steps: its journal rows in commit order (those the claim loaded, then those
                the run wrote).
            mailbox: the untaken signals the run knows.
            now: the engine clock's instant (aware UTC).
            claimed: how many of ``steps`` the claim loaded (rows after them are this
                run's); None: all of them.
            woken: an operator's wake: the wait the claim found is due now.

        Returns:
            One decision value (:mod:`flowpark.engine.decide.decisions`).

        Raises:
            JournalMismatch: a row does not fit the plan (``journal_mismatch``).
        """
        self._check_fit(instance, steps)
        walk = Walk(
            self.plan,
            self.input,
            instance,
            steps,
            mailbox,
            now,
            len(steps) if claimed is None else claimed,
            woken,
        )
        answer = walk.run()
        if isinstance(answer, Ending):
            answer = self._end(walk, answer)
        return walk.noted(answer)

    def _check_fit(self, instance: InstanceRecord, steps: Sequence[StepRow]) -> None:
        """:func:`check_fit`, once per row: a run asks again and again over one journal
        that only grows, so the rows checked before are not checked again."""
        seen, count, last = self._fitted
        if seen == id(steps) and 0 < count <= len(steps) and steps[count - 1] is last:
            check_fit(self.plan, instance, steps[count:])
        else:
            check_fit(self.plan, instance, steps)
        if steps:
            self._fitted = (id(steps), len(steps), steps[-1])

    def _end(self, walk: Walk, ending: Ending) -> RunDecision:
        """A walk that ends: complete, or unwind (compensations in reverse order), then
        finish."""
        if ending.state is InstanceState.COMPLETED:
            if walk.instance.cancel_requested:  # the store would refuse the completion
                return self._end(walk, Ending.cancelled())
            if ending.early:
                return Finish(InstanceState.COMPLETED, result=ending.result)
            returns = self.plan.returns
            if returns is None:
                return Finish(InstanceState.COMPLETED)
            result = evaluate("returns", lambda: jsonable(returns(walk.view())))
            if isinstance(result, Ending):
                return self._end(walk, result)
            return Finish(InstanceState.COMPLETED, result=result)
        if walk.instance.ending is None:
            return BeginEnding(ending.state, ending.failure)
        for step, scope in reversed(walk.compensations):
            decision = walk.compensate(step, scope)
            if decision is not None:
                return decision
        return Finish(ending.state, failure=_marked(ending.failure, walk.failed_compensations()))


def _marked(failure: FlowFailure | None, failed: list[dict[str, Any]]) -> FlowFailure | None:
    """``failure`` with the compensations that failed for good in its details
    (:data:`~flowpark.engine.records.COMPENSATION_FAILURES`), or without them once none has
    (a retry succeeded): the ending's code and message are kept."""
    if failure is None:
        return None
    details = {k: v for k, v in failure.details.items() if k != COMPENSATION_FAILURES}
    if failed:
        details[COMPENSATION_FAILURES] = failed
    if details == failure.details:
        return failure
    return FlowFailure(failure.code, failure.message, details)


_DEADLINE_NODES: dict[str, type] = {
    POLL_BUDGET: PollStep,
    SIGNAL_TIMEOUT: AwaitSignalStep,
    RETRY_TOTAL: CapabilityStep,
}


def check_fit(plan: Plan, instance: InstanceRecord, steps: Sequence[StepRow]) -> None:
    """Check that every journal row fits ``plan``: its step exists and is of the row's kind,
    calling the capability (or taking the signal, emitting the event) the row names.

    Args:
        plan: the plan the instance runs.
        instance: the instance (for the error's fields).
        steps: its journal rows.

    Raises:
        JournalMismatch: the first row that does not fit (``journal_mismatch``), e.g. a
            step removed or a capability id changed under a registered version.
    """
    plan_steps = plan.steps
    for row in steps:
        step = plan_steps[row.step_id] if 0 <= row.step_id < len(plan_steps) else None
        expected = _expected_name(step, row.kind, row.capability_id)
        if expected is None or expected != row.capability_id:
            what = "no step" if step is None else f"{type(step).__name__} {expected!r}"
            raise JournalMismatch(
                f"instance {instance.id} of {plan.name}@{plan.version}: its journal row "
                f"{row.kind} {row.capability_id!r} at step {row.step_id} (scope {row.scope}) "
                f"does not fit the plan, which has {what} there; the plan changed under "
                "a registered version (register the change as a new version)",
                instance_id=instance.id,
                flow=f"{plan.name}@{plan.version}",
                step_id=row.step_id,
                row=f"{row.kind}:{row.capability_id}",
            )


def _expected_name(step: object, kind: StepKind, name: str) -> str | None:
    """The name a row of ``kind`` at ``step`` must carry; None when no row of that kind
    belongs there."""
    if step is None:
        return None
    if kind is StepKind.STEP and isinstance(step, CapabilityStep):
        return step.capability.id
    if kind in (StepKind.COMPENSATION, StepKind.RETRY) and isinstance(step, CapabilityStep):
        return step.compensation.id if step.compensation is not None else None
    if kind is StepKind.SIGNAL and isinstance(step, PollStep | AwaitSignalStep):
        return step.signal.name if step.signal is not None else None
    if kind is StepKind.EMIT and isinstance(step, EmitStep):
        return step.name
    if kind is StepKind.EMIT and isinstance(step, PollStep | AwaitSignalStep):
        return BUDGET_WARNING if step.warn_before is not None else None
    if kind is StepKind.DEADLINE:
        owner = _DEADLINE_NODES.get(name)
        return name if owner is not None and isinstance(step, owner) else None
    return None
