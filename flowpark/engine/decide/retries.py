"""Retry arithmetic over journal rows: when a failed try's next try is due, when the tries
of one execution began, and the failure row of a try (pure functions, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flowpark.engine.decide.deadlines import ends_at
from flowpark.engine.records import Outcome, StepKind, StepRow
from flowpark.flows.durations import RetryPolicy

__all__ = ["failure_row", "next_try_at", "retry_start", "window_ended_row"]


def next_try_at(
    policy: RetryPolicy | None,
    try_number: int,
    error_type: str,
    now: datetime,
    first: datetime,
    seed: str = "",
) -> datetime | None:
    """The retry policy's answer after failed try ``try_number``.

    Args:
        policy: the capability's retry policy (None: no retry).
        try_number: the failed try (1-based).
        error_type: what failed it.
        now: when it failed (aware UTC).
        first: when the tries began (``total_duration`` counts from it).
        seed: the execution's key: the policy's jitter is drawn from it and the try.

    Returns:
        When the next try is due, or None when the policy allows no other.
    """
    if policy is None:
        return None
    delay = policy.jittered_delay_after(try_number, seed)
    if policy.allows_another(try_number, error_type, (now + delay) - first):
        return now + delay
    return None


def retry_start(
    policy: RetryPolicy | None,
    kind: StepKind,
    window: StepRow | None,
    previous: Sequence[StepRow],
) -> datetime | None:
    """When the tries of one execution began, for the retry policy's ``total_duration``.

    Args:
        policy: the step capability's retry policy.
        kind: ``step`` or ``compensation``.
        window: the stored retry window (deadline row) of the execution, if any.
        previous: the earlier tries' rows, in order.

    Returns:
        The stored retry window's start (its end, extended or not, less the policy's
        span), else (a journal written before windows were stored) the first try's
        start; None before the first try.
    """
    total = policy.total_duration if policy is not None else None
    if kind is StepKind.STEP and total is not None and window is not None:
        return ends_at(window) - total
    return previous[0].started_at if previous else None


def failure_row(
    instance_id: str,
    step: int,
    scope: int,
    kind: StepKind,
    capability_id: str,
    try_number: int,
    error: tuple[str, str],
    started: datetime,
    now: datetime,
    next_at: datetime | None,
) -> StepRow:
    """The failure row of a try: final unless ``next_at`` says when the next try is due.

    Args:
        instance_id: the instance.
        step: the capability step.
        scope: the scope.
        kind: ``step`` or ``compensation``.
        capability_id: the capability tried.
        try_number: the try (1-based).
        error: ``(error type, detail)``: an exception's type name or ``execute_timeout``,
            and its text (cut to 2000 characters).
        started: when the try started (aware UTC).
        now: when it ended (aware UTC).
        next_at: the next try's instant; None: the failure is final.

    Returns:
        The row, not yet committed.
    """
    return StepRow(
        instance_id,
        step,
        scope,
        kind,
        capability_id,
        Outcome.FAILURE,
        started,
        now,
        try_number=try_number,
        error_type=error[0],
        error_detail=error[1][:2000],
        final=next_at is None,
        next_try_at=next_at,
    )


def window_ended_row(
    instance_id: str,
    step: int,
    scope: int,
    capability_id: str,
    try_number: int,
    end: datetime,
    now: datetime,
) -> StepRow:
    """The final failure row of a try that does not start: the retry window ended.

    Args:
        instance_id: the instance.
        step: the capability step.
        scope: the scope.
        capability_id: the capability not called.
        try_number: the try (1-based) that does not start.
        end: the retry window's end (aware UTC).
        now: when the try would have started, at or past ``end`` (aware UTC).

    Returns:
        The row (error type ``retry_window_ended``), not yet committed.
    """
    detail = f"the retry window ended at {end.isoformat()}; no try started"
    return failure_row(
        instance_id,
        step,
        scope,
        StepKind.STEP,
        capability_id,
        try_number,
        ("retry_window_ended", detail),
        now,
        now,
        None,
    )
