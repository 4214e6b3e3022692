"""Signals: delivery (and the claim a delivery makes of an instance parked on a wait
that accepts the signal), taking a signal from the mailbox, reading one signal.

On PostgreSQL each of these is one statement in autocommit: a delivery locks the instance
row, stores the signal (or finds a repeat of its idempotency key) and claims the instance
with its journal; a take marks the signal and appends its journal row behind the fence.
SQLite runs the same steps as one write transaction each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    bindparam,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from flowpark.engine.ports.values import NewSignal, WakeClaim
from flowpark.engine.records import (
    Ack,
    Delivery,
    InstanceState,
    SignalRecord,
    StepKind,
    StepRow,
)
from flowpark.errors import InstanceEnded
from flowpark.store.base import JournalConflict, SqlRole
from flowpark.store.fencing import fenced, insert_step
from flowpark.store.mapping import (
    INSTANCE,
    SIGNAL,
    signal_from_row,
)
from flowpark.store.types import is_instance_id

__all__ = ["SqlMailbox", "repeat_after_race", "signal_by_key", "signal_not_waiting"]

_RUNNING = InstanceState.RUNNING.value

_ENDED = tuple(s.value for s in InstanceState if s.ended)


def _ended(instance_id: str, state: str) -> InstanceEnded:
    return InstanceEnded(
        f"instance {instance_id!r} has ended ({state})", instance_id=instance_id, state=state
    )


def signal_not_waiting(instance_id: str, signal_id: str) -> JournalConflict:
    """The error of a take or refusal whose signal is not waiting in the mailbox."""
    return JournalConflict(
        f"signal {signal_id!r} of instance {instance_id!r} is unknown or already taken",
        instance_id=instance_id,
        signal_id=signal_id,
    )


_PENDING_SIGNALS = (
    select(SIGNAL)
    .where(SIGNAL.c.instance_id == bindparam("id"), SIGNAL.c.taken_at.is_(None))
    .order_by(SIGNAL.c.sequence)
)


async def signal_by_key(
    conn: AsyncConnection, instance_id: str, idempotency_key: str | None
) -> SignalRecord | None:
    """The signal of the instance holding ``idempotency_key``, or None."""
    if idempotency_key is None:
        return None
    row = (
        await conn.execute(
            select(SIGNAL).where(
                SIGNAL.c.instance_id == instance_id,
                SIGNAL.c.idempotency_key == idempotency_key,
            )
        )
    ).first()
    return signal_from_row(row) if row is not None else None


async def repeat_after_race(
    mailbox: SqlRole,
    instance_id: str,
    idempotency_key: str | None,
    signal_id: str,
    cause: BaseException | None,
) -> Delivery:
    """The answer of ``mailbox``'s delivery whose insert lost to a concurrent repeat of its key:
    that repeat's signal, committed by now.

    Raises:
        JournalConflict: no signal holds the key (the insert failed on ``signal_id``).
    """
    async with mailbox._read() as conn:
        first = await signal_by_key(conn, instance_id, idempotency_key)
        state = (
            await conn.execute(select(INSTANCE.c.state).where(INSTANCE.c.id == instance_id))
        ).scalar_one_or_none()
    if first is not None and state is not None:
        return Delivery(first, False, InstanceState(state))
    raise JournalConflict(f"signal {signal_id!r} exists already", signal_id=signal_id) from cause


class SqlMailbox(SqlRole):
    """The signal mailbox (:class:`flowpark.engine.ports.Mailbox`) of
    :class:`flowpark.store.sql_store.SqlStore`."""

    _fenced: Any
    _why: Any
    _insert_step: Any

    async def deliver_signal(self, signal: NewSignal) -> tuple[SignalRecord, bool]:
        """Store a signal durably, in arrival order.

        A repeat of ``(instance_id, idempotency_key)`` returns the first record and stores
        nothing, even once the instance has ended (a retried delivery gets the first answer).

        Returns:
            ``(record, created)``.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
            InstanceEnded: the instance has ended; nothing stored (code ``instance_ended``).
            JournalConflict: ``signal.signal_id`` exists already.
        """
        delivery = await self._deliver(signal, None)
        return delivery.signal, delivery.created

    async def deliver_and_claim(self, signal: NewSignal, claim: WakeClaim) -> Delivery:
        """:meth:`deliver_signal`; when the signal is new and the instance is suspended at
        one of ``claim.wake_steps``, also claim it for ``claim.owner`` (running, leased
        until ``claim.lease_until``, fencing token + 1), in the same transaction.

        PostgreSQL: one statement (the instance row locked ``FOR NO KEY UPDATE``, so a
        concurrent park either sees the signal or is seen suspended here, and two
        deliveries to one instance take turns); a claim comes back with its snapshot
        (journal and mailbox, the new signal included). SQLite: one write transaction.

        Returns:
            :class:`~flowpark.engine.records.Delivery`: the signal, whether it is new, the state
            the delivery found, and the claim when it made one.

        Raises:
            InstanceNotFound, InstanceEnded, JournalConflict: as :meth:`deliver_signal`.
        """
        return await self._deliver(signal, claim)

    async def _deliver(self, signal: NewSignal, claim_for: WakeClaim | None) -> Delivery:
        try:
            return await self._dialect.deliver(self, signal, claim_for)
        except IntegrityError as exc:  # the signal id exists, or a repeat raced the insert
            return await repeat_after_race(
                self, signal.instance_id, signal.idempotency_key, signal.signal_id, exc
            )

    async def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        """Untaken signals of the instance, in arrival order (one statement)."""
        async with self._single(write=False) as conn:
            rows = await conn.execute(_PENDING_SIGNALS, {"id": instance_id})
            return [signal_from_row(r) for r in rows]

    async def get_signal(self, instance_id: str, signal_id: str) -> SignalRecord | None:
        """The signal ``signal_id`` of the instance as stored now, or None (also for an
        instance id that is not a UUID string: no instance has it)."""
        if not is_instance_id(instance_id):
            return None
        async with self._single(write=False) as conn:
            row = (
                await conn.execute(
                    select(SIGNAL).where(
                        SIGNAL.c.instance_id == instance_id, SIGNAL.c.id == signal_id
                    )
                )
            ).first()
        return signal_from_row(row) if row is not None else None

    async def take_signal(self, token: int, signal_id: str, row: StepRow) -> Ack:
        """Mark ``signal_id`` taken (at ``row.committed_at`` by ``row.step_id``) and append
        ``row`` (kind ``signal``), in one transaction.

        Raises:
            StaleFencingToken: the token is stale; nothing written.
            InstanceNotFound: no such instance.
            JournalConflict: the signal is not the instance's, is already taken, or the row
                exists already; nothing written.
        """
        if row.kind != StepKind.SIGNAL:
            raise ValueError(f"take_signal needs a row of kind 'signal', got {row.kind!r}")
        ack = await self._dialect.take_signal(self, token, signal_id, row)
        if ack is not None:
            return ack
        async with self._write() as conn:
            fence = await fenced(conn, row.instance_id, token, {"updated_at": row.committed_at})
            assert fence is not None
            taken = await conn.execute(
                update(SIGNAL)
                .where(
                    SIGNAL.c.id == signal_id,
                    SIGNAL.c.instance_id == row.instance_id,
                    SIGNAL.c.taken_at.is_(None),
                )
                .values(taken_at=row.committed_at, taken_step_id=row.step_id)
            )
            if taken.rowcount != 1:
                raise signal_not_waiting(row.instance_id, signal_id)
            await insert_step(conn, row, extra=self._dialect.sequence_values())
        return Ack(applied=True, cancel_requested=fence.cancel_requested)

    async def refuse_signal(
        self, instance_id: str, token: int, signal_id: str, step_id: int, at: datetime
    ) -> Ack:
        """Mark ``signal_id`` refused by the wait at ``step_id``: ``taken_at`` = ``at``,
        ``matched`` false (out of the mailbox; no journal row), behind the fence, in one
        transaction.

        Raises:
            StaleFencingToken: the token is stale; nothing written.
            InstanceNotFound: no such instance.
            JournalConflict: the signal is not the instance's or is not waiting.
        """
        async with self._write() as conn:
            fence = await fenced(conn, instance_id, token, {"updated_at": at})
            assert fence is not None
            refused = await conn.execute(
                update(SIGNAL)
                .where(
                    SIGNAL.c.id == signal_id,
                    SIGNAL.c.instance_id == instance_id,
                    SIGNAL.c.taken_at.is_(None),
                )
                .values(taken_at=at, taken_step_id=step_id, matched=False)
            )
            if refused.rowcount != 1:
                raise signal_not_waiting(instance_id, signal_id)
        return Ack(applied=True, cancel_requested=fence.cancel_requested)
