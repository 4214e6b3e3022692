"""The walk over a plan: from node 0 over the committed rows to the frontier, where the
engine executes, takes a signal, parks or ends (the :class:`app.engine.Engine` holds one
:class:`PlanWalker`)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from app.engine.context import jsonable
from app.engine.deadlines import POLL_BUDGET, SIGNAL_TIMEOUT, ends_at
from app.engine.journal import (
    EmittedEvent,
    InstanceState,
    Outcome,
    StepKind,
    StepRow,
    WakeKind,
)
from app.engine.observe import PollEnd
from app.engine.runner import Run
from app.engine.stops import Halt, Interrupt, Park
from app.engine.tries import StepTry, lost_try, record_lost
from app.errors import (
    FlowFailure,
)
from app.flows.capability import RecoveryError
from app.flows.plan import AwaitSignalNode, EmitNode, FailNode, PollNode, StepNode

__all__ = ["PlanWalker"]

log = logging.getLogger("flowpark.engine")


class PlanWalker:
    """Walks a run's plan: node semantics of steps, polls, awaits, emits, completion and
    unwinding.

    Args:
        new_id: makes event ids (the engine's id factory).
    """

    def __init__(self, new_id: Callable[[], str]) -> None:
        self.new_id = new_id

    async def walk(self, run: Run) -> Halt:
        """Walk ``run``'s plan from node 0 to the frontier and on until it parks or ends.

        Args:
            run: the run (one claim of one instance).

        Returns:
            :class:`Halt`: the state the run left the instance in (and its wake).

        Raises:
            StaleFencingToken: another node claimed the instance meanwhile.
        """
        try:
            try:
                await self._walk_nodes(run)
                return await self._complete(run)
            except Interrupt as stop:
                if stop.ending is InstanceState.COMPLETED:
                    return await self._complete(run, stop.result, early=True)
                return await self.unwind(run, stop.ending, stop.failure)
        except Park as parked:
            return parked.halt

    async def _walk_nodes(self, run: Run) -> None:
        cursor = 0
        plan = run.plan
        while cursor < plan.end:
            node = plan.nodes[cursor]
            if isinstance(node, StepNode):
                cursor = await self._step(run, node)
            elif isinstance(node, PollNode):
                cursor = await self._poll(run, node)
            elif isinstance(node, AwaitSignalNode):
                cursor = await self._await_signal(run, node)
            elif isinstance(node, EmitNode):
                cursor = await self._emit(run, node)
            elif isinstance(node, FailNode):
                run.check_interrupts()
                raise Interrupt(
                    InstanceState.FAILED, FlowFailure(node.code, node.message, {"node": node.index})
                )
        run.check_interrupts()

    async def _execute(
        self,
        run: Run,
        node: StepNode,
        scope: int,
        wake_step: int,
        *,
        budget_end: datetime | None = None,
        accept: str | None = None,
    ) -> StepRow | None:
        """Replay or run one try of (node, scope).

        Returns the deciding row (a success or a final failure), or None when the caller
        must look again: a try failed and the next is pending, or a park was refused because
        a signal is waiting. Parks (raises) while the next try is not due yet.
        """
        rows = run.found(node.index, scope)
        for row in rows:
            if row.outcome is Outcome.SUCCESS:
                run.apply(row)
                return row
        if rows and rows[-1].final:
            return rows[-1]
        run.check_interrupts()
        if lost_try(run, node, scope):
            row = await record_lost(run, node, scope)
            return row if row.final else None
        parked, wake_at = run.wake_for(wake_step, scope)
        due = wake_at
        retrying = bool(rows) and rows[-1].next_try_at is not None
        if retrying:
            due = rows[-1].next_try_at
        elif not parked:
            due = None
        if parked and run.woken:  # an operator's wake: the next try or attempt runs now
            due = None
        kind = WakeKind.RETRY if retrying or wake_step == node.index else WakeKind.POLL
        now = run.now()
        if due is not None and now < due:
            wake = min(due, budget_end) if budget_end is not None else due
            await run.park(wake, wake_step, scope, accept, kind=kind)
            return None
        if parked and wake_at is not None and not run.ephemeral:
            run.engine.observer.woke(run.plan.name, (now - wake_at).total_seconds())
        row = await StepTry(run, node, scope, node.capability).execute(defer=True)
        if row.outcome is Outcome.SUCCESS:
            run.apply(row)
            return row
        return row if row.final else None

    def _step_failed(self, node: StepNode, row: StepRow) -> Interrupt:
        return Interrupt(
            InstanceState.FAILED,
            FlowFailure(
                "flow.step_failed",
                f"{node.capability.id} failed after {row.try_number} tries: "
                f"{row.error_type}: {row.error_detail}",
                {
                    "capability_id": node.capability.id,
                    "error_type": row.error_type,
                    "detail": row.error_detail,
                    "node": node.index,
                    "tries": row.try_number,
                },
            ),
        )

    async def _step(self, run: Run, node: StepNode) -> int:
        row = None
        while row is None:
            row = await self._execute(run, node, 0, node.index)
        if row.outcome is Outcome.SUCCESS:
            run.recovery = None
            if node.compensation is not None:
                run.compensations.append((node, 0))
            run.decided(row)
            assert node.next is not None
            return node.next
        if node.failure_target is not None:
            run.recovery = RecoveryError(
                row.error_type or "error", row.error_detail or "", row.try_number
            )
            return node.failure_target
        raise self._step_failed(node, row)

    @staticmethod
    def _timed_out(target: int | None, failure: FlowFailure) -> int:
        if target is None:
            raise Interrupt(InstanceState.FAILED, failure)
        return target

    @staticmethod
    def _block_taken(run: Run, start: int | None, stop: int) -> bool:
        return start is not None and any(i in run.touched_steps for i in range(start, stop))

    async def _poll(self, run: Run, node: PollNode) -> int:
        body = run.plan.nodes[node.body_index]
        assert isinstance(body, StepNode)
        scope = self._replay_poll(run, node, body)
        if scope is None:
            return node.satisfied_target
        if self._block_taken(run, node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]
        accept = self._accepts(node)
        if node.signal is not None:
            await run.mailbox.refresh()
        while True:  # the frontier
            run.check_interrupts()
            if await self._take_poll_signal(run, node, scope):
                return node.satisfied_target
            end = _budget_end(run, node, body)
            if end is None:  # entering the poll: its budget is stored before attempt 0
                end = ends_at(await run.fix_deadline(node.index, 0, POLL_BUDGET, node.timeout))
            if run.now() >= end:
                _poll_ended(run, node, PollEnd.TIMED_OUT)
                return self._timed_out(node.timeout_target, _not_satisfied(node, body, scope))
            row = await self._execute(run, body, scope, node.index, budget_end=end, accept=accept)
            if row is None:
                continue
            if self._attempted(run, node, body, row):
                return node.satisfied_target
            end = _budget_end(run, node, body)
            assert end is not None
            wake_at = min(run.now() + node.interval.delay(scope, run.instance_id), end)
            scope += 1
            run.pending_wake = (node.index, scope, wake_at)
            await run.park(wake_at, node.index, scope, accept, kind=WakeKind.POLL)

    @staticmethod
    def _replay_poll(run: Run, node: PollNode, body: StepNode) -> int | None:
        """Replay the poll's committed attempts: None when one satisfied it (or a signal
        ended it), else the scope of the next attempt."""
        scope = 0
        while True:
            signalled = run.found(node.index, scope, StepKind.SIGNAL)
            if signalled:
                run.apply(signalled[0])
                return None
            success = [r for r in run.found(body.index, scope) if r.outcome is Outcome.SUCCESS]
            if not success:
                return scope
            run.apply(success[0])
            if _satisfied(node, run):
                return None
            scope += 1

    @staticmethod
    async def _take_poll_signal(run: Run, node: PollNode, scope: int) -> bool:
        """Take a waiting signal that ends the poll, if any: True when one was taken."""
        if node.signal is None:
            return False
        pending = await run.mailbox.matching(
            node.index, node.signal.name, node.signal.model, node.match
        )
        if pending is None:
            return False
        await run.mailbox.take(node.index, scope, pending, node.signal.model)
        _poll_ended(run, node, PollEnd.SIGNALLED)
        return True

    def _attempted(self, run: Run, node: PollNode, body: StepNode, row: StepRow) -> bool:
        """Judge a poll attempt's deciding row: True when the poll is satisfied."""
        observer = run.engine.observer
        if row.outcome is Outcome.FAILURE:
            observer.attempted(run.plan.name, body.capability.id, "failed")
            raise self._step_failed(body, row)
        run.decided(row)
        if _satisfied(node, run):
            observer.attempted(run.plan.name, body.capability.id, "satisfied")
            _poll_ended(run, node, PollEnd.SATISFIED)
            return True
        observer.attempted(run.plan.name, body.capability.id, "unsatisfied")
        return False

    @staticmethod
    def _accepts(node: PollNode | AwaitSignalNode) -> str | None:
        return node.signal.name if node.signal is not None else None

    async def _await_signal(self, run: Run, node: AwaitSignalNode) -> int:
        taken = run.found(node.index, 0, StepKind.SIGNAL)
        if taken:
            run.apply(taken[0])
            return node.satisfied_target
        if self._block_taken(run, node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]
        await run.mailbox.refresh()
        while True:
            run.check_interrupts()
            pending = await run.mailbox.matching(
                node.index, node.signal.name, node.signal.model, node.match
            )
            if pending is not None:
                await run.mailbox.take(node.index, 0, pending, node.signal.model)
                return node.satisfied_target
            wake = None
            if node.timeout is not None:  # stored when the wait begins (the park carries it)
                stored = run.deadline(node.index, 0)
                if stored is None:
                    parked, wake = run.wake_for(node.index, 0)
                    if not parked:  # (parked with none: a journal from before they were)
                        stored = await run.fix_deadline(
                            node.index, 0, SIGNAL_TIMEOUT, node.timeout, carry=True
                        )
                if stored is not None:
                    wake = ends_at(stored)
            if wake is not None and run.now() >= wake:
                return self._timed_out(
                    node.timeout_target,
                    FlowFailure(
                        "flow.signal_not_received",
                        f"signal {node.signal.name} did not arrive within {node.timeout}",
                        {"node": node.index},
                    ),
                )
            run.pending_wake = (node.index, 0, wake)
            await run.park(wake, node.index, 0, node.signal.name, kind=WakeKind.SIGNAL)

    async def _emit(self, run: Run, node: EmitNode) -> int:
        if run.found(node.index, 0, StepKind.EMIT):
            return node.next
        run.check_interrupts()
        payload = _evaluate(f"emit {node.name}", lambda: jsonable(node.factory(run.view())))
        now = run.now()
        event = EmittedEvent(self.new_id(), node.name, payload)
        row = StepRow(
            run.instance_id,
            node.index,
            0,
            StepKind.EMIT,
            node.name,
            Outcome.SUCCESS,
            now,
            now,
            values={"event_id": event.id},
        )
        # the step the run executed before (not written yet) goes first, in the same write
        deferred, run.unflushed = run.unflushed, None
        ack = await run.journal.writes.commit_step(
            run.token, row, run.lease_until(), events=[event], deferred=deferred
        )
        run.record(row)
        run.after_ack(ack)
        return node.next

    async def _complete(self, run: Run, result: Any = None, early: bool = False) -> Halt:
        if not early:
            returns = run.plan.returns
            result = (
                _evaluate("returns", lambda: jsonable(returns(run.view()))) if returns else None
            )
        await run.flush()
        ack = await run.journal.writes.finish(
            run.instance_id, run.token, run.now(), InstanceState.COMPLETED, result=result
        )
        if not ack.applied:
            return await self.unwind(
                run,
                InstanceState.CANCELLED,
                FlowFailure("flow.cancelled", "the instance was cancelled"),
            )
        run.settle(
            state=InstanceState.COMPLETED,
            result=result,
            ending=None,
            wake_at=None,
            wake_step_id=None,
            wake_scope=None,
            wake_kind=None,
            lease_owner=None,
            lease_expires_at=None,
        )
        return Halt(InstanceState.COMPLETED)

    async def _compensate(self, run: Run, node: StepNode, scope: int) -> None:
        """Run the compensation of (node, scope) under its retry policy until it succeeds
        or fails for good (a final failed row: the instance view lists it). Between tries
        the instance parks until the next try is due (raises Park), as a step's do."""
        compensation = node.compensation
        assert compensation is not None
        while True:
            rows = run.found(node.index, scope, StepKind.COMPENSATION)
            if any(r.outcome is Outcome.SUCCESS for r in rows):
                return
            last = rows[-1] if rows else None
            if last is not None and (last.final or last.next_try_at is None):
                return  # failed for good (recorded, logged when it happened)
            if last is not None and last.next_try_at and run.now() < last.next_try_at:
                run.pending_wake = (node.index, scope, last.next_try_at)
                await run.park(
                    last.next_try_at, node.index, scope, kind=WakeKind.RETRY, unwinding=True
                )
            row = await StepTry(run, node, scope, compensation, StepKind.COMPENSATION).execute()
            if row.outcome is Outcome.FAILURE and row.final:
                log.error(
                    "instance %s: compensation %s failed for good after %d tries: %s: %s",
                    run.instance_id,
                    compensation.id,
                    row.try_number,
                    row.error_type,
                    row.error_detail,
                )

    async def unwind(self, run: Run, ending: InstanceState, failure: FlowFailure | None) -> Halt:
        """Run compensations of completed steps in reverse order, once each, then end.

        Args:
            run: the run to end.
            ending: ``failed`` or ``cancelled``.
            failure: why it ends (stored on the instance).

        Returns:
            :class:`Halt` in state ``ending`` (or ``suspended`` while a compensation waits
            for its next try).
        """
        await run.flush()
        if run.instance.ending is None:
            await run.journal.writes.begin_ending(
                run.instance_id, run.token, run.now(), ending, failure
            )
        for node, scope in reversed(run.compensations):
            await self._compensate(run, node, scope)
        await run.journal.writes.finish(
            run.instance_id, run.token, run.now(), ending, failure=failure
        )
        run.settle(
            state=ending,
            failure=failure,
            ending=None,
            wake_at=None,
            wake_step_id=None,
            wake_scope=None,
            wake_kind=None,
            lease_owner=None,
            lease_expires_at=None,
        )
        return Halt(ending)


