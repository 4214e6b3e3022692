"""One try of a capability, as an :class:`~flowpark.engine.decide.decisions.Execute` decision names
it:
its start row (for a heartbeating capability), the call under the capability's limits,
and the journal row that records how it ended (success with its values and decision, or
failure with the retry policy's answer: the next try's instant, or final). A capability's
raised error is data here: a failure row, never an exception out of the try."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from flowpark.engine.context import ExecutionContext, TryHost
from flowpark.engine.decide.decisions import Execute
from flowpark.engine.decide.retries import failure_row, next_try_at, window_ended_row
from flowpark.engine.execute.host import RunHost
from flowpark.engine.execute.limits import CANCEL_LEARNED, CapabilityTimeout, LeaseHolder
from flowpark.engine.observe import LOG_CONTEXT
from flowpark.engine.ports import Correlation, TryMark
from flowpark.engine.records import Ack, Outcome, ReviewRequest, StepKind, StepRow
from flowpark.engine.values import DECISION_KEY, jsonable
from flowpark.errors import StaleFencingToken
from flowpark.flows.capability import Capability, Complete, Fail
from flowpark.flows.plan import CapabilityStep, Plan
from flowpark.flows.providers import ProviderPushback, pushback_of

__all__ = ["PushedBack", "TryRun", "make_try"]

log = logging.getLogger("flowpark.engine")


@dataclass(frozen=True)
class PushedBack:
    """A try its provider pushed back (a 429/503, or ``ProviderPushback``): no row, no
    failed try; the run parks until ``until``.

    Attributes:
        until: the provider's ``Retry-After`` instant, or None for the default backoff.
        status: the HTTP status, if any.
        detail: the answer's short text.
    """

    until: datetime | None
    status: int | None
    detail: str


class TryRun(LeaseHolder, TryHost, Protocol):
    """What a try uses of its run (:class:`flowpark.engine.execute.executor.Executor`).

    Attributes:
        tries: tries this run made.
        detach: resolved when a heartbeating try starts (whoever awaits the run may stop).
        heartbeat_written: the last heartbeat value this run wrote, and when.
    """

    tries: int
    detach: asyncio.Future[None] | None
    heartbeat_written: tuple[Any, datetime] | None

    @property
    def host(self) -> RunHost:
        """The engine."""

    @property
    def plan(self) -> Plan:
        """The plan the instance runs."""

    @property
    def ephemeral(self) -> bool:
        """An ephemeral run (no rows outlive it)."""

    async def flush(self) -> None:
        """Commit the row the run deferred, if any."""

    def lease_until(self) -> datetime:
        """The lease end for a write now."""

    def record(self, row: StepRow) -> None:
        """Remember a row committed (or deferred) by the run."""

    def defer(self, row: StepRow, keys: tuple[Correlation, ...] = ()) -> None:
        """Keep ``row`` (and the correlation keys it records) for the run's next write."""

    def keep_keys(self, row: StepRow, keys: tuple[Correlation, ...]) -> None:
        """Write ``keys`` with ``row``, in whichever commit carries it."""

    async def commit(self, *rows: StepRow, reviews: tuple[ReviewRequest, ...] = ()) -> Ack:
        """Write ``rows`` as one commit under the run's fencing token."""


async def make_try(run: TryRun, decision: Execute) -> StepRow | PushedBack | None:
    """Run the try ``decision`` names and record its row (deferred for a step: the run's
    next write carries it; at once for a compensation, or a row with review requests).

    Args:
        run: the run (the executor).
        decision: the try to make.

    Returns:
        The row; None when a heartbeat learned that a cancel was requested (the try
        stopped; nothing of it is committed; the run decides again); :class:`PushedBack`
        when the provider pushed the call back (nothing committed; the run parks).

    Raises:
        StaleFencingToken: another node took the instance over (nothing committed).
        asyncio.CancelledError: the run was cancelled (node shutdown).
    """
    step = run.plan.steps[decision.step]
    assert isinstance(step, CapabilityStep)
    is_step = decision.kind is StepKind.STEP
    capability = step.capability if is_step else step.compensation
    assert capability is not None
    opts = capability.options
    await run.flush()
    started = run.now()
    end = _window_end(decision, capability)
    if end is not None and started >= end:  # the run's writes took it past the window
        row = window_ended_row(
            run.instance_id,
            decision.step,
            decision.scope,
            capability.id,
            decision.try_number,
            end,
            started,
        )
        run.defer(row)
        run.record(row)
        return row
    checkpoint = (
        await _start_row(run, decision, started) if is_step and opts.heartbeat_timeout else None
    )
    ctx = ExecutionContext(
        run,
        bag=decision.bag,
        step_id=decision.step,
        scope=decision.scope,
        try_number=decision.try_number,
        recovery_error=decision.recovery,
        checkpoint=checkpoint,
        heartbeat_timeout=opts.heartbeat_timeout if is_step else None,
        kind=decision.kind,
    )
    run.heartbeat_written = None
    run.tries += 1
    called = await _call(run, capability, ctx, decision)
    if called is None or isinstance(called, PushedBack):
        if called is not None:
            run.tries -= 1  # not a try: the provider did not take the call
        return called
    result, error_type, detail = called
    now = run.now()
    run.host.observer.tried(
        capability.id,
        "success" if error_type is None else "failure",
        (now - started).total_seconds(),
    )
    if error_type is None:
        row = _succeeded(run, decision, ctx, result, started, now)
    else:
        next_at = (
            None
            if decision.last_try
            else next_try_at(
                opts.retry,
                decision.try_number,
                error_type,
                now,
                decision.retry_from or started,
                decision.execution_key,
            )
        )
        log.info(
            "instance %s: %s try %d failed: %s: %s",
            run.instance_id,
            capability.id,
            decision.try_number,
            error_type,
            detail,
        )
        row = failure_row(
            run.instance_id,
            decision.step,
            decision.scope,
            decision.kind,
            capability.id,
            decision.try_number,
            (error_type, detail),
            started,
            now,
            next_at,
        )
    if not is_step and row.final and not run.ephemeral:
        run.host.observer.compensation_failed(run.plan.name, capability.id)
    if decision.deferred is not None:  # the provider held it back: said on its row
        until, reason = decision.deferred
        row = replace(row, deferred_until=until, deferred_by=reason)
    keys = _correlations(run, ctx, row)
    if is_step and not ctx.reviews:
        run.defer(row, keys)  # the keys go with the row, in whichever write carries it
        run.record(row)
        return row
    run.keep_keys(row, keys)
    ack = await run.commit(row, reviews=tuple(ctx.reviews))
    run.record(row)
    run.after_ack(ack)
    return row


