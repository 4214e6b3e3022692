"""Signals: delivery (and the claim a delivery makes of an instance parked on a wait
that accepts the signal), taking a signal from the mailbox, reading one signal.

On PostgreSQL each of these is one statement in autocommit: a delivery locks the instance
row, stores the signal (or finds a repeat of its idempotency key) and claims the instance
with its journal; a take marks the signal and appends its journal row behind the fence.
SQLite runs the same steps as one write transaction each.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any

from sqlalchemy import (
    JSON,
    Integer,
    String,
    and_,
    any_,
    bindparam,
    exists,
    func,
    insert,
    literal_column,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.engine.journal import (
    Ack,
    Claim,
    Delivery,
    InstanceState,
    SignalRecord,
    Snapshot,
    StepKind,
    StepRow,
)
from app.engine.ports.values import NewSignal, WakeClaim
from app.errors import InstanceEnded, InstanceNotFound
from app.store.base import JournalConflict, SqlRole, const
from app.store.claims import claim_values
from app.store.fencing import fenced, insert_step, why
from app.store.mapping import (
    INSTANCE,
    SIGNAL,
    STEP,
    instance_from_row,
    journal_aggregates,
    journal_insert,
    signal_from_json,
    signal_from_row,
    snapshot_from_row,
    step_from_row,
    step_values,
)
from app.store.types import UtcDateTime, is_instance_id

__all__ = ["SqlMailbox", "signal_not_waiting"]

_RUNNING = InstanceState.RUNNING.value

_ENDED = tuple(s.value for s in InstanceState if s.ended)


def _ended(instance_id: str, state: str) -> InstanceEnded:
    return InstanceEnded(
        f"instance {instance_id!r} has ended ({state})", instance_id=instance_id, state=state
    )


def _inline(state: str) -> Any:
    """A state name written into the SQL text when the statement is compiled (``const``
    renders at every execution, a cost this statement's CTE columns gain nothing from)."""
    return literal_column(f"'{state}'", String())


@cache
def _deliver_statement() -> Any:
    """PostgreSQL delivery (and claim) as one statement, built once (bound parameters
    ``d_id``, ``d_key``, ``d_signal``, ``d_name``, ``d_payload``, ``d_now``, ``d_owner``,
    ``d_lease`` and ``d_steps``, an array).

    The instance row is locked ``FOR NO KEY UPDATE`` first (``inst``): under READ
    COMMITTED that waits for a park or a claim in flight and then reads the row as they
    left it, and no park or claim can come between this read and the claim below.

    One row when the instance exists (none otherwise): ``found_state`` (its state as
    locked), ``first_signal`` (a repeat's first signal, JSON), ``new_signal`` (the inserted
    signal, JSON), and, when the instance was suspended at one of ``d_steps`` and the signal
    is new, the claimed instance row with its journal and mailbox (``j_steps``,
    ``j_signals``), else NULLs there. The journal is read from the statement's snapshot,
    taken before any wait for the lock: ``current`` is false when the instance row changed
    after that snapshot (the locked version is not the one the snapshot sees), and then
    the aggregates may miss rows committed with that change.
    """
    instance_id = bindparam("d_id", type_=INSTANCE.c.id.type)
    key = bindparam("d_key", type_=String())
    now = bindparam("d_now", type_=UtcDateTime())
    version = literal_column("flow_instance.xmin::text", type_=String())
    inst = (
        select(INSTANCE.c.id, INSTANCE.c.state, INSTANCE.c.wake_step_id, version.label("version"))
        .where(INSTANCE.c.id == instance_id)
        .with_for_update(key_share=True)  # FOR NO KEY UPDATE
        .cte("inst")
    )
    seen = select(version.label("version")).where(INSTANCE.c.id == instance_id).cte("seen")
    first = (
        select(SIGNAL)
        .where(SIGNAL.c.instance_id == inst.c.id, SIGNAL.c.idempotency_key == key)
        .cte("first")
    )
    source = select(
        bindparam("d_signal", type_=String()),
        inst.c.id,
        bindparam("d_name", type_=String()),
        bindparam("d_payload", type_=SIGNAL.c.payload.type),
        key,
        now,
    ).where(inst.c.state.not_in([_inline(s) for s in _ENDED]), ~select(first.c.id).exists())
    ins = (
        pg_insert(SIGNAL)
        .from_select(
            ["id", "instance_id", "name", "payload", "idempotency_key", "received_at"], source
        )
        .on_conflict_do_nothing(constraint="uq_flow_signal_idempotency")
        .returning(*SIGNAL.c)
        .cte("ins")
    )
    steps, signals = journal_aggregates()
    # the state and wake come from the locked row (``inst``), not from the version this
    # statement's snapshot sees, which a park committed during the wait has replaced
    claimed = (
        update(INSTANCE)
        .where(
            INSTANCE.c.id == inst.c.id,
            inst.c.state == _inline(InstanceState.SUSPENDED.value),
            inst.c.wake_step_id == any_(bindparam("d_steps", type_=ARRAY(Integer()))),
            select(ins.c.id).exists(),
        )
        .values(
            **claim_values(
                bindparam("d_owner", type_=String()), now, bindparam("d_lease", type_=UtcDateTime())
            )
        )
        .returning(*INSTANCE.c, steps.label("j_steps"), signals.label("j_signals"))
        .cte("claimed")
    )
    as_json = [
        select(func.to_json(cte.table_valued(), type_=JSON)).scalar_subquery().label(label)
        for cte, label in ((first, "first_signal"), (ins, "new_signal"))
    ]
    current = (select(seen.c.version).scalar_subquery() == inst.c.version).label("current")
    return select(inst.c.state.label("found_state"), current, *as_json, *claimed.c).select_from(
        inst.outerjoin(claimed, true())
    )


@cache
def _take_signal_statement() -> Any:
    """``take_signal`` as one PostgreSQL statement, built once (bound parameters ``f_id``,
    ``f_token``, ``t_signal`` and ``s_*`` for the journal row's columns).

    The fenced UPDATE applies only while the signal waits untaken; the signal is marked
    and the row inserted only behind it. No result row: nothing was written (a stale
    token, no instance, or the signal is unknown or taken: see :meth:`SqlJournal._why`).
    """
    instance_id = bindparam("f_id", type_=INSTANCE.c.id.type)
    signal_id = bindparam("t_signal", type_=String())
    committed_at = bindparam("s_committed_at", type_=STEP.c.committed_at.type)
    step_id = bindparam("s_step_id", type_=STEP.c.step_id.type)
    waiting = and_(
        SIGNAL.c.id == signal_id, SIGNAL.c.instance_id == instance_id, SIGNAL.c.taken_at.is_(None)
    )
    fence = (
        update(INSTANCE)
        .where(
            INSTANCE.c.id == instance_id,
            INSTANCE.c.fencing_token == bindparam("f_token"),
            INSTANCE.c.state == _RUNNING,
            exists().where(waiting),
        )
        .values(updated_at=committed_at)
        .returning(INSTANCE.c.cancel_requested)
        .cte("fence")
    )
    taken = (
        update(SIGNAL)
        .where(waiting, select(fence.c.cancel_requested).exists())
        .values(taken_at=committed_at, taken_step_id=step_id)
        .returning(SIGNAL.c.id)
        .cte("taken")
    )
    inserted = journal_insert(taken, committed_at=committed_at, step_id=step_id)
    return select(
        fence.c.cancel_requested,
        select(func.count()).select_from(inserted).scalar_subquery().label("rows"),
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


class SqlMailbox(SqlRole):
    """The signal mailbox (:class:`app.engine.ports.Mailbox`) of
    :class:`app.store.sql_journal.SqlJournal`."""

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
            :class:`~app.engine.journal.Delivery`: the signal, whether it is new, the state
            the delivery found, and the claim when it made one.

        Raises:
            InstanceNotFound, InstanceEnded, JournalConflict: as :meth:`deliver_signal`.
        """
        return await self._deliver(signal, claim)

    async def _deliver(self, signal: NewSignal, claim_for: WakeClaim | None) -> Delivery:
        try:
            if self.is_postgresql:
                return await self._deliver_one_statement(signal, claim_for)
            return await self._deliver_transaction(signal, claim_for)
        except IntegrityError as exc:  # the signal id exists, or a repeat raced the insert
            return await self._repeat_after_race(
                signal.instance_id, signal.idempotency_key, signal.signal_id, exc
            )

    async def _repeat_after_race(
        self,
        instance_id: str,
        idempotency_key: str | None,
        signal_id: str,
        cause: BaseException | None,
    ) -> Delivery:
        """The answer of a delivery whose insert lost to a concurrent repeat of its key:
        that repeat's signal, committed by now.

        Raises:
            JournalConflict: no signal holds the key (the insert failed on ``signal_id``).
        """
        async with self._read() as conn:
            first = await self._signal_by_key(conn, instance_id, idempotency_key)
            state = (
                await conn.execute(select(INSTANCE.c.state).where(INSTANCE.c.id == instance_id))
            ).scalar_one_or_none()
        if first is not None and state is not None:
            return Delivery(first, False, InstanceState(state))
        raise JournalConflict(
            f"signal {signal_id!r} exists already", signal_id=signal_id
        ) from cause

    async def _deliver_one_statement(
        self, signal: NewSignal, claim_for: WakeClaim | None
    ) -> Delivery:
        """PostgreSQL: :meth:`deliver_and_claim` as one statement in autocommit."""
        instance_id, name, payload = signal.instance_id, signal.name, signal.payload
        idempotency_key, now, signal_id = (
            signal.idempotency_key,
            signal.received_at,
            signal.signal_id,
        )
        owner, lease_until, steps = (
            (claim_for.owner, claim_for.lease_until, claim_for.wake_steps)
            if claim_for is not None
            else ("", now, ())
        )
        params = {
            "d_id": instance_id,
            "d_key": idempotency_key,
            "d_signal": signal_id,
            "d_name": name,
            "d_payload": dict(payload),
            "d_now": now,
            "d_owner": owner,
            "d_lease": lease_until,
            "d_steps": list(steps),
        }
        async with self._single(write=True) as conn:
            row = (await conn.execute(_deliver_statement(), params)).first()
        if row is None:
            raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
        state = InstanceState(row.found_state)
        if row.first_signal is not None:
            return Delivery(signal_from_json(row.first_signal), False, state)
        if row.new_signal is None:
            if state.ended:
                raise _ended(instance_id, state.value)
            # a repeat of the key committed while this statement waited for the row: the
            # insert did nothing, and that repeat's signal is visible now
            return await self._repeat_after_race(instance_id, idempotency_key, signal_id, None)
        record = signal_from_json(row.new_signal)
        if row.id is None:
            return Delivery(record, True, state)
        if not row.current:  # the journal read may lack rows: the engine loads it
            return Delivery(record, True, state, Claim(row.id, row.fencing_token))
        # the claim's snapshot was read with the statement: it lacks the new signal
        snapshot = snapshot_from_row(row)
        mailbox = sorted([*snapshot.signals, record], key=lambda s: s.sequence)
        claim = Claim(row.id, row.fencing_token, replace(snapshot, signals=mailbox))
        return Delivery(record, True, state, claim)

    async def _deliver_transaction(
        self, signal: NewSignal, claim_for: WakeClaim | None
    ) -> Delivery:
        """:meth:`deliver_and_claim` as one write transaction (SQLite: one writer at a
        time, so nothing can come between the reads and the writes)."""
        instance_id, name, payload = signal.instance_id, signal.name, signal.payload
        idempotency_key, now, signal_id = (
            signal.idempotency_key,
            signal.received_at,
            signal.signal_id,
        )
        async with self._write() as conn:
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
            first = await self._signal_by_key(conn, instance_id, idempotency_key)
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
                [step_from_row(r) for r in steps],
                [signal_from_row(r) for r in mailbox],
            )
        return Delivery(record, True, state, Claim(instance_id, claimed.fencing_token, snapshot))

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

    async def _signal_by_key(
        self, conn: AsyncConnection, instance_id: str, idempotency_key: str | None
    ) -> SignalRecord | None:
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
        if self.is_postgresql:
            return await self._take_signal_one_statement(token, signal_id, row)
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
            await insert_step(conn, row, postgresql=self.is_postgresql)
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

    async def _take_signal_one_statement(self, token: int, signal_id: str, row: StepRow) -> Ack:
        """PostgreSQL: :meth:`take_signal` as one statement in autocommit (one round trip
        instead of five); when it writes nothing, a read says why."""
        params = {f"s_{k}": v for k, v in step_values(row).items()}
        params.update(f_id=row.instance_id, f_token=token, t_signal=signal_id)
        try:
            async with self._single(write=True) as conn:
                found = (await conn.execute(_take_signal_statement(), params)).first()
                if found is None:
                    await why(conn, row.instance_id, token)
                    raise signal_not_waiting(row.instance_id, signal_id)
        except IntegrityError as exc:
            raise JournalConflict(
                f"instance {row.instance_id!r}: step {row.step_id} scope {row.scope} "
                f"{row.kind} try {row.try_number} conflicts with the journal: {exc.orig}",
                instance_id=row.instance_id,
                step_id=row.step_id,
                scope=row.scope,
            ) from exc
        assert found.rows == 1  # the fence holds the instance row: nobody else takes it
        return Ack(applied=True, cancel_requested=found.cancel_requested)
