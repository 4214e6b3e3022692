"""SQLite, the embedded store: one writer at a time per file. This process's writers queue
on an asyncio lock (rather than polling SQLite's busy handler); other processes wait
through ``busy_timeout``. A write transaction therefore sees nothing change under it: a
read-then-write needs no row locks, and a journal row's ``sequence`` is ``max + 1`` (the
commit order).
"""

from __future__ import annotations

import asyncio
from functools import cache
from typing import Any

from sqlalchemy import Integer, Table, bindparam, insert, select, tuple_, update
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from flowpark.engine.ports.values import NewSignal, WakeClaim
from flowpark.engine.records import Claim, Delivery, InstanceState, Snapshot
from flowpark.errors import InstanceEnded, InstanceNotFound
from flowpark.store.base import Dialect, SqlRole, const
from flowpark.store.claims import claim_due_pick, claim_due_update, claim_values
from flowpark.store.fencing import NEXT_SQLITE_SEQUENCE, RUNNING
from flowpark.store.mapping import (
    INSTANCE,
    SIGNAL,
    STEP,
    instance_from_row,
    journal_from_rows,
    signal_from_row,
)
from flowpark.store.signals import signal_by_key
from flowpark.store.types import UtcDateTime

__all__ = ["SqliteDialect"]

_RUNNING = RUNNING


def _ended(instance_id: str, state: str) -> InstanceEnded:
    return InstanceEnded(
        f"instance {instance_id!r} has ended ({state})", instance_id=instance_id, state=state
    )


@cache
def _claim_due_statement() -> Any:
    """``claim_due`` as one statement, built once (bound parameters of
    :func:`~flowpark.store.claims.claim_due_pick`)."""
    stmt = claim_due_update(claim_due_pick())
    return stmt.returning(INSTANCE.c.id, INSTANCE.c.fencing_token, INSTANCE.c.wake_at)


@cache
def _expired_statement() -> Any:
    """The ids of running instances with an expired lease that ``claim_due``
    takes first (its pick's order), read in the claim's transaction before it."""
    now = bindparam("c_now", type_=UtcDateTime())
    return (
        select(INSTANCE.c.id)
        .where(
            INSTANCE.c.state == const(_RUNNING),
            INSTANCE.c.lease_expires_at < now,
            tuple_(INSTANCE.c.flow_name, INSTANCE.c.flow_version).in_(
                bindparam("c_runnable", expanding=True)
            ),
        )
        .order_by(INSTANCE.c.lease_expires_at, INSTANCE.c.id)
        .limit(bindparam("c_limit", type_=Integer()))
    )


class SqliteDialect(Dialect):
    """SQLite (see the module)."""

    name = "sqlite"

    def write_lock(self) -> asyncio.Lock | None:
        """This process's writers queue here (one write lock per file)."""
        return asyncio.Lock()

    def insert(self, table: Table) -> Any:
        """SQLite's INSERT (``ON CONFLICT``)."""
        return sqlite_insert(table)

    def sequence_values(self) -> dict[str, Any]:
        """The row's ``sequence``: ``max + 1`` (one writer at a time: the commit order)."""
        return {"sequence": NEXT_SQLITE_SEQUENCE}

    async def claim_due(self, role: SqlRole, params: dict[str, Any]) -> list[Claim]:
        """One write transaction: the expired leases the claim takes are read first (the
        rows stay as read), then the claim's UPDATE."""
        async with role._write() as conn:
            found = await conn.execute(_expired_statement(), params)
            expired = {r.id for r in found}
            rows = (await conn.execute(_claim_due_statement(), params)).all()
        now = params["c_now"]
        # RETURNING has no order: restore the pick's (expired leases without a wake first)
        ordered = sorted(rows, key=lambda r: (r.wake_at is not None, r.wake_at or now, r.id))
        return [Claim(r.id, r.fencing_token, taken_over=r.id in expired) for r in ordered]

    async def load(self, role: SqlRole, instance_id: str) -> Snapshot:
        """One read transaction of three SELECTs."""
        async with role._read() as conn:
            instance = (
                await conn.execute(select(INSTANCE).where(INSTANCE.c.id == instance_id))
            ).first()
            if instance is None:
                raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
            steps = await conn.execute(
                select(STEP).where(STEP.c.instance_id == instance_id).order_by(STEP.c.sequence)
            )
            signals = await conn.execute(
                select(SIGNAL)
                .where(SIGNAL.c.instance_id == instance_id, SIGNAL.c.taken_at.is_(None))
                .order_by(SIGNAL.c.sequence)
            )
            return Snapshot(
                instance=instance_from_row(instance),
                steps=journal_from_rows(steps, instance),
                signals=[signal_from_row(r) for r in signals],
            )

    async def deliver(
        self, role: SqlRole, signal: NewSignal, claim_for: WakeClaim | None
    ) -> Delivery:
        """:meth:`~flowpark.store.signals.SqlMailbox.deliver_and_claim` as one write transaction
        (one writer at a time: nothing can come between its reads and its writes)."""
        instance_id, name, payload = signal.instance_id, signal.name, signal.payload
        idempotency_key, now, signal_id = (
            signal.idempotency_key,
            signal.received_at,
            signal.signal_id,
        )
        async with role._write() as conn:
            found = (
                await conn.execute(
                    select(INSTANCE.c.state, INSTANCE.c.wake_step_id).where(
                        INSTANCE.c.id == instance_id
                    )
                )
            ).first()
            if found is None:
                raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
            state = InstanceState(found.state)
            first = await signal_by_key(conn, instance_id, idempotency_key)
            if first is not None:
                return Delivery(first, False, state)
            if state.ended:
                raise _ended(instance_id, state.value)
            row = (
                await conn.execute(
                    insert(SIGNAL)
                    .values(
                        id=signal_id,
                        instance_id=instance_id,
                        name=name,
                        payload=dict(payload),
                        idempotency_key=idempotency_key,
                        received_at=now,
                    )
                    .returning(*SIGNAL.c)
                )
            ).one()
            record = signal_from_row(row)
            if (
                claim_for is None
                or state is not InstanceState.SUSPENDED
                or found.wake_step_id not in claim_for.wake_steps
            ):
                return Delivery(record, True, state)
            owner, lease_until = claim_for.owner, claim_for.lease_until
            claimed = (
                await conn.execute(
                    update(INSTANCE)
                    .where(
                        INSTANCE.c.id == instance_id,
                        INSTANCE.c.state == const(InstanceState.SUSPENDED.value),
                    )
                    .values(**claim_values(owner, now, lease_until))
                    .returning(*INSTANCE.c)
                )
            ).one()
            steps = await conn.execute(
                select(STEP).where(STEP.c.instance_id == instance_id).order_by(STEP.c.sequence)
            )
            mailbox = await conn.execute(
                select(SIGNAL)
                .where(SIGNAL.c.instance_id == instance_id, SIGNAL.c.taken_at.is_(None))
                .order_by(SIGNAL.c.sequence)
            )
            snapshot = Snapshot(
                instance_from_row(claimed),
                journal_from_rows(steps, claimed),
                [signal_from_row(r) for r in mailbox],
            )
        return Delivery(record, True, state, Claim(instance_id, claimed.fencing_token, snapshot))
