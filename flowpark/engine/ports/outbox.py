"""The outbox's deliveries to subscribers (:class:`Deliveries`) and the retention of ended
instances (:class:`Retention`): the node's background jobs' ports.

Implemented in SQL (:mod:`flowpark.store.deliveries`, :mod:`flowpark.store.retention`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

__all__ = ["ClaimedDelivery", "Deliveries", "Retention"]


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery a node holds until ``claimed_until``, with its event.

    Attributes:
        sequence: the delivery's id.
        subscriber: the subscriber's name.
        tries: tries made before this one.
        event_id / event_name / payload / event_created_at / instance_id: the event.
    """

    sequence: int
    subscriber: str
    tries: int
    claimed_until: datetime
    event_id: str
    event_name: str
    payload: dict[str, Any]
    event_created_at: datetime
    instance_id: str


class Deliveries(Protocol):
    """Outbox events fanned out to subscribers, claimed, sent and recorded."""

    async def relay(self, subscribers: Sequence[str], now: datetime, limit: int = 500) -> int:
        """Write the deliveries of up to ``limit`` events not relayed yet, oldest first;
        returns how many events were relayed (0 when another node is relaying)."""
        ...

    async def claim(
        self, node: str, now: datetime, until: datetime, limit: int
    ) -> list[ClaimedDelivery]:
        """Lease up to ``limit`` due pending deliveries to ``node`` until ``until``."""
        ...

    async def finish(
        self,
        claimed: ClaimedDelivery,
        node: str,
        *,
        delivered_at: datetime | None = None,
        next_try_at: datetime | None = None,
        error: str | None = None,
        status: int | None = None,
    ) -> bool:
        """Record a send's outcome under the claim that made it; False when the claim was
        lost (nothing written)."""
        ...

    async def retry(self, sequence: int, now: datetime) -> dict[str, Any] | None:
        """Make a failed delivery pending again, due now; None when there is none.

        Raises:
            ValueError: the delivery is not ``failed``.
        """
        ...

    async def list_deliveries(
        self,
        *,
        state: str | None = None,
        subscriber: str | None = None,
        instance_id: str | None = None,
        after: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Deliveries in creation order, with their event's name."""
        ...

    async def count_by_state(self) -> dict[str, int]:
        """Deliveries per state (``pending``, ``delivered``, ``failed``)."""
        ...


class Retention(Protocol):
    """Deletes ended instances older than a cutoff, in bounded batches."""

    async def purge_batch(self, cutoff: datetime, limit: int = 500) -> int:
        """Delete up to ``limit`` instances that ended before ``cutoff`` with all their
        rows; returns how many (0 when another node is purging)."""
        ...

    async def purge(self, cutoff: datetime, limit: int = 500, *, most: int | None = None) -> int:
        """:meth:`purge_batch` until a batch deletes fewer than ``limit`` (or ``most`` were
        deleted); returns how many in all."""
        ...
