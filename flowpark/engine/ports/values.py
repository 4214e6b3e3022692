"""The values a run hands its store in one call: a decision's outcome to commit
(:class:`Commit`, with its :class:`Park`), a try marked in flight (:class:`TryMark`), a
signal to store (:class:`NewSignal`) and the claim a delivery may make (:class:`WakeClaim`),
a stream message (:class:`StreamWrite`).

Frozen, no behaviour; every instant is aware UTC from the engine clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowpark.engine.records import EmittedEvent, ReviewRequest, StepRow, WakeKind

__all__ = [
    "Commit",
    "Correlation",
    "NewSignal",
    "Park",
    "Reopen",
    "StreamWrite",
    "TryMark",
    "WakeClaim",
]


@dataclass(frozen=True)
class Reopen:
    """Claim an ended instance to retry its compensations that failed for good.

    Attributes:
        instance_id: the instance (ended ``failed`` or ``cancelled``, marked
            ``compensation_failed``).
        owner: the claiming node.
        now: the engine-clock instant (aware UTC).
        lease_until: the lease's end (aware UTC).
        rows: the operator's retry rows (kind ``retry``), written with the claim.
    """

    instance_id: str
    owner: str
    now: datetime
    lease_until: datetime
    rows: tuple[StepRow, ...]


@dataclass(frozen=True)
class Park:
    """Suspend the instance after a commit: what wakes it and where it resumes.

    Attributes:
        wake_at: when the sweep resumes it (aware UTC); None: only a signal or a cancel
            wakes it.
        step_id / scope: the node and scope it resumes at.
        owner: the committing node: it keeps the lease when the park is refused.
        kind: what it waits for (shown and filtered by the operator's list).
        accept_signal: the signal the parked step waits for; when one waits untaken in
            the mailbox the park is refused (``Ack.signal_pending``) and the run takes it.
        unwinding: a compensation's next try: parks even when a cancel was requested.
        woken: the park keeps an operator's wake (``flow_instance.woken``): the try it
            defers is the one an operator asked for, so the claim that finds it due runs
            it whatever its schedule says; False (every other park) clears the mark.
    """

    wake_at: datetime | None
    step_id: int
    scope: int
    owner: str
    kind: WakeKind | None = None
    accept_signal: str | None = None
    unwinding: bool = False
    woken: bool = False


@dataclass(frozen=True)
class Correlation:
    """A correlation key a step recorded: the id ``provider`` minted for what it started.

    Attributes:
        flow_name: the instance's flow (keys are unique per flow and provider).
        provider: the provider's name.
        key: the provider's id.
    """

    flow_name: str
    provider: str
    key: str


@dataclass(frozen=True)
class Commit:
    """One decision's outcome, written in one transaction behind the fence.

    Attributes:
        instance_id: the instance.
        token: the fencing token of the caller's claim; a stale one writes nothing
            (``StaleFencingToken``).
        at: the engine-clock instant of the commit (aware UTC): the park's ``updated_at``.
        lease_until: the lease a heartbeating try's commit renews to (aware UTC); a
            refused park leaves the instance leased until then.
        rows: journal rows appended in this order (each ``instance_id`` is the commit's).
        events: outbox events written with the last row (an emit).
        reviews: review items written with the last row.
        take_signal: the id of the mailbox signal the last row (kind ``signal``) takes.
        park: suspend the instance after the rows, or None to keep it running.
        correlations: correlation keys the instance holds from this commit on (written
            with the rows; one the instance holds already is kept as it is); a key another
            live instance of the flow holds refuses the whole commit
            (``CorrelationKeyInUse``, nothing written).

    The :class:`~flowpark.engine.records.Ack` answered is the park's (``applied=False`` with
    ``cancel_requested`` or ``signal_pending`` when it was refused; the rows are written
    in every case) and ``Ack(applied=True)`` without a park.
    """

    instance_id: str
    token: int
    at: datetime
    lease_until: datetime
    rows: tuple[StepRow, ...] = ()
    events: tuple[EmittedEvent, ...] = ()
    reviews: tuple[ReviewRequest, ...] = ()
    take_signal: str | None = None
    park: Park | None = None
    correlations: tuple[Correlation, ...] = ()

    def __post_init__(self) -> None:
        for row in self.rows:
            if row.instance_id != self.instance_id:
                raise ValueError(
                    f"a commit of instance {self.instance_id!r} carries a row of "
                    f"{row.instance_id!r}"
                )
        if (
            self.events or self.reviews or self.correlations or self.take_signal is not None
        ) and not self.rows:
            raise ValueError(
                "events, reviews, correlation keys and a taken signal go with a journal row"
            )


@dataclass(frozen=True)
class TryMark:
    """A heartbeating try marked in flight (``try_*`` columns of the instance).

    Attributes:
        step_id / scope / try_number: the execution and its try.
        started_at: when the try started (aware UTC).
    """

    step_id: int
    scope: int
    try_number: int
    started_at: datetime


@dataclass(frozen=True)
class NewSignal:
    """A signal to store in an instance's mailbox.

    Attributes:
        instance_id: the instance it is delivered to.
        name: the signal's name.
        payload: its JSON payload.
        idempotency_key: a repeat of it returns the first signal and stores nothing.
        received_at: the engine-clock instant of the delivery (aware UTC).
        signal_id: the new signal's id.
    """

    instance_id: str
    name: str
    payload: Mapping[str, Any]
    idempotency_key: str | None
    received_at: datetime
    signal_id: str


@dataclass(frozen=True)
class WakeClaim:
    """The claim a delivery makes when the instance is parked on a wait that accepts it.

    Attributes:
        owner: the delivering node.
        lease_until: the lease's expiry (aware UTC).
        wake_steps: the nodes whose waits accept the signal.
    """

    owner: str
    lease_until: datetime
    wake_steps: tuple[int, ...]


@dataclass(frozen=True)
class StreamWrite:
    """A progress message to append to a stream of an instance.

    Attributes:
        instance_id / stream: where it goes.
        payload: the JSON message.
        size: its encoded size in bytes (counted against the stream's bound).
        at: the engine-clock instant (aware UTC).
    """

    instance_id: str
    stream: str
    payload: Any
    size: int
    at: datetime
