"""``MemoryDeliveryIds``: which instance a signed delivery id reached first, in one
process's memory; the twin of :class:`flowpark.store.delivery_ids.SqlDeliveryIds` (same
answers), for the harness's provider webhooks on the in-memory store."""

from __future__ import annotations

from datetime import datetime

from flowpark.store.memory_state import MemoryState, require_aware

__all__ = ["MemoryDeliveryIds"]


class MemoryDeliveryIds:
    """Which instance a signed delivery id belongs to (per flow and signal).

    Args:
        state: the store's state (its instances; the ids are kept beside them).
    """

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    async def claim(
        self, flow: str, signal: str, delivery_id: str, instance_id: str, now: datetime
    ) -> str | None:
        """See :meth:`flowpark.store.delivery_ids.SqlDeliveryIds.claim`."""
        require_aware(now)
        key = (flow, signal, delivery_id)
        owner = self._s.delivery_ids.get(key)
        if owner is None and instance_id in self._s.instances:
            owner = self._s.delivery_ids[key] = instance_id
        return owner

    async def owner(self, flow: str, signal: str, delivery_id: str) -> str | None:
        """See :meth:`flowpark.store.delivery_ids.SqlDeliveryIds.owner`."""
        return self._s.delivery_ids.get((flow, signal, delivery_id))
