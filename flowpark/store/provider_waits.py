"""What waits on providers now, over ``flow_instance``
(:class:`flowpark.engine.ports.provider_waits.ProviderWaits`), and its in-memory twin.

One grouped read of the parked rows (``state = 'suspended'``) by flow version, wake step and
wake kind; the plan maps a step to its provider. The twin reads a
:class:`~flowpark.store.memory.MemoryStore`'s instances.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select

from flowpark.engine.ports.provider_waits import OldestWait, WaitGroup
from flowpark.store.db import READ_ONLY
from flowpark.store.mapping import INSTANCE
from flowpark.store.memory import MemoryStore
from flowpark.store.memory_state import SUSPENDED
from flowpark.store.parts import SqlPart

__all__ = ["MemoryProviderWaits", "SqlProviderWaits"]

COL = INSTANCE.c


class SqlProviderWaits(SqlPart):
    """:class:`~flowpark.engine.ports.provider_waits.ProviderWaits` over ``flow_instance``.

    Args:
        engine: an engine from :func:`flowpark.store.db.make_async_engine`.
    """

    async def wait_groups(self) -> list[WaitGroup]:
        """See :meth:`flowpark.engine.ports.provider_waits.ProviderWaits.wait_groups`."""
        query = (
            select(
                COL.flow_name,
                COL.flow_version,
                COL.wake_step_id,
                COL.wake_kind,
                func.count().label("n"),
                func.min(COL.updated_at, type_=COL.updated_at.type).label("since"),
                func.min(COL.wake_at, type_=COL.wake_at.type).label("next_wake"),
            )
            .where(
                COL.state == "suspended", COL.wake_step_id.is_not(None), COL.wake_kind.is_not(None)
            )
            .group_by(COL.flow_name, COL.flow_version, COL.wake_step_id, COL.wake_kind)
            .order_by(COL.flow_name, COL.flow_version, COL.wake_step_id, COL.wake_kind)
        )
        engine = self._context.engine
        async with engine.execution_options(**READ_ONLY).connect() as conn:
            rows = (await conn.execute(query)).all()
        return [
            WaitGroup(
                flow=r.flow_name,
                version=r.flow_version,
                step_id=int(r.wake_step_id),
                wake_kind=r.wake_kind,
                count=int(r.n),
                oldest_since=r.since,
                next_wake=r.next_wake,
            )
            for r in rows
        ]

    async def oldest(
        self, flow: str, version: str, step_id: int, kinds: Sequence[str]
    ) -> OldestWait | None:
        """See :meth:`flowpark.engine.ports.provider_waits.ProviderWaits.oldest`."""
        query = (
            select(COL.id, COL.updated_at, COL.wake_at)
            .where(
                COL.state == "suspended",
                COL.flow_name == flow,
                COL.flow_version == version,
                COL.wake_step_id == step_id,
                COL.wake_kind.in_(list(kinds)),
            )
            .order_by(COL.updated_at, COL.id)
            .limit(1)
        )
        engine = self._context.engine
        async with engine.execution_options(**READ_ONLY).connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return OldestWait(str(row.id), row.updated_at, row.wake_at)


class MemoryProviderWaits:
    """The twin of :class:`SqlProviderWaits` over a :class:`MemoryStore`.

    Args:
        store: the store whose instances it reads.
    """

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def _parked(self) -> list[tuple[str, str, int, str, datetime, datetime | None, str]]:
        return [
            (
                i.flow_name,
                i.flow_version,
                i.wake_step_id,
                str(i.wake_kind),
                i.updated_at,
                i.wake_at,
                i.id,
            )
            for i in self._store._s.instances.values()
            if i.state is SUSPENDED and i.wake_step_id is not None and i.wake_kind is not None
        ]

    async def wait_groups(self) -> list[WaitGroup]:
        """See :meth:`flowpark.engine.ports.provider_waits.ProviderWaits.wait_groups`."""
        groups: dict[tuple[str, str, int, str], WaitGroup] = {}
        for flow, version, step, kind, since, wake, _id in self._parked():
            key = (flow, version, step, kind)
            seen = groups.get(key)
            if seen is None:
                groups[key] = WaitGroup(flow, version, step, kind, 1, since, wake)
                continue
            wakes = [w for w in (seen.next_wake, wake) if w is not None]
            groups[key] = WaitGroup(
                flow,
                version,
                step,
                kind,
                seen.count + 1,
                min(seen.oldest_since, since),
                min(wakes) if wakes else None,
            )
        return [groups[k] for k in sorted(groups)]

    async def oldest(
        self, flow: str, version: str, step_id: int, kinds: Sequence[str]
    ) -> OldestWait | None:
        """See :meth:`flowpark.engine.ports.provider_waits.ProviderWaits.oldest`."""
        found = sorted(
            (since, instance_id, wake)
            for f, v, step, kind, since, wake, instance_id in self._parked()
            if (f, v, step) == (flow, version, step_id) and kind in kinds
        )
        if not found:
            return None
        since, instance_id, wake = found[0]
        return OldestWait(instance_id, since, wake)
