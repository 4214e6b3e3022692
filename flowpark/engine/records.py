"""The records the engine and the store exchange: frozen values, no behaviour.

The storage ports, one per use, are in :mod:`flowpark.engine.ports` (implemented by
:class:`flowpark.store.SqlStore`). Every instant is aware UTC from the engine's clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from typing import Any

from flowpark.errors import FlowFailure

__all__ = [
    "COMPENSATION_FAILURES",
    "Ack",
    "CancelAck",
    "Claim",
    "Delivery",
    "EmittedEvent",
    "Heartbeat",
    "InstanceRecord",
    "InstanceState",
    "NewInstance",
    "Outcome",
    "ReviewRequest",
    "SignalRecord",
    "Snapshot",
    "StepKind",
    "StepRow",
    "StreamMessage",
    "WakeKind",
]


#: The key of an ended instance's failure details that lists its compensations that failed
#: for good (absent when none did): ``[{"capability_id", "step_id", "scope", "undoes",
#: "error_type", "detail", "tries"}]``. The store marks such an instance
#: (``compensation_failed``) from it.
COMPENSATION_FAILURES = "compensation_failures"


class InstanceState(StrEnum):
    """An instance's state: running, suspended (parked), or ended (completed, failed, cancelled)."""

    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def ended(self) -> bool:
        """Whether the state is final (completed, failed or cancelled)."""
        return self in (InstanceState.COMPLETED, InstanceState.FAILED, InstanceState.CANCELLED)


class WakeKind(StrEnum):
    """What a suspended instance waits for (stored with the park as ``wake_kind``)."""

    POLL = "poll"  # the next attempt of a parked poll
    RETRY = "retry"  # the next try of a failed capability, under its retry policy
    SIGNAL = "signal"  # a signal (an await_signal step, with or without a timeout)
    DEADLINE = "deadline"  # the flow deadline, which comes before any other wake
    PROVIDER_BUDGET = "provider_budget"  # a try deferred: its provider had no budget
    PROVIDER_PUSHBACK = "provider_pushback"  # a try its provider pushed back (429/503)


class StepKind(StrEnum):
    """What a journal row records."""

    STEP = "step"  # a capability execution (one try of one attempt)
    SIGNAL = "signal"  # a signal taken by a wait step
    COMPENSATION = "compensation"  # a compensation run while unwinding
    EMIT = "emit"  # an event written to the outbox by an emit step
    DEADLINE = "deadline"  # a wait's end instant, written before the first call it bounds
    RETRY = "retry"  # an operator's retry of a compensation that failed for good


class Outcome(StrEnum):
    """How a journal row ended: success or failure."""

    SUCCESS = "success"
    FAILURE = "failure"


@dataclass(frozen=True)
class StepRow:
    """One journal row (``flow_step``).

    Attributes:
        instance_id: the instance (uuid7 string).
        step_id: index of the plan step the row belongs to.
        scope: attempt number inside a poll; 0 elsewhere.
        kind: see :class:`StepKind`.
        capability_id: capability id, signal name or event name.
        outcome: success or failure.
        try_number: 1-based try of this (step, scope) under the capability's retry policy.
        values: state-bag values the row put, ``{bag_key: json}``.
        error_type: failure only: the error's type (``HTTPStatusError``, ``execute_timeout``).
        error_detail: failure only: the error's text.
        final: failure only: True when no retry follows.
        next_try_at: failure only and not final: when the next try is due (aware UTC).
        started_at: engine-clock instant the execution started (aware UTC).
        committed_at: engine-clock instant the row was written (aware UTC).
        sequence: store-assigned order of commits (None before commit).
        deferred_until: the try was deferred by its provider first (parked, not a try):
            the wake of the last deferral, when the provider let it run (aware UTC).
        deferred_by: why: ``budget`` (the provider's limit) or ``pushback``.
    """

    instance_id: str
    step_id: int
    scope: int
    kind: StepKind
    capability_id: str
    outcome: Outcome
    started_at: datetime
    committed_at: datetime
    try_number: int = 1
    values: dict[str, Any] = field(default_factory=dict)
    error_type: str | None = None
    error_detail: str | None = None
    final: bool = False
    next_try_at: datetime | None = None
    sequence: int | None = None
    deferred_until: datetime | None = None
    deferred_by: str | None = None


