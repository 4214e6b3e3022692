"""The in-memory twins of the outbox's deliveries (:class:`MemoryDeliveries`) and of the
retention purge (:class:`MemoryRetention`), over a
:class:`~flowpark.store.memory.MemoryStore`'s state: the same answers and errors as
:mod:`flowpark.store.deliveries` and :mod:`flowpark.store.retention` (the contract suite runs
the same bodies on each). Every call runs without awaiting anything, so each is atomic on its
event loop as a transaction is in SQL; one event loop is one node, so no call ever finds
another node relaying or purging.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flowpark.engine.ports.outbox import ClaimedDelivery
from flowpark.store.memory_state import MemoryBase, copy_json, require_aware

__all__ = ["ENDED", "MemoryDeliveries", "MemoryRetention"]

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
#: The states of an instance that will never run again.
ENDED = ("completed", "failed", "cancelled")


class MemoryDeliveries:
    """:class:`~flowpark.engine.ports.Deliveries` over a memory store's outbox events.

    Args:
        base: the store's state.
    """

    def __init__(self, base: MemoryBase) -> None:
        self._s = base._s

    async def relay(self, subscribers: Sequence[str], now: datetime, limit: int = 500) -> int:
        """See :meth:`flowpark.engine.ports.Deliveries.relay`."""
        require_aware(now)
        if not subscribers:
            return 0
        waiting = [e for e in self._s.events if e["published_at"] is None]
        waiting.sort(key=lambda e: e["sequence"])
        for event in waiting[:limit]:
            for name in subscribers:
                self._s.deliveries.append(
                    {
                        "sequence": next(self._s.sequence),
                        "event_id": event["id"],
                        "event_sequence": event["sequence"],
                        "instance_id": event["instance_id"],
                        "subscriber": name,
                        "state": PENDING,
                        "tries": 0,
                        "next_try_at": now,
                        "last_error": None,
                        "last_status": None,
                        "delivered_at": None,
                        "claimed_by": None,
                        "claimed_until": None,
                        "created_at": now,
                    }
                )
            event["published_at"] = now
        return len(waiting[:limit])

    def _due(self, delivery: dict[str, Any], now: datetime) -> bool:
        if delivery["state"] != PENDING or delivery["next_try_at"] > now:
            return False
        if delivery["claimed_until"] is not None and delivery["claimed_until"] >= now:
            return False
        return not any(  # an earlier event of its instance still pending for the subscriber
            d["instance_id"] == delivery["instance_id"]
            and d["subscriber"] == delivery["subscriber"]
            and d["state"] == PENDING
            and d["event_sequence"] < delivery["event_sequence"]
            for d in self._s.deliveries
        )

    async def claim(
        self, node: str, now: datetime, until: datetime, limit: int
    ) -> list[ClaimedDelivery]:
        """See :meth:`flowpark.engine.ports.Deliveries.claim`."""
        require_aware(now, until)
        due = sorted(
            (d for d in self._s.deliveries if self._due(d, now)),
            key=lambda d: (d["next_try_at"], d["sequence"]),
        )[:limit]
        events = {e["id"]: e for e in self._s.events}
        claimed = []
        for delivery in sorted(due, key=lambda d: d["sequence"]):
            delivery.update(claimed_by=node, claimed_until=until)
            event = events[delivery["event_id"]]
            claimed.append(
                ClaimedDelivery(
                    sequence=delivery["sequence"],
                    subscriber=delivery["subscriber"],
                    tries=delivery["tries"],
                    claimed_until=until,
                    event_id=event["id"],
                    event_name=event["name"],
                    payload=copy_json(event["payload"]) or {},
                    event_created_at=event["created_at"],
                    instance_id=event["instance_id"],
                )
            )
        return claimed

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
        """See :meth:`flowpark.engine.ports.Deliveries.finish`."""
        delivery = self._by_sequence(claimed.sequence)
        if (
            delivery is None
            or delivery["claimed_by"] != node
            or delivery["claimed_until"] != claimed.claimed_until
        ):
            return False
        state = DELIVERED if delivered_at is not None else PENDING if next_try_at else FAILED
        delivery.update(
            state=state,
            tries=delivery["tries"] + 1,
            last_status=status,
            last_error=error[:2000] if error else None,
            delivered_at=delivered_at,
            next_try_at=next_try_at,
            claimed_by=None,
            claimed_until=None,
        )
        return True

    async def retry(self, sequence: int, now: datetime) -> dict[str, Any] | None:
        """See :meth:`flowpark.engine.ports.Deliveries.retry`.

        Raises:
            ValueError: the delivery is not ``failed`` (nothing changed).
        """
        delivery = self._by_sequence(sequence)
        if delivery is None:
            return None
        if delivery["state"] != FAILED:
            raise ValueError(f"delivery {sequence} is {delivery['state']}, not failed")
        delivery.update(state=PENDING, tries=0, next_try_at=now)
        return dict(delivery)

    async def list_deliveries(
        self,
        *,
        state: str | None = None,
        subscriber: str | None = None,
        instance_id: str | None = None,
        after: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """See :meth:`flowpark.engine.ports.Deliveries.list_deliveries`."""
        names = {e["id"]: e["name"] for e in self._s.events}
        found = [
            {**d, "event_name": names.get(d["event_id"])}
            for d in self._s.deliveries
            if (state is None or d["state"] == state)
            and (subscriber is None or d["subscriber"] == subscriber)
            and (instance_id is None or d["instance_id"] == instance_id)
            and (after is None or d["sequence"] > after)
        ]
        return found[:limit]

    async def count_by_state(self) -> dict[str, int]:
        """See :meth:`flowpark.engine.ports.Deliveries.count_by_state`."""
        counts: dict[str, int] = {}
        for delivery in self._s.deliveries:
            counts[delivery["state"]] = counts.get(delivery["state"], 0) + 1
        return counts

    def _by_sequence(self, sequence: int) -> dict[str, Any] | None:
        return next((d for d in self._s.deliveries if d["sequence"] == sequence), None)


class MemoryRetention:
    """:class:`~flowpark.engine.ports.Retention` over a memory store's state.

    Args:
        base: the store's state.
    """

    def __init__(self, base: MemoryBase) -> None:
        self._s = base._s

    async def purge_batch(self, cutoff: datetime, limit: int = 500) -> int:
        """See :meth:`flowpark.engine.ports.Retention.purge_batch`."""
        require_aware(cutoff)
        s = self._s
        undelivered = {d["instance_id"] for d in s.deliveries if d["state"] == PENDING}
        ids = [
            i.id
            for i in s.instances.values()
            if i.state.value in ENDED and i.updated_at < cutoff and i.id not in undelivered
        ][:limit]
        gone = set(ids)
        for instance_id in ids:
            del s.instances[instance_id]
            for by_instance in (s.steps, s.signals, s.idempotency):
                by_instance.pop(instance_id, None)
        s.heartbeats = {k: v for k, v in s.heartbeats.items() if k[0] not in gone}
        s.streams = {k: v for k, v in s.streams.items() if k[0] not in gone}
        s.sizes = {k: v for k, v in s.sizes.items() if k[0] not in gone}
        s.events = [e for e in s.events if e["instance_id"] not in gone]
        s.deliveries = [d for d in s.deliveries if d["instance_id"] not in gone]
        s.reviews = [r for r in s.reviews if r.get("instance_id") not in gone]
        s.actions = [a for a in s.actions if a.instance_id not in gone]
        s.delivery_ids = {k: v for k, v in s.delivery_ids.items() if v not in gone}
        return len(ids)

    async def purge(self, cutoff: datetime, limit: int = 500, *, most: int | None = None) -> int:
        """See :meth:`flowpark.engine.ports.Retention.purge`."""
        total = 0
        while most is None or total < most:
            done = await self.purge_batch(cutoff, limit)
            total += done
            if done < limit:
                break
        return total
