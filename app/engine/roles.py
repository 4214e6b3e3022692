"""The engine's narrow view of storage, split by the roles it serves.

:class:`Journal` composes five roles, each a protocol of its own: :class:`Claims` (claims
and leases), :class:`JournalWrites` (the lease holder's fenced journal), :class:`Mailbox`
(signals), :class:`Streams` (progress messages) and :class:`ReadModel` (what the HTTP API
and operator views read). A component that needs one role is given that role only.

The one implementation is SQL (:class:`app.store.SqlJournal`); the engine imports nothing
from SQLAlchemy. Every instant passed in comes from the engine's clock (aware UTC). Each
call is one transaction. The records exchanged are in :mod:`app.engine.journal`.

Fencing: every write for an instance carries the fencing token its claim returned; a write
whose token is not the instance's current one raises :class:`app.errors.StaleFencingToken`
and writes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from app.engine.journal import (
    Ack,
    CancelAck,
    Claim,
    Delivery,
    EmittedEvent,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    NewInstance,
    ReviewRequest,
    SignalRecord,
    Snapshot,
    StepRow,
    StreamMessage,
    WakeKind,
)
from app.errors import FlowFailure

__all__ = ["Claims", "Journal", "JournalWrites", "Mailbox", "ReadModel", "Streams"]


class Claims(Protocol):
    """Claims and leases: who advances an instance, and until when."""

    async def claim(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> Claim | None:
        """Lease one instance if it is suspended (whatever its wake_at) or running with an
        expired lease; None otherwise. Sets owner, expiry, state=running, token+1."""
        ...

    async def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        runnable: list[tuple[str, str]],
    ) -> list[Claim]:
        """Atomically lease up to ``limit`` instances that are suspended with
        ``wake_at <= now`` or running with ``lease_expires_at < now``, oldest wake first,
        whose ``(flow_name, flow_version)`` is in ``runnable``."""
        ...

    async def count_not_runnable(self, now: datetime, runnable: list[tuple[str, str]]) -> int:
        """Count due instances whose flow version is not in ``runnable``."""
        ...

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        """Extend the lease. Raises StaleFencingToken."""
        ...

    async def release(self, instance_id: str, token: int, now: datetime) -> None:
        """Give up the lease without changing the wake (state back to suspended)."""
        ...

    async def request_cancel(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> CancelAck:
        """Set the cancel flag; claim the instance when nobody holds a live lease.

        Raises:
            InstanceNotFound, InstanceEnded.
        """
        ...


class JournalWrites(Protocol):
    """The lease holder's journal: starts, the journal read back for a resume, fenced
    commits, parks and endings, and a heartbeating try's checkpoints."""

    async def create_instance(self, new: NewInstance) -> tuple[InstanceRecord, bool]:
        """Insert a running, leased instance; or return the one the idempotency key made.

        Returns:
            ``(record, created)``; ``created`` is False for an idempotent repeat.

        Raises:
            IdempotencyKeyReused: same flow and idempotency key, another request (input or
                instance key: see :meth:`NewInstance.repeats`).
            InstanceKeyInUse: a non-ended instance of the flow holds ``instance_key``.
        """
        ...

    async def load(self, instance_id: str) -> Snapshot:
        """Read the instance, its journal and its untaken signals.

        Raises:
            InstanceNotFound: no such instance.
        """
        ...

    async def commit_step(
        self,
        token: int,
        row: StepRow,
        lease_until: datetime,
        events: list[EmittedEvent] | None = None,
        reviews: list[ReviewRequest] | None = None,
        *,
        deferred: StepRow | None = None,
    ) -> Ack:
        """Append ``row`` (plus its outbox events and review items) in one transaction;
        clears the try-in-flight marker (renewing the lease then). ``deferred``: a row
        of the same instance the run executed but did not write yet, appended first in
        the same transaction. Raises StaleFencingToken."""
        ...

    async def commit_and_park(
        self,
        token: int,
        row: StepRow,
        lease_until: datetime,
        *,
        owner: str,
        wake_at: datetime | None,
        wake_step_id: int,
        wake_scope: int,
        accept_signal: str | None = None,
        wake_kind: WakeKind | None = None,
    ) -> Ack:
        """``commit_step(row)`` then ``park(...)`` at ``row.committed_at`` as one write where
        the store can. The row is committed whenever this returns; the Ack is the park's.
        Raises StaleFencingToken (nothing written)."""
        ...

    async def park(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        wake_at: datetime | None,
        wake_step_id: int,
        wake_scope: int,
        accept_signal: str | None = None,
        wake_kind: WakeKind | None = None,
        unwinding: bool = False,
    ) -> Ack:
        """state=suspended with the wake (``wake_at`` None: only a signal or cancel wakes
        it) and what it waits for (``wake_kind``), lease released, in one transaction.

        Not applied (``Ack(applied=False)``) when a cancel was requested
        (``cancel_requested=True``; unless ``unwinding``: a compensation waiting for its
        next try parks whatever the instance is unwinding for), or when ``accept_signal``
        names a signal that is waiting untaken in the mailbox (``signal_pending=True``):
        the engine takes it instead of parking, so a signal racing a park is never left
        unacted on.
        Raises StaleFencingToken."""
        ...

    async def begin_ending(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        ending: InstanceState,
        failure: FlowFailure | None,
    ) -> Ack:
        """Record that the instance unwinds towards ``ending`` (FAILED or CANCELLED)."""
        ...

    async def finish(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        state: InstanceState,
        result: Any = None,
        failure: FlowFailure | None = None,
    ) -> Ack:
        """Write a final state and release the lease. A COMPLETED finish is not applied when
        a cancel was requested."""
        ...

    async def start_try(
        self,
        instance_id: str,
        token: int,
        step_id: int,
        scope: int,
        try_number: int,
        now: datetime,
        lease_until: datetime,
    ) -> Ack:
        """Mark an try in flight (heartbeating capabilities), renewing the lease."""
        ...

    async def record_heartbeat(
        self, instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
    ) -> Ack:
        """Persist a checkpoint for the try in flight and renew the lease."""
        ...

    async def last_heartbeat(self, instance_id: str, step_id: int, scope: int) -> Heartbeat | None:
        """The checkpoint the latest try of (step, scope) recorded, or None."""
        ...