@dataclass(frozen=True)
class InstanceRecord:
    """One ``flow_instance`` row, as the engine sees it. All ``*_at`` are aware UTC."""

    id: str
    flow_name: str
    flow_version: str
    state: InstanceState
    input: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    deadline_at: datetime | None = None
    wake_at: datetime | None = None
    wake_step_id: int | None = None
    wake_scope: int | None = None
    wake_kind: WakeKind | None = None
    lease_owner: str | None = None
    lease_expires_at: datetime | None = None
    fencing_token: int = 0
    ending: InstanceState | None = None  # FAILED or CANCELLED while compensations unwind
    cancel_requested: bool = False
    result: Any = None
    failure: FlowFailure | None = None
    instance_key: str | None = None
    # the try in flight (heartbeating capabilities); None when no try runs
    try_step_id: int | None = None
    try_scope: int | None = None
    try_number: int | None = None
    try_started_at: datetime | None = None
    heartbeat_at: datetime | None = None
    heartbeat_value: Any = None
    # the W3C trace context of the start (``traceparent``/``tracestate``), when traced
    trace_context: dict[str, str] | None = None
    # an operator woke it (a bulk wake, or a wake whose try was deferred): the next claim
    # that finds it parked runs the wait it is parked on now, whatever its schedule says;
    # the park that ends the woken try clears it, a deferral of that try keeps it
    woken: bool = False

    def evolve(self, **changes: Any) -> InstanceRecord:
        """A copy with ``changes``: what :func:`dataclasses.replace` makes, without its walk
        over the 27 fields and the frozen ``__init__``'s setattr of each (a sixth of its
        cost; a run copies its record several times, ~8 % of a resume's CPU went there).

        Raises:
            TypeError: a name in ``changes`` is not a field.
        """
        unknown = changes.keys() - _INSTANCE_FIELDS
        if unknown:
            raise TypeError(f"InstanceRecord has no field {', '.join(sorted(unknown))}")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy.__dict__.update(changes)
        return copy


_INSTANCE_FIELDS = frozenset(f.name for f in fields(InstanceRecord))


@dataclass(frozen=True)
class SignalRecord:
    """A delivered signal (``flow_signal``); ``sequence`` orders arrivals."""

    id: str
    sequence: int
    instance_id: str
    name: str
    payload: dict[str, Any]
    received_at: datetime
    idempotency_key: str | None = None
    taken_at: datetime | None = None
    taken_step_id: int | None = None
    # False when the wait at ``taken_step_id`` refused it (its ``match`` did not hold)
    matched: bool | None = None
    # set when the instance ended while the signal waited untaken: it will never be taken;
    # the reason is ``instance_completed``, ``instance_failed`` or ``instance_cancelled``
    discarded_at: datetime | None = None
    discarded_reason: str | None = None

    @property
    def outcome(self) -> bool | None:
        """True when taken, False when a wait refused it, None while it waits."""
        if self.matched is False:
            return False
        return True if self.taken_at is not None else None


@dataclass(frozen=True)
class Heartbeat:
    """The checkpoint a previous try of (step, scope) recorded."""

    step_id: int
    scope: int
    try_number: int
    value: Any
    recorded_at: datetime


@dataclass(frozen=True)
class Snapshot:
    """Everything the engine needs to advance an instance, read in one go.

    Attributes:
        instance: the instance row.
        steps: journal rows in commit order.
        signals: untaken signals in arrival order.
    """

    instance: InstanceRecord
    steps: list[StepRow]
    signals: list[SignalRecord]


