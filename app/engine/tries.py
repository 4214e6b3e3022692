"""One try of a capability at a node and scope: its retry window, its start row (for a
heartbeating capability), the call under the capability's limits, and the journal row that
records how it ended (success with its values and decision, or failure with the retry
policy's answer: the next try's instant, or final)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from app.engine.context import ExecutionContext, jsonable
from app.engine.deadlines import RETRY_TOTAL, ends_at
from app.engine.journal import Outcome, StepKind, StepRow
from app.engine.limits import CapabilityTimeout
from app.engine.observe import LOG_CONTEXT
from app.engine.stops import DECISION_KEY, CancelRequested, cancelled
from app.errors import StaleFencingToken
from app.flows.capability import Capability, Complete, Fail
from app.flows.durations import RetryPolicy
from app.flows.plan import StepNode

if TYPE_CHECKING:
    from app.engine.runner import Run

__all__ = ["StepTry", "lost_try", "record_lost"]

log = logging.getLogger("flowpark.engine")


class StepTry:
    """The next try of ``capability`` at (node, scope) of ``kind``.

    Args:
        run: the run that makes the try.
        node: the step node (its retry window belongs to its own capability).
        scope: the attempt number inside a poll; 0 elsewhere.
        capability: the capability to call (the node's, or its compensation).
        kind: ``step`` or ``compensation``.
    """

    def __init__(
        self,
        run: Run,
        node: StepNode,
        scope: int,
        capability: Capability,
        kind: StepKind = StepKind.STEP,
    ) -> None:
        self.run = run
        self.node = node
        self.scope = scope
        self.capability = capability
        self.kind = kind
        self.opts = capability.options
        self.previous = run.found(node.index, scope, kind)
        self.try_number = len(self.previous) + 1
        self.first_start = retry_start(run, node, scope, kind, self.previous)

    async def execute(self, *, defer: bool = False) -> StepRow:
        """Run the try and commit its row.

        Args:
            defer: keep the row as :attr:`Run.unflushed` instead: the run's next write
                carries it (a park writes it in the same statement), before anything else
                happens. A row with review requests is written at once.

        Returns:
            The row (success, or failure with ``final``/``next_try_at``).

        Raises:
            Interrupt: a heartbeat learned that a cancel was requested.
            StaleFencingToken: another node took the instance over (nothing committed).
        """
        run = self.run
        window_end = await self._open_window()
        await run.flush()
        if window_end is not None and run.now() >= window_end:
            return await self._window_ended(window_end)  # woken late: no try starts
        checkpoint = await self._start_row()
        started = run.now()
        ctx = self._context(checkpoint)
        run.heartbeat_written = None
        run.tries += 1
        decision, error_type, detail = await self._call(ctx)
        now = run.now()
        run.engine.observer.tried(
            self.capability.id,
            "success" if error_type is None else "failure",
            (now - started).total_seconds(),
        )
        if error_type is None:
            row = self._succeeded(ctx, decision, started, now)
        else:
            row = self._failed(error_type, detail, started, now)
        if defer and not ctx.reviews:
            run.unflushed = row
            run.record(row)
            return row
        ack = await run.journal.writes.commit_step(
            run.token, row, run.lease_until(), reviews=ctx.reviews or None
        )
        run.record(row)
        run.after_ack(ack)
        return row

    async def _open_window(self) -> datetime | None:
        """Store the retry window's end before the first try (an instant, so nothing moves
        it). Returns the window's end when an earlier try was made under one (the window
        may have ended before this try), else None."""
        total = self.opts.retry.total_duration if self.opts.retry is not None else None
        if total is None or self.kind is not StepKind.STEP:
            return None
        if self.first_start is None:
            window = await self.run.fix_deadline(self.node.index, self.scope, RETRY_TOTAL, total)
            self.first_start = ends_at(window) - total
        return self.first_start + total if self.previous else None

    async def _start_row(self) -> Any:
        """For a heartbeating step: record the try's start (its heartbeat timeout renews the
        lease) and release whoever waits for the run. Returns the last checkpoint."""
        run, hb_timeout = self.run, self.opts.heartbeat_timeout
        if hb_timeout is None or self.kind is not StepKind.STEP:
            return None
        beat = await run.journal.writes.last_heartbeat(run.instance_id, self.node.index, self.scope)
        ack = await run.journal.writes.start_try(
            run.instance_id,
            run.token,
            self.node.index,
            self.scope,
            self.try_number,
            run.now(),
            run.now() + hb_timeout,
        )
        run.after_ack(ack)
        if run.detach is not None and not run.detach.done():
            run.detach.set_result(None)  # an in-process wait: the caller need not wait
        return beat.value if beat is not None else None

    def _context(self, checkpoint: Any) -> ExecutionContext:
        step = self.kind is StepKind.STEP
        return ExecutionContext(
            self.run,
            step_id=self.node.index,
            scope=self.scope,
            try_number=self.try_number,
            recovery_error=self.run.recovery,
            checkpoint=checkpoint,
            heartbeat_timeout=self.opts.heartbeat_timeout if step else None,
            kind=self.kind,
        )

    async def _call(self, ctx: ExecutionContext) -> tuple[Fail | Complete | None, str | None, str]:
        """Call the capability under its limits: ``(decision, error type, detail)``, the
        error type None when the call succeeded."""
        run, node, scope = self.run, self.node, self.scope
        LOG_CONTEXT.set(
            {
                "instance_id": run.instance_id,
                "flow": run.plan.name,
                "step": node.index,
                "scope": scope,
            }
        )
        try:
            with run.engine.observer.call_span(
                run.instance_id,
                run.plan.name,
                self.capability.id,
                node.index,
                scope,
                self.try_number,
            ):
                decision = await run.engine.limits.call(self.capability, ctx, self.opts, run)
        except (asyncio.CancelledError, StaleFencingToken):
            raise  # cancelled, or the lease was lost: this try commits nothing
        except CapabilityTimeout as exc:
            return None, exc.kind, str(exc)
        except CancelRequested:  # learned from a heartbeat: stop the try and unwind
            raise cancelled() from None
        except Exception as exc:  # noqa: BLE001 - any exception is a failed try
            return None, type(exc).__name__, str(exc) or repr(exc)
        return decision, None, ""

    def _succeeded(
        self, ctx: ExecutionContext, decision: Any, started: datetime, now: datetime
    ) -> StepRow:
        values = dict(ctx.puts)
        if isinstance(decision, Fail):
            values[DECISION_KEY] = {
                "fail": {
                    "code": decision.code,
                    "message": decision.message,
                    "details": decision.details,
                }
            }
        elif isinstance(decision, Complete):
            values[DECISION_KEY] = {"complete": jsonable(decision.result)}
        return StepRow(
            self.run.instance_id,
            self.node.index,
            self.scope,
            self.kind,
            self.capability.id,
            Outcome.SUCCESS,
            started,
            now,
            try_number=self.try_number,
            values=values,
        )

    def _failed(self, error_type: str, detail: str, started: datetime, now: datetime) -> StepRow:
        # a compensation's tries too follow their policy (waits between are parks)
        next_at = next_try_at(
            self.opts.retry, self.try_number, error_type, now, self.first_start or started
        )
        log.info(
            "instance %s: %s try %d failed: %s: %s",
            self.run.instance_id,
            self.capability.id,
            self.try_number,
            error_type,
            detail,
        )
        return failed_row(self, error_type, detail[:2000], started, now, next_at)

    async def _window_ended(self, window_end: datetime) -> StepRow:
        """Record the final failure of (node, scope) without a call: its retry window ended
        before the next try could start (a wake later than the window's end)."""
        run, now = self.run, self.run.now()
        detail = f"the retry window ended at {window_end.isoformat()}; no try started"
        row = failed_row(self, "retry_window_ended", detail, now, now, None)
        ack = await run.journal.writes.commit_step(run.token, row, run.lease_until())
        run.record(row)
        run.after_ack(ack)
        return row


def failed_row(
    step_try: StepTry,
    error_type: str,
    detail: str,
    started: datetime,
    now: datetime,
    next_at: datetime | None,
) -> StepRow:
    """The failure row of ``step_try``: final unless ``next_at`` says when the next try is due.

    Args:
        step_try: the try.
        error_type: what failed it (an exception's type name, ``execute_timeout`` ...).
        detail: the error's text.
        started: when the try started (aware UTC).
        now: when it ended (aware UTC).
        next_at: the next try's instant; None: the failure is final.

    Returns:
        The row, not yet committed.
    """
    return StepRow(
        step_try.run.instance_id,
        step_try.node.index,
        step_try.scope,
        step_try.kind,
        step_try.capability.id,
        Outcome.FAILURE,
        started,
        now,
        try_number=step_try.try_number,
        error_type=error_type,
        error_detail=detail,
        final=next_at is None,
        next_try_at=next_at,
    )


def next_try_at(
    policy: RetryPolicy | None, try_number: int, error_type: str, now: datetime, first: datetime
) -> datetime | None:
    """The retry policy's answer after failed try ``try_number``.

    Args:
        policy: the capability's retry policy (None: no retry).
        try_number: the failed try (1-based).
        error_type: what failed it.
        now: when it failed (aware UTC).
        first: when the tries began (``total_duration`` counts from it).

    Returns:
        When the next try is due, or None when the policy allows no other.
    """
    if policy is None:
        return None
    delay = policy.delay_after(try_number)
    if policy.allows_another(try_number, error_type, (now + delay) - first):
        return now + delay
    return None


def retry_start(
    run: Run, node: StepNode, scope: int, kind: StepKind, previous: list[StepRow]
) -> datetime | None:
    """When the tries of (node, scope) began, for the retry policy's ``total_duration``.

    Args:
        run: the run.
        node: the step node.
        scope: the scope.
        kind: ``step`` or ``compensation``.
        previous: the earlier tries' rows, in order.

    Returns:
        The stored retry window's start, else (a journal written before windows were
        stored) the first try's start; None before the first try.
    """
    retry = node.capability.options.retry
    if kind is StepKind.STEP and retry is not None and retry.total_duration is not None:
        window = run.deadline(node.index, scope)
        if window is not None:  # its end, extended or not, less the policy's span
            return ends_at(window) - retry.total_duration
    return previous[0].started_at if previous else None


def lost_try(run: Run, node: StepNode, scope: int) -> bool:
    """Whether the claim found a heartbeating try at (node, scope) in flight whose holder is
    gone (its lease expired).

    Args:
        run: the run.
        node: the step node.
        scope: the scope.

    Returns:
        True when such a try is to be recorded as failed (:func:`record_lost`).
    """
    inst = run.instance
    tries = len(run.found(node.index, scope))
    return (
        inst.try_step_id == node.index and inst.try_scope == scope and inst.try_number == tries + 1
    )


async def record_lost(run: Run, node: StepNode, scope: int) -> StepRow:
    """Journal the try lost with a dead node (its heartbeats stopped) as a failed try.

    Args:
        run: the run.
        node: the step node.
        scope: the scope.

    Returns:
        The committed failure row (``heartbeat_timeout``; final unless the retry policy
        allows another try).
    """
    await run.flush()
    step_try = StepTry(run, node, scope, node.capability)
    started = run.instance.try_started_at or run.now()
    now = run.now()
    detail = (
        f"no heartbeat from try {step_try.try_number} since "
        f"{(run.instance.heartbeat_at or started).isoformat()}"
    )
    first = step_try.first_start or started
    next_at = next_try_at(step_try.opts.retry, step_try.try_number, "heartbeat_timeout", now, first)
    row = failed_row(step_try, "heartbeat_timeout", detail, started, now, next_at)
    ack = await run.journal.writes.commit_step(run.token, row, run.lease_until())
    run.instance = replace(run.instance, try_step_id=None, try_scope=None, try_number=None)
    run.record(row)
    run.after_ack(ack)
    return row
