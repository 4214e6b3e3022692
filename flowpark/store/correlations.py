"""Correlation keys in SQL (``flow_correlation``): written inside a commit's transaction
(:func:`record_correlations`), released inside a finish's (:func:`release_correlations`;
the PostgreSQL batched completion does it in its own statement), read by
:class:`SqlCorrelations`.

A key is unique per flow and provider (the table's primary key): a commit inserts it with
``ON CONFLICT DO NOTHING`` and reads its holder back, so two instances racing for one key
record one holder, and the other's commit is refused whole (:class:`CorrelationKeyInUse`,
its transaction rolled back).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from flowpark.engine.ports.correlations import CorrelationHolder
from flowpark.engine.ports.values import Correlation
from flowpark.store.base import SqlRole
from flowpark.store.mapping import INSTANCE
from flowpark.store.memory_correlations import key_in_use
from flowpark.store.provider_tables import CORRELATION
from flowpark.store.tables import ACTIVE_STATES

if TYPE_CHECKING:
    from flowpark.store.base import Dialect

__all__ = [
    "CORRELATION",
    "SqlCorrelations",
    "record_correlations",
    "release_correlations",
]


async def record_correlations(
    conn: AsyncConnection,
    dialect: Dialect,
    instance_id: str,
    correlations: Sequence[Correlation],
    at: datetime,
) -> None:
    """Insert ``correlations`` for ``instance_id`` in the caller's transaction (one it
    holds already is kept as it is).

    Raises:
        CorrelationKeyInUse: another instance holds one of them (the caller's transaction
            must roll back: nothing of the commit is written).
    """
    for c in correlations:
        await conn.execute(
            dialect.insert(CORRELATION)
            .values(
                flow_name=c.flow_name,
                provider=c.provider,
                key=c.key,
                instance_id=instance_id,
                created_at=at,
            )
            .on_conflict_do_nothing()
        )
        holder = (
            await conn.execute(
                select(CORRELATION.c.instance_id).where(
                    CORRELATION.c.flow_name == c.flow_name,
                    CORRELATION.c.provider == c.provider,
                    CORRELATION.c.key == c.key,
                )
            )
        ).scalar_one()
        if str(holder) != instance_id:
            raise key_in_use(instance_id, c, str(holder))


async def release_correlations(conn: AsyncConnection, instance_id: str) -> None:
    """Delete the keys ``instance_id`` holds, in the caller's transaction (its finish)."""
    await conn.execute(delete(CORRELATION).where(CORRELATION.c.instance_id == instance_id))


_HOLDER = (
    select(
        CORRELATION.c.instance_id,
        INSTANCE.c.flow_name,
        INSTANCE.c.flow_version,
        CORRELATION.c.provider,
        CORRELATION.c.key,
        CORRELATION.c.created_at,
    )
    .join(INSTANCE, INSTANCE.c.id == CORRELATION.c.instance_id)
    .where(INSTANCE.c.state.in_(ACTIVE_STATES))
)


class SqlCorrelations(SqlRole):
    """:class:`flowpark.engine.ports.Correlations` over SQL."""

    async def holder(self, flow: str, provider: str, key: str) -> CorrelationHolder | None:
        """See :meth:`flowpark.engine.ports.Correlations.holder`."""
        query = _HOLDER.where(
            CORRELATION.c.flow_name == flow,
            CORRELATION.c.provider == provider,
            CORRELATION.c.key == key,
        )
        async with self._read() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None else _holder(row)

    async def held(self, instance_id: str) -> list[CorrelationHolder]:
        """See :meth:`flowpark.engine.ports.Correlations.held`."""
        query = _HOLDER.where(CORRELATION.c.instance_id == instance_id).order_by(
            CORRELATION.c.provider, CORRELATION.c.key
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        return [_holder(row) for row in rows]


def _holder(row: Any) -> CorrelationHolder:
    instance_id, flow_name, flow_version, provider, key, created_at = tuple(row)
    return CorrelationHolder(str(instance_id), flow_name, flow_version, provider, key, created_at)