class Mailbox(Protocol):
    """The signal mailbox: signals are stored before anything else happens, then taken
    by the waits that accept them."""

    async def deliver_signal(
        self,
        instance_id: str,
        name: str,
        payload: dict[str, Any],
        idempotency_key: str | None,
        now: datetime,
        signal_id: str,
    ) -> tuple[SignalRecord, bool]:
        """Store a signal durably. Returns ``(record, created)``; a repeat of the same
        idempotency key returns the first record and stores nothing.

        Raises:
            InstanceNotFound: no such instance.
            InstanceEnded: the instance has ended (nothing stored).
        """
        ...

    async def deliver_and_claim(
        self,
        instance_id: str,
        name: str,
        payload: dict[str, Any],
        idempotency_key: str | None,
        now: datetime,
        signal_id: str,
        *,
        owner: str,
        lease_until: datetime,
        wake_steps: Sequence[int],
    ) -> Delivery:
        """:meth:`deliver_signal`, and in the same transaction, when the signal is new and
        the instance is suspended at one of ``wake_steps`` (the waits that accept it),
        claim it for ``owner`` until ``lease_until`` (as :meth:`claim` does).

        Raises:
            InstanceNotFound, InstanceEnded: as :meth:`deliver_signal` (nothing stored).
        """
        ...

    async def get_signal(self, instance_id: str, signal_id: str) -> SignalRecord | None:
        """The signal ``signal_id`` of the instance as stored now, or None."""
        ...

    async def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        """Untaken signals of the instance, in arrival order."""
        ...

    async def take_signal(self, token: int, signal_id: str, row: StepRow) -> Ack:
        """Mark ``signal_id`` taken and append ``row`` (kind=signal) in one transaction."""
        ...

    async def refuse_signal(
        self, instance_id: str, token: int, signal_id: str, step_id: int, at: datetime
    ) -> Ack:
        """Mark ``signal_id`` refused by the wait at ``step_id`` (``matched`` false, out of
        the mailbox; no journal row), behind the fence.

        Raises:
            StaleFencingToken: the token is stale; nothing written.
            JournalConflict: the signal is not the instance's or not waiting.
        """
        ...


class Streams(Protocol):
    """Best-effort, size-bounded progress messages of an instance."""

    async def write_stream(
        self,
        instance_id: str,
        stream: str,
        payload: Any,
        size: int,
        max_bytes: int,
        now: datetime,
        *,
        token: int | None = None,
    ) -> bool:
        """Append a stream message unless the stream would pass ``max_bytes``; returns
        whether it was stored. With ``token``, the write is fenced like the lease holder's
        other writes (raises StaleFencingToken when another node holds the instance)."""
        ...

    async def read_stream(
        self, instance_id: str, stream: str, after: int | None = None
    ) -> list[StreamMessage]:
        """Messages of one stream in write order, after the ``after`` sequence if given."""
        ...


class ReadModel(Protocol):
    """What the HTTP API and operator views read: instances, their journals and signals,
    the review queue and the outbox. Reads only; never part of a run's decisions."""

    async def get_instance(self, instance_id: str) -> InstanceRecord:
        """Read the instance row only.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        ...

    async def load(self, instance_id: str) -> Snapshot:
        """The instance, its journal (commit order) and its untaken signals.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        ...

    async def list_signals(self, instance_id: str) -> list[SignalRecord]:
        """Every signal delivered to the instance, taken or not, in arrival order (empty
        for an unknown instance)."""
        ...

    async def list_reviews(self, limit: int = 100) -> list[dict[str, Any]]:
        """The review queue, oldest first: at most ``limit`` dicts with ``sequence, id,
        instance_id, subject, reason, details, created_at`` (aware UTC)."""
        ...

    async def list_events(
        self, limit: int = 100, after_sequence: int | None = None
    ) -> list[dict[str, Any]]:
        """Outbox events in write order after ``after_sequence``: at most ``limit`` dicts
        with ``sequence, id, instance_id, name, payload, created_at, published_at``."""
        ...

    async def count_instances(self, state: InstanceState | str | None = None) -> int:
        """Number of instances, optionally only those in ``state``."""
        ...

    async def next_wake(self) -> datetime | None:
        """The earliest ``wake_at`` among suspended instances (aware UTC), or None."""
        ...

    async def ping(self) -> None:
        """Check that the store answers.

        Raises:
            StoreUnavailable: it does not (code ``store.unavailable``).
        """
        ...


class Journal(Protocol):
    """The storage the engine runs on: its five roles, composed (not inherited).

    Attributes:
        claims: claims and leases.
        writes: the lease holder's journal.
        mailbox: signals.
        streams: progress messages.
        reads: the read model of the API and operator views.
    """

    @property
    def claims(self) -> Claims:
        """Claims and leases."""

    @property
    def writes(self) -> JournalWrites:
        """The lease holder's journal."""

    @property
    def mailbox(self) -> Mailbox:
        """The signal mailbox."""

    @property
    def streams(self) -> Streams:
        """Progress messages."""

    @property
    def reads(self) -> ReadModel:
        """The read model of the API and operator views."""