@dataclass(frozen=True)
class NewInstance:
    """What a start writes: the instance row, plus its idempotency and instance keys.

    Attributes:
        id: the new instance's id, a canonical UUID string (lowercase, dashed).
        input: the validated input, JSON-able (as the flow's input model dumps it in JSON
            mode).
        idempotency_key: a repeat of the key (same flow) is the same start when
            :meth:`repeats` holds for what the first start stored, else it raises
            :class:`flowpark.errors.IdempotencyKeyReused`.
        lease_owner / lease_expires_at: the starting node holds the lease from birth, so the
            sweep never races the start.
        steps: journal rows written in the same statement as the instance (the budget of a
            poll that is the flow's first node: its poll is entered at the start's instant),
            so no write of their own precedes the first call.
    """

    id: str
    flow_name: str
    flow_version: str
    input: dict[str, Any]
    created_at: datetime
    deadline_at: datetime | None
    lease_owner: str
    lease_expires_at: datetime
    idempotency_key: str | None = None
    instance_key: str | None = None
    trace_context: dict[str, str] | None = None
    steps: tuple[StepRow, ...] = ()

    def repeats(self, input: Any, instance_key: str | None) -> bool:
        """Whether a start stored with ``input`` and ``instance_key`` is this request again.

        The request is the input and the instance key (what a start's body holds): the
        inputs are compared as canonical JSON (sorted keys, no whitespace), so key order
        does not matter while ``1`` and ``true`` differ.

        Args:
            input: the stored instance's input (as read back from its row).
            instance_key: the stored instance's instance key, or None.

        Returns:
            True when both are the same as this start's.
        """
        return instance_key == self.instance_key and _canonical(input) == _canonical(self.input)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Claim:
    """A claim's result: the instance now leased to the caller, with its fencing token.

    Attributes:
        snapshot: the instance as claimed, with its journal and untaken signals, when the
            store read them with the claim (then the engine does not load them again);
            None: the engine loads them.
        woken: an operator's wake (:meth:`flowpark.engine.Engine.wake_now`): the wait the claim
            found (a poll's next attempt, a retry's next try) is due now.
        taken_over: the instance was running under another node's expired lease (a lease
            takeover), when the store knows it.
    """

    instance_id: str
    fencing_token: int
    snapshot: Snapshot | None = field(default=None, compare=False, repr=False)
    woken: bool = field(default=False, compare=False)
    taken_over: bool = field(default=False, compare=False)


@dataclass(frozen=True)
class Delivery:
    """A signal delivery's answer (:meth:`Mailbox.deliver_and_claim`).

    Attributes:
        signal: the stored signal; for a repeat of its idempotency key, the first signal as
            the store holds it now (``taken_at`` set once an instance took it).
        created: False for a repeat (nothing stored).
        state: the instance's state as the delivery found it (before its own claim).
        claim: set when the delivery also claimed the instance (it was suspended on a wait
            that accepts the signal): the caller advances it. Its snapshot, when the store
            reads one with the claim, already holds the new signal in the mailbox.
    """

    signal: SignalRecord
    created: bool
    state: InstanceState
    claim: Claim | None = None


@dataclass(frozen=True)
class Ack:
    """A write's answer.

    Attributes:
        applied: False when the write was not applied because a cancel was requested
            (the engine then unwinds instead).
        cancel_requested: the instance's cancel flag as read in the same transaction.
    """

    applied: bool = True
    cancel_requested: bool = False
    signal_pending: bool = False


@dataclass(frozen=True)
class CancelAck:
    """A cancel request's answer.

    Attributes:
        claim: set when the caller claimed the instance and must run the unwind itself.
        state: the instance's state after the request.
    """

    state: InstanceState
    claim: Claim | None = None


@dataclass(frozen=True)
class EmittedEvent:
    """A domain event for the outbox, written with the emit step's journal row."""

    id: str
    name: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class ReviewRequest:
    """An item for the human review queue, written with the step row that asked for it."""

    id: str
    subject: str
    reason: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamMessage:
    """One stream message (``flow_stream``); ``sequence`` orders messages and is the
    cursor a reader resumes after (the SSE event id)."""

    sequence: int
    instance_id: str
    stream: str
    payload: Any
    created_at: datetime
