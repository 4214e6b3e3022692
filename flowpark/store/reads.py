"""Read-side queries: snapshots for the engine, and listings for the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from flowpark.engine.records import (
    InstanceRecord,
    InstanceState,
    SignalRecord,
    Snapshot,
)
from flowpark.errors import InstanceNotFound, StoreUnavailable
from flowpark.store.base import SqlRole
from flowpark.store.mapping import (
    EVENT,
    INSTANCE,
    REVIEW,
    SIGNAL,
    instance_from_row,
    signal_from_row,
)

__all__ = ["SqlReads", "load_snapshot"]


_INSTANCE_BY_ID = select(INSTANCE).where(INSTANCE.c.id == bindparam("id"))


class SqlReads(SqlRole):
    """The read model (:class:`flowpark.engine.ports.ReadModel`) of
    :class:`flowpark.store.sql_store.SqlStore`: each call one read transaction, one
    snapshot."""

    async def load(self, instance_id: str) -> Snapshot:
        """Read the instance, its journal (commit order) and its untaken signals (arrival
        order), from one snapshot.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        return await load_snapshot(self, instance_id)

    async def get_instance(self, instance_id: str) -> InstanceRecord:
        """Read the instance row only.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        async with self._single(write=False) as conn:
            return await _instance(conn, instance_id)

    async def list_signals(self, instance_id: str) -> list[SignalRecord]:
        """Every signal delivered to the instance, taken or not, in arrival order.

        Returns an empty list for an unknown instance.
        """
        async with self._read() as conn:
            rows = await conn.execute(
                select(SIGNAL)
                .where(SIGNAL.c.instance_id == instance_id)
                .order_by(SIGNAL.c.sequence)
            )
            return [signal_from_row(r) for r in rows]

    async def list_reviews(self, limit: int = 100) -> list[dict[str, Any]]:
        """The review queue, oldest first.

        Args:
            limit: at most this many items.

        Returns:
            Dicts with ``sequence, id, instance_id, subject, reason, details, created_at``
            (aware UTC).
        """
        async with self._read() as conn:
            rows = await conn.execute(select(REVIEW).order_by(REVIEW.c.sequence).limit(limit))
            return [_plain(r._mapping, "details") for r in rows]

    async def list_events(
        self, limit: int = 100, after_sequence: int | None = None
    ) -> list[dict[str, Any]]:
        """Outbox events in write order.

        Args:
            limit: at most this many events.
            after_sequence: only events with a greater ``sequence`` (a reader's cursor).

        Returns:
            Dicts with ``sequence, id, instance_id, name, payload, created_at,
            published_at`` (instants aware UTC).
        """
        query = select(EVENT)
        if after_sequence is not None:
            query = query.where(EVENT.c.sequence > after_sequence)
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(EVENT.c.sequence).limit(limit))
            return [_plain(r._mapping, "payload") for r in rows]

    async def count_instances(self, state: InstanceState | str | None = None) -> int:
        """Number of instances, optionally only those in ``state``."""
        query = select(func.count()).select_from(INSTANCE)
        if state is not None:
            query = query.where(INSTANCE.c.state == InstanceState(state).value)
        async with self._read() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def next_wake(self, after: datetime | None = None) -> Any:
        """The earliest ``wake_at`` among suspended instances (aware UTC), or None; with
        ``after``, the earliest later than it."""
        later = INSTANCE.c.wake_at > after if after is not None else INSTANCE.c.wake_at.is_not(None)
        query = (
            select(INSTANCE.c.wake_at)
            .where(
                INSTANCE.c.state == InstanceState.SUSPENDED.value,
                INSTANCE.c.wake_at.is_not(None),
                later,
            )
            .order_by(INSTANCE.c.wake_at)
            .limit(1)
        )
        async with self._read() as conn:
            return (await conn.execute(query)).scalar_one_or_none()

    async def ping(self) -> None:
        """Check the database answers.

        Raises:
            StoreUnavailable: it does not (code ``store_unavailable``).
        """
        try:
            async with self._read() as conn:
                await conn.execute(text("SELECT 1"))
        except OSError as exc:  # e.g. a refused TCP connection surfacing unwrapped
            raise StoreUnavailable(f"database unreachable: {exc}") from exc


async def _instance(conn: AsyncConnection, instance_id: str) -> InstanceRecord:
    row = (await conn.execute(_INSTANCE_BY_ID, {"id": instance_id})).first()
    if row is None:
        raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
    return instance_from_row(row)


async def load_snapshot(role: SqlRole, instance_id: str) -> Snapshot:
    """The instance, its journal (commit order) and its untaken signals (arrival order),
    from one snapshot (:meth:`flowpark.store.dialects.Dialect.load`).

    Raises:
        InstanceNotFound: no such instance (code ``instance_not_found``).
    """
    return await role._dialect.load(role, instance_id)


def _plain(mapping: Any, json_key: str) -> dict[str, Any]:
    out = dict(mapping)
    if out.get(json_key) is None:
        out[json_key] = {}
    return out
