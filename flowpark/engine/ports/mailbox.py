"""The signal mailbox (:class:`Mailbox`) and an instance's progress messages
(:class:`Streams`).

Signals are stored durably before anything else happens, then taken by the waits that
accept them (a take is part of a run's :class:`~flowpark.engine.ports.values.Commit`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from flowpark.engine.ports.values import NewSignal, StreamWrite, WakeClaim
from flowpark.engine.records import Ack, Delivery, SignalRecord, StreamMessage

__all__ = ["Mailbox", "Streams"]


class Mailbox(Protocol):
    """Deliveries into an instance's mailbox, and what a run reads and refuses of it."""

    async def deliver_signal(self, signal: NewSignal) -> tuple[SignalRecord, bool]:
        """Store a signal durably, in arrival order. A repeat of the instance's
        idempotency key returns the first record and stores nothing (even once the
        instance has ended).

        Returns:
            ``(record, created)``.

        Raises:
            InstanceNotFound: no such instance.
            InstanceEnded: the instance has ended; nothing stored.
            JournalConflict: ``signal.signal_id`` exists already.
        """
        ...

    async def deliver_and_claim(self, signal: NewSignal, claim: WakeClaim) -> Delivery:
        """:meth:`deliver_signal`; in the same transaction, when the signal is new and the
        instance is suspended at one of ``claim.wake_steps``, claim it for ``claim.owner``
        (as :meth:`~flowpark.engine.ports.run.RunStore.claim` does).

        Raises:
            InstanceNotFound, InstanceEnded, JournalConflict: as :meth:`deliver_signal`.
        """
        ...

    async def get_signal(self, instance_id: str, signal_id: str) -> SignalRecord | None:
        """The signal ``signal_id`` of the instance as stored now, or None."""
        ...

    async def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        """Untaken signals of the instance, in arrival order."""
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
        self, message: StreamWrite, max_bytes: int, *, token: int | None = None
    ) -> bool:
        """Append ``message`` unless its stream would pass ``max_bytes``; returns whether
        it was stored. With ``token`` the write is fenced like the lease holder's others.

        Raises:
            InstanceNotFound: no such instance.
            StaleFencingToken: ``token`` is stale.
        """
        ...

    async def read_stream(
        self, instance_id: str, stream: str, after: int | None = None
    ) -> list[StreamMessage]:
        """Messages of one stream in write order, after sequence ``after`` if given."""
        ...