def _evaluate(what: str, expression: Callable[[], Any]) -> Any:
    """Run a flow expression (``until``, an emit factory, ``returns``); an exception in it
    fails the flow with ``flow.expression_failed`` instead of wedging the instance."""
    try:
        return expression()
    except Exception as exc:  # noqa: BLE001 - user code
        raise Interrupt(
            InstanceState.FAILED,
            FlowFailure(
                "flow.expression_failed",
                f"{what} raised {type(exc).__name__}: {exc}",
                {"expression": what, "error_type": type(exc).__name__},
            ),
        ) from exc


def _poll_ended(run: Run, node: PollNode, how: str) -> None:
    """Report a parked poll's end with the share of its budget used: from the instant the
    poll was entered to now, over the stored budget (as extended)."""
    if run.ephemeral:
        return
    stored = run.deadline(node.index, 0)
    used = 0.0
    if stored is not None:
        budget = (ends_at(stored) - stored.started_at).total_seconds()
        if budget > 0:
            used = (run.now() - stored.started_at).total_seconds() / budget
    run.engine.observer.poll_ended(run.plan.name, max(used, 0.0), how)


def _budget_end(run: Run, node: PollNode, body: StepNode) -> datetime | None:
    """The poll's budget end: the stored instant (as extended), or None before it is."""
    stored = run.deadline(node.index, 0)
    if stored is not None:
        return ends_at(stored)
    # a journal written before budgets were stored: from attempt 0's row
    first = run.found(body.index, 0)
    return first[0].started_at + node.timeout if first else None


def _not_satisfied(node: PollNode, body: StepNode, attempts: int) -> FlowFailure:
    """The failure of a poll whose budget ended unsatisfied (``flow.poll_not_satisfied``)."""
    return FlowFailure(
        "flow.poll_not_satisfied",
        f"{body.capability.id} was not satisfied within {node.timeout}",
        {"node": node.index, "capability_id": body.capability.id, "attempts": attempts},
    )


def _satisfied(node: PollNode, run: Run) -> bool:
    return bool(_evaluate("until", lambda: node.until(run.view())))
