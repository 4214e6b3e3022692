"""What the decider answers: one frozen value naming the next thing a run does.

::

    RunDecision
     +-- Execute       run one try of a capability (a step, a poll's attempt, a compensation)
     +-- Record        commit a row no call made (a try lost with its step, a retry window
     |                 that ended before the next try could start)
     +-- Suspend       suspend until an instant (and/or a signal)
     +-- ReadMailbox   the mailbox is older than the journal: read it again
     +-- TakeSignal    a waiting signal ends the wait
     +-- RefuseSignal  a waiting signal does not belong to the wait (its match said no)
     +-- Emit          write an event to the outbox with its row
     +-- BeginEnding   the instance unwinds towards failed or cancelled (stored first)
     +-- Finish        write the final state

The executor (:mod:`flowpark.engine.execute.executor`) carries a decision out and asks again. Each
value
holds all the executor needs, computed from the journal: rows to store first (deadlines,
written before what they bound), the state bag a capability reads, the execution key.
Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flowpark.engine.records import InstanceState, SignalRecord, StepKind, StepRow, WakeKind
from flowpark.errors import FlowFailure
from flowpark.flows.capability import RecoveryError

__all__ = [
    "BeginEnding",
    "Emit",
    "Execute",
    "Finish",
    "MailboxView",
    "Note",
    "ReadMailbox",
    "Record",
    "RefuseSignal",
    "RunDecision",
    "Suspend",
    "TakeSignal",
]


@dataclass(frozen=True)
class Note:
    """Something the decision's walk saw happen now, for the observer (metrics).

    Attributes:
        poll: the poll step it is about.
        how: with ``attempt`` None, how the poll's wait ended: ``satisfied``, ``timed_out``
            or ``signalled`` (:class:`flowpark.engine.observe.PollEnd`); with ``attempt``, the
            verdict on that attempt this run made: ``satisfied``, ``unsatisfied`` or
            ``failed``.
        used: the share of the poll's budget spent when its wait ended (0.0 at entry, 1.0
            at its end).
        attempt: the attempt (scope) a verdict is about.
    """

    poll: int
    how: str
    used: float = 0.0
    attempt: int | None = None


@dataclass(frozen=True)
class MailboxView:
    """The untaken signals a run knows, and how current they are.

    Attributes:
        signals: untaken signals in arrival order.
        read_at: how many journal rows the run knew when it read them (None: not read in
            this run). Rows committed after that at a step other than a wait's own make
            the mailbox stale for that wait (a signal may have come meanwhile).
    """

    signals: tuple[SignalRecord, ...] = ()
    read_at: int | None = None


@dataclass(frozen=True)
class Execute:
    """Run one try of the capability at (step, scope).

    Attributes:
        step: the capability step (for a compensation: the step it undoes).
        scope: the attempt inside a poll; 0 elsewhere.
        kind: ``step`` or ``compensation``.
        capability_id: the capability to call.
        try_number: the try (1-based) under the capability's retry policy.
        execution_key: the provider idempotency key (the same on every re-execution).
        bag: the state bag the try reads (``{bag_key: json}``).
        store_first: deadline rows to commit before the call starts (a poll's budget on
            entry, the retry window before the first try).
        retry_from: when the tries of this execution began (``total_duration`` counts
            from it); None before the first.
        budget_ends_at: the poll budget's end, for a poll's attempt.
        recovery: the error of the failed step whose failure route this is.
        late_by: how late the wake this try runs at is (a parked wait's lateness).
        deferred: the try's provider deferred it: ``(the last deferral's wake, "budget"
            or "pushback")``, recorded on its row; None when it was not.
        poll: the poll step this try is an attempt of.
        last_try: an operator's retry of a compensation that failed for good: one try,
            whose failure is final (the retry policy's tries were spent).
    """

    step: int
    scope: int
    kind: StepKind
    capability_id: str
    try_number: int
    execution_key: str
    bag: Mapping[str, Any]
    store_first: tuple[StepRow, ...] = ()
    retry_from: datetime | None = None
    budget_ends_at: datetime | None = None
    recovery: RecoveryError | None = None
    late_by: timedelta | None = None
    deferred: tuple[datetime, str] | None = None
    poll: int | None = None
    notes: tuple[Note, ...] = ()
    last_try: bool = False


@dataclass(frozen=True)
class Record:
    """Commit ``row``, a try no call made: lost with its step (``heartbeat_timeout``), or
    refused because its retry window ended. ``clears_try``: the try-in-flight marker the
    claim found is cleared by it."""

    row: StepRow
    clears_try: bool = False
    store_first: tuple[StepRow, ...] = ()
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Suspend:
    """Suspend at (step, scope) until ``wake_at`` (None: only a signal or a cancel wakes
    it), waiting for ``kind``.

    Attributes:
        accept_signal: a signal that ends the wait; the store refuses the park while one
            waits untaken (the executor reads the mailbox and asks again).
        unwinding: a compensation's next try: parks whatever the instance unwinds for.
        store_first: a deadline row to write with the park (an ``await_signal`` timeout).
        woken: keep the operator's wake the run was claimed for (a deferral of the woken
            try: the next claim runs it, whatever its schedule says).
    """

    wake_at: datetime | None
    step: int
    scope: int
    kind: WakeKind
    accept_signal: str | None = None
    unwinding: bool = False
    store_first: tuple[StepRow, ...] = ()
    notes: tuple[Note, ...] = ()
    woken: bool = False


@dataclass(frozen=True)
class ReadMailbox:
    """Read the untaken signals again before deciding the wait at ``step``."""

    step: int
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class TakeSignal:
    """Take ``signal`` at ``step``: ``row`` (kind ``signal``) and the mark, in one write."""

    signal: SignalRecord
    step: int
    row: StepRow
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class RefuseSignal:
    """Mark ``signal`` refused by the wait at ``step``: its match does not hold."""

    signal: SignalRecord
    step: int
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Emit:
    """Write the event ``name`` with ``payload`` to the outbox, with the emit step's row."""

    step: int
    name: str
    payload: dict[str, Any]
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class BeginEnding:
    """Store that the instance unwinds towards ``ending`` (failed or cancelled)."""

    ending: InstanceState
    failure: FlowFailure | None
    notes: tuple[Note, ...] = ()


@dataclass(frozen=True)
class Finish:
    """Write the final ``state`` (with its ``result`` or ``failure``)."""

    state: InstanceState
    result: Any = None
    failure: FlowFailure | None = None
    notes: tuple[Note, ...] = field(default=())


RunDecision = (
    Execute
    | Record
    | Suspend
    | ReadMailbox
    | TakeSignal
    | RefuseSignal
    | Emit
    | BeginEnding
    | Finish
)
"""One of the decisions above."""
