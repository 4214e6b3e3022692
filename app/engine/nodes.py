"""One walk of the decider over a plan: the node semantics of steps, polls, awaits, emits
and fail nodes (pure; see :mod:`app.engine.decider`). Tries are
:mod:`app.engine.attempts`; the state rebuilt from the rows is :mod:`app.engine.replay`.

A handler answers the next node's index (the walk goes on), an :class:`Ending` (the walk
ends: complete, fail or cancel) or a decision (the frontier is here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from app.engine.attempts import Attempts
from app.engine.deadlines import POLL_BUDGET, SIGNAL_TIMEOUT, deadline_row, ends_at
from app.engine.decisions import (
    Decision,
    Emit,
    Execute,
    Note,
    Park,
    ReadMailbox,
    Record,
    RefuseSignal,
    TakeSignal,
)
from app.engine.journal import (
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    WakeKind,
)
from app.engine.observe import PollEnd
from app.engine.replay import Ending, budget_used, evaluate
from app.engine.values import jsonable, revive
from app.errors import FlowFailure
from app.flows.capability import RecoveryError, bag_key
from app.flows.plan import AwaitSignalNode, EmitNode, FailNode, PollNode, StepNode

__all__ = ["Ending", "Walk", "budget_used", "evaluate"]

Step = int | Ending | Decision
"""What a node handler answers: the next node, an ending, or the frontier's decision."""