def _correlations(run: TryRun, ctx: ExecutionContext, row: StepRow) -> tuple[Correlation, ...]:
    """The correlation keys a successful try recorded (a failed try records none)."""
    if row.outcome is not Outcome.SUCCESS:
        return ()
    return tuple(Correlation(run.plan.name, p, k) for p, k in ctx.correlations)


def _window_end(decision: Execute, capability: Capability) -> datetime | None:
    """The retry window's end for a retry of a step (None: no window, or the first try,
    which the window is opened by)."""
    retry = capability.options.retry
    total = retry.total_duration if retry is not None else None
    if decision.kind is not StepKind.STEP or decision.try_number == 1 or total is None:
        return None
    return decision.retry_from + total if decision.retry_from is not None else None


async def _start_row(run: TryRun, decision: Execute, started: datetime) -> Any:
    """For a heartbeating step: record the try's start at ``started`` (its heartbeat
    timeout renews the lease) and release whoever waits for the run. Returns the last
    checkpoint."""
    step = run.plan.steps[decision.step]
    assert isinstance(step, CapabilityStep)
    hb_timeout = step.capability.options.heartbeat_timeout
    assert hb_timeout is not None
    runs = run.store.runs
    beat = await runs.last_heartbeat(run.instance_id, decision.step, decision.scope)
    mark = TryMark(decision.step, decision.scope, decision.try_number, started)
    ack: Ack = await runs.start_try(run.instance_id, run.token, mark, run.now() + hb_timeout)
    run.after_ack(ack)
    if run.detach is not None and not run.detach.done():
        run.detach.set_result(None)  # an in-process wait: the caller need not wait
    return beat.value if beat is not None else None


async def _call(
    run: TryRun, capability: Capability, ctx: ExecutionContext, decision: Execute
) -> tuple[Fail | Complete | None, str | None, str] | PushedBack | None:
    """Call the capability under its limits: ``(decision, error type, detail)``, the error
    type None when the call succeeded; None when a heartbeat learned of a cancel;
    :class:`PushedBack` for a provider's pushback (``ProviderPushback`` from any
    capability; a 429/503 status error from one that names its provider)."""
    LOG_CONTEXT.set(
        {
            "instance_id": run.instance_id,
            "flow": run.plan.name,
            "step": decision.step,
            "scope": decision.scope,
        }
    )
    host = run.host
    try:
        with host.observer.call_span(
            run.instance_id,
            run.plan.name,
            capability.id,
            decision.step,
            decision.scope,
            decision.try_number,
        ):
            result = await host.limits.call(capability, ctx, capability.options, run)
    except (asyncio.CancelledError, StaleFencingToken):
        raise  # cancelled, or the lease was lost: this try commits nothing
    except CapabilityTimeout as exc:
        return None, exc.kind, str(exc)
    except Exception as exc:  # noqa: BLE001 - any exception is a failed try
        if capability.provider is not None or isinstance(exc, ProviderPushback):
            pushed = pushback_of(exc, run.now())
            if pushed is not None:
                return PushedBack(*pushed)
        return None, type(exc).__name__, str(exc) or repr(exc)
    if result is CANCEL_LEARNED:  # a heartbeat learned of a cancel: the run unwinds
        return None
    return result, None, ""


def _succeeded(
    run: TryRun,
    decision: Execute,
    ctx: ExecutionContext,
    result: Any,
    started: datetime,
    now: datetime,
) -> StepRow:
    values = dict(ctx.puts)
    if isinstance(result, Fail):
        values[DECISION_KEY] = {
            "fail": {"code": result.code, "message": result.message, "details": result.details}
        }
    elif isinstance(result, Complete):
        values[DECISION_KEY] = {"complete": jsonable(result.result)}
    return StepRow(
        run.instance_id,
        decision.step,
        decision.scope,
        decision.kind,
        decision.capability_id,
        Outcome.SUCCESS,
        started,
        now,
        try_number=decision.try_number,
        values=values,
    )
