"""Deadlines: every wait's end as an absolute UTC instant, stored before what it bounds.

A deadline is a journal row of kind ``deadline`` (:class:`~flowpark.engine.records.StepKind`):

=====================  ====================  =================================================
``capability_id``      ``(step_id, scope)``  bounds
=====================  ====================  =================================================
``poll.budget``        (poll step, 0)        a poll's attempts: entry instant + ``timeout``
``signal.timeout``     (await step, 0)       an ``await_signal``: arrival + ``timeout``
``retry.total``        (step, scope)         the tries of one execution: first try's start
                                             + the retry policy's ``total_duration``
=====================  ====================  =================================================

``started_at`` is the engine-clock instant the wait began and ``values["endsAt"]`` its end
(ISO 8601, UTC); a wait that warns before its end (``warn_before``) stores the warning's
instant beside it, ``values["warnAt"]``, in the same row. The warning, once reached, is an
``emit`` row at the wait's step named :data:`BUDGET_WARNING` with its outbox event. The
row is written (with any row the run deferred) before the first call the deadline bounds
starts, so a crash, a retry, a restart or another node reads the same end back from the
journal: nothing moves it. An explicit extension appends a row at the same
``(step_id, scope)`` with the next ``try_number`` and a later ``endsAt`` (the same
``started_at``; a ``warnAt`` moved by as much); the row with the highest ``try_number`` is
in force.

A heartbeating try's ``execute_timeout`` ends at the try's start instant, which
``start_try`` stores (``try_started_at``) before the call, plus the timeout. The
flow deadline is ``flow_instance.deadline_at``, written with the instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flowpark.engine.records import InstanceState, Outcome, StepKind, StepRow

__all__ = [
    "BUDGET_WARNING",
    "POLL_BUDGET",
    "RETRY_TOTAL",
    "SIGNAL_TIMEOUT",
    "Budget",
    "deadline_row",
    "ends_at",
    "open_budget",
    "warns_at",
]

#: A poll's budget (entry instant + ``timeout``).
POLL_BUDGET = "poll.budget"
#: An ``await_signal`` timeout (arrival instant + ``timeout``).
SIGNAL_TIMEOUT = "signal.timeout"
#: The retry window of one execution (first try's start + ``total_duration``).
RETRY_TOTAL = "retry.total"

#: The event (and ``emit`` row) of a wait's warning before its end.
BUDGET_WARNING = "budget.warning"

_KEY = "endsAt"
_WARN_KEY = "warnAt"


def deadline_row(
    instance_id: str,
    step_id: int,
    scope: int,
    name: str,
    started_at: datetime,
    ends: datetime,
    *,
    committed_at: datetime | None = None,
    try_number: int = 1,
    warn_at: datetime | None = None,
) -> StepRow:
    """The journal row that stores a deadline.

    Args:
        instance_id: the instance.
        step_id: the step the deadline bounds (the poll, the await, the step).
        scope: the attempt (a poll body's execution) or 0.
        name: :data:`POLL_BUDGET`, :data:`SIGNAL_TIMEOUT` or :data:`RETRY_TOTAL`.
        started_at: when the wait began (aware UTC, engine clock).
        ends: the end instant (aware UTC).
        committed_at: the write's instant (default ``started_at``).
        try_number: 1 for the first; an extension takes the next number.
        warn_at: the instant of the wait's warning before its end, or None.

    Returns:
        A :class:`StepRow` of kind ``deadline``.
    """
    return StepRow(
        instance_id,
        step_id,
        scope,
        StepKind.DEADLINE,
        name,
        Outcome.SUCCESS,
        started_at,
        committed_at or started_at,
        try_number=try_number,
        values={_KEY: ends.isoformat()}
        | ({} if warn_at is None else {_WARN_KEY: warn_at.isoformat()}),
    )


def ends_at(row: StepRow) -> datetime:
    """The end instant a deadline row stores (aware UTC).

    Raises:
        KeyError: ``row`` is not a deadline row.
    """
    return datetime.fromisoformat(row.values[_KEY])


def warns_at(row: StepRow) -> datetime | None:
    """The warning instant a deadline row stores (aware UTC), or None when it has none."""
    value = row.values.get(_WARN_KEY)
    return datetime.fromisoformat(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class Budget:
    """A running wait's bound, as the instance view shows it (``budget``).

    Attributes:
        name: which bound (:data:`POLL_BUDGET`, :data:`SIGNAL_TIMEOUT`, :data:`RETRY_TOTAL`).
        step_id: the step it bounds; scope: the attempt or 0.
        started_at: when the wait began; ends_at: its end (aware UTC).
        extensions: how many times it was extended (0 for none).
        warn_at: the instant of its warning before the end (None: it has none).
        warned: whether that warning was given.
    """

    name: str
    step_id: int
    scope: int
    started_at: datetime
    ends_at: datetime
    extensions: int = 0
    warn_at: datetime | None = None
    warned: bool = False

    def used_ratio(self, now: datetime) -> float:
        """The share of the budget spent at ``now`` (0.0 at the start, 1.0 at the end; more
        once past it)."""
        span = (self.ends_at - self.started_at).total_seconds()
        if span <= 0:
            return 1.0
        return max(0.0, (now - self.started_at).total_seconds() / span)


def open_budget(state: InstanceState, steps: list[StepRow]) -> Budget | None:
    """The bound of the wait an instance is in now, from its journal, or None.

    The wait is the one the latest deadline row belongs to (a poll's budget rather than
    the retry window of its body's attempt). It is open while the instance has not ended
    and no row outside it (another step than the poll and its body, the await, the step)
    was committed after its first deadline row, no signal ended it, and (for a retry
    window) no try of its execution succeeded or failed for good.

    Args:
        state: the instance's state.
        steps: its journal rows in commit order.
    """
    if state.ended:
        return None
    groups: dict[tuple[int, int], list[tuple[int, StepRow]]] = {}
    for index, row in enumerate(steps):
        if row.kind is StepKind.DEADLINE:
            groups.setdefault((row.step_id, row.scope), []).append((index, row))
    if not groups:
        return None
    key = max(groups, key=lambda k: groups[k][0][0])
    first_index, first = groups[key][0]
    if first.capability_id == RETRY_TOTAL:
        poll = (first.step_id - 1, 0)
        if poll in groups and groups[poll][0][1].capability_id == POLL_BUDGET:
            key = poll
            first_index, first = groups[key][0]
    last = groups[key][-1][1]
    poll_wait = first.capability_id == POLL_BUDGET
    region = {first.step_id, first.step_id + 1} if poll_wait else {first.step_id}
    for row in steps[first_index + 1 :]:
        if row.step_id not in region:
            return None
        if row.kind is StepKind.SIGNAL:
            return None  # a signal ended the wait
        if (
            first.capability_id == RETRY_TOTAL
            and row.kind is StepKind.STEP
            and row.scope == first.scope
            and (row.outcome is Outcome.SUCCESS or row.final)
        ):
            return None
    return Budget(
        first.capability_id,
        first.step_id,
        first.scope,
        first.started_at,
        ends_at(last),
        extensions=last.try_number - 1,
        warn_at=warns_at(last),
        warned=any(
            r.kind is StepKind.EMIT
            and r.step_id == first.step_id
            and r.capability_id == BUDGET_WARNING
            for r in steps[first_index + 1 :]
        ),
    )