class Walk(Attempts):
    """One walk over the plan, from node 0 to the frontier."""

    # -- the walk ------------------------------------------------------------------
    def run(self) -> Ending | Decision:
        """Walk from node 0 to the frontier: its decision, or the walk's ending."""
        cursor = 0
        plan = self.plan
        while cursor < plan.end:
            node = plan.nodes[cursor]
            step: Step
            if isinstance(node, StepNode):
                step = self.step(node)
            elif isinstance(node, PollNode):
                step = self.poll(node)
            elif isinstance(node, AwaitSignalNode):
                step = self.await_signal(node)
            elif isinstance(node, EmitNode):
                step = self.emit(node)
            else:
                assert isinstance(node, FailNode)
                step = self.interrupts() or Ending(
                    InstanceState.FAILED, FlowFailure(node.code, node.message, {"node": node.index})
                )
            if not isinstance(step, int):
                return step
            cursor = step
        return self.interrupts() or Ending(InstanceState.COMPLETED)

    def noted(self, decision: Decision) -> Decision:
        """``decision`` with what this walk noted (a poll that timed out now)."""
        if not self.notes:
            return decision
        return replace(decision, notes=decision.notes + tuple(self.notes))

    # -- nodes -------------------------------------------------------------------------
    def step(self, node: StepNode) -> Step:
        """A step: its deciding row routes on (success: next; failure: the failure route,
        else the flow fails)."""
        row = self.attempt(node, 0, node.index)
        if not isinstance(row, StepRow):
            return row
        if row.outcome is Outcome.SUCCESS:
            self.recovery = None
            if node.compensation is not None:
                self.compensations.append((node, 0))
            stop = self.decided(row)
            if stop is not None:
                return stop
            assert node.next is not None
            return node.next
        if node.failure_target is not None:
            self.recovery = RecoveryError(
                row.error_type or "error", row.error_detail or "", row.try_number
            )
            return node.failure_target
        return self.step_failed(node, row)

    def block_taken(self, start: int | None, stop: int) -> bool:
        """Whether a row exists in the block ``[start, stop)`` (an on_timeout block)."""
        return start is not None and any(i in self.touched for i in range(start, stop))

    def timed_out(self, target: int | None, failure: FlowFailure) -> int | Ending:
        """A wait's timeout: its on_timeout block, else the flow fails with ``failure``."""
        return target if target is not None else Ending(InstanceState.FAILED, failure)

    def poll(self, node: PollNode) -> Step:
        """A poll: replay its attempts; at the frontier a signal that ends it, its budget's
        end, a park until the next attempt, or the next attempt."""
        body = self.plan.nodes[node.body_index]
        assert isinstance(body, StepNode)
        scope = self.replay_poll(node, body)
        if not isinstance(scope, int) or scope < 0:
            return scope if isinstance(scope, Ending) else node.satisfied_target
        if self.block_taken(node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]
        accept = node.signal.name if node.signal is not None else None
        end = self.budget_end(node, body)
        if scope > 0 and end is not None and not self.wake_for(node.index, scope)[0]:
            last = [r for r in self.found(body.index, scope - 1) if r.outcome is Outcome.SUCCESS]
            if last and self.made_now(last[0]):  # just made: report it, wait the interval
                self.notes.append(Note(node.index, "unsatisfied", attempt=scope - 1))
                wake_at = min(self.now + node.interval.delay(scope - 1, self.instance.id), end)
                return self.park(wake_at, node.index, scope, accept, WakeKind.POLL)
        if node.signal is not None and self.stale({node.index, body.index}):
            return ReadMailbox(node.index)
        stop = self.interrupts()
        if stop is not None:
            return stop
        if node.signal is not None:
            taken = self.take(node.index, scope, node.signal.name, node.signal.model, node.match)
            if taken is not None:
                if isinstance(taken, TakeSignal):
                    used = budget_used(self.steps, node.index, self.now)
                    self.notes.append(Note(node.index, PollEnd.SIGNALLED, used))
                return taken
        store: tuple[StepRow, ...] = ()
        if end is None:  # entering the poll: its budget is stored before attempt 0
            end = self.now + node.timeout
            budget = deadline_row(self.instance.id, node.index, 0, POLL_BUDGET, self.now, end)
            store = (budget,)
        if self.now >= end:
            self.notes.append(
                Note(node.index, PollEnd.TIMED_OUT, budget_used(self.steps, node.index, self.now))
            )
            return self.timed_out(node.timeout_target, _not_satisfied(node, body, scope))
        row = self.attempt(body, scope, node.index, budget_end=end, accept=accept, poll=node.index)
        if isinstance(row, StepRow):  # a final failure (replay went past every success)
            if self.made_now(row):
                self.notes.append(Note(node.index, "failed", attempt=scope))
            return self.step_failed(body, row)
        if store and isinstance(row, Execute | Record | Park):
            return replace(row, store_first=store + row.store_first)
        return row

    def replay_poll(self, node: PollNode, body: StepNode) -> int | Ending:
        """Replay the poll's committed attempts: -1 when one satisfied it (or a signal
        ended it), else the scope of the next attempt (or an ending: a decision of the
        body's capability, an ``until`` that raised)."""
        scope = 0
        while True:
            signalled = self.found(node.index, scope, StepKind.SIGNAL)
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
            satisfied = evaluate("until", lambda: bool(node.until(self.view())))
            if isinstance(satisfied, Ending):
                return satisfied
            if satisfied:
                if self.made_now(success[0]):  # satisfied by this run's attempt
                    used = budget_used(self.steps, node.index, self.now)
                    self.notes.append(Note(node.index, PollEnd.SATISFIED, attempt=scope))
                    self.notes.append(Note(node.index, PollEnd.SATISFIED, used))
                return -1
            scope += 1

    def budget_end(self, node: PollNode, body: StepNode) -> datetime | None:
        """The poll's budget end: the stored instant (as extended), or None before it is."""
        stored = self.deadline(node.index, 0)
        if stored is not None:
            return ends_at(stored)
        # a journal written before budgets were stored: from attempt 0's row
        first = self.found(body.index, 0)
        return first[0].started_at + node.timeout if first else None

    def take(
        self,
        node: int,
        scope: int,
        name: str,
        model: type[BaseModel],
        match: Callable[[Any, Any], bool] | None,
    ) -> TakeSignal | RefuseSignal | None:
        """The oldest waiting signal ``name``: taken when it belongs to the wait at
        ``node`` (its match holds over the bag and the payload; a match that raises
        refuses), else refused; None when none waits."""
        signal = next(
            (s for s in self.mailbox.signals if s.name == name and s.taken_at is None), None
        )
        if signal is None:
            return None
        if match is not None and not self.matches(signal, model, match):
            return RefuseSignal(signal, node)
        return TakeSignal(signal, node, self.signal_row(node, scope, signal, model))

    def matches(
        self, signal: SignalRecord, model: type[BaseModel], match: Callable[[Any, Any], bool]
    ) -> bool:
        """Whether ``match`` holds for ``signal`` (False when it raises)."""
        try:
            return bool(match(self.view(), revive(model, signal.payload)))
        except Exception:  # noqa: BLE001 - user code: a match that raises refuses
            return False

    def signal_row(
        self, node: int, scope: int, signal: SignalRecord, model: type[BaseModel]
    ) -> StepRow:
        """The journal row of taking ``signal`` at (node, scope): its payload in the bag."""
        payload = revive(model, signal.payload).model_dump(mode="json", by_alias=True)
        return StepRow(
            self.instance.id,
            node,
            scope,
            StepKind.SIGNAL,
            signal.name,
            Outcome.SUCCESS,
            self.now,
            self.now,
            values={bag_key(model): payload},
        )

    def await_signal(self, node: AwaitSignalNode) -> Step:
        """An ``await_signal``: the signal taken, its timeout (stored with the park that
        begins the wait), or a park until either."""
        taken = self.found(node.index, 0, StepKind.SIGNAL)
        if taken:
            self.apply(taken[0])
            return node.satisfied_target
        if self.block_taken(node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]
        if self.stale({node.index}):
            return ReadMailbox(node.index)
        stop = self.interrupts()
        if stop is not None:
            return stop
        signal = self.take(node.index, 0, node.signal.name, node.signal.model, node.match)
        if signal is not None:
            return signal
        wake = None
        store: tuple[StepRow, ...] = ()
        if node.timeout is not None:  # stored when the wait begins (the park carries it)
            stored = self.deadline(node.index, 0)
            if stored is None:
                parked, wake = self.wake_for(node.index, 0)
                if not parked:  # (parked with none: a journal from before they were)
                    end = self.now + node.timeout
                    stored = deadline_row(
                        self.instance.id, node.index, 0, SIGNAL_TIMEOUT, self.now, end
                    )
                    store = (stored,)
            if stored is not None:
                wake = ends_at(stored)
        if wake is not None and self.now >= wake:
            return self.timed_out(
                node.timeout_target,
                FlowFailure(
                    "flow.signal_not_received",
                    f"signal {node.signal.name} did not arrive within {node.timeout}",
                    {"node": node.index},
                ),
            )
        return self.park(wake, node.index, 0, node.signal.name, WakeKind.SIGNAL, store)

    def emit(self, node: EmitNode) -> Step:
        """An emit: its event with its row, once."""
        if self.found(node.index, 0, StepKind.EMIT):
            return node.next
        stop = self.interrupts()
        if stop is not None:
            return stop
        payload = evaluate(f"emit {node.name}", lambda: jsonable(node.factory(self.view())))
        if isinstance(payload, Ending):
            return payload
        return Emit(node.index, node.name, payload)


def _not_satisfied(node: PollNode, body: StepNode, attempts: int) -> FlowFailure:
    """The failure of a poll whose budget ended unsatisfied (``flow.poll_not_satisfied``)."""
    return FlowFailure(
        "flow.poll_not_satisfied",
        f"{body.capability.id} was not satisfied within {node.timeout}",
        {"node": node.index, "capability_id": body.capability.id, "attempts": attempts},
    )
