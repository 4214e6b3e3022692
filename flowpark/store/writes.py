"""The lease holder's journal (part of :class:`flowpark.engine.ports.RunStore` and
:class:`flowpark.engine.ports.Intake`): starts, the journal read back for a resume, fenced
commits, parks and endings, and a heartbeating try's checkpoints.

Each method is one transaction. Every instant comes from the caller (the engine clock, aware
UTC); the database's own ``now()`` is never used. Writes are fenced
(:mod:`flowpark.store.fencing`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, exists, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from flowpark.engine.ports.values import Park, TryMark
from flowpark.engine.records import (
    Ack,
    EmittedEvent,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    NewInstance,
    ReviewRequest,
    Snapshot,
    StepRow,
)
from flowpark.errors import FlowFailure
from flowpark.store.base import JournalConflict, SqlRole, instant
from flowpark.store.batched import require_aware
from flowpark.store.caller_tx import conflict_queries, resolve_conflict
from flowpark.store.carried import start_step_rows
from flowpark.store.correlations import release_correlations
from flowpark.store.fencing import (
    NO_LEASE,
    NO_TRY,
    SUSPENDED,
    after_commit,
    fenced,
    insert_step,
)
from flowpark.store.lanes import CommitItem, FinishItem
from flowpark.store.mapping import (
    HEARTBEAT,
    INSTANCE,
    SIGNAL,
    failure_columns,
    heartbeat_from_row,
    instance_from_new,
    instance_values,
)
from flowpark.store.reads import load_snapshot
from flowpark.store.types import is_instance_id

__all__ = ["SqlJournalWrites"]


class _Undo(Exception):  # control flow only: never escapes this module
    """Roll the transaction back and answer ``ack`` instead."""

    def __init__(self, ack: Ack) -> None:
        super().__init__(ack)
        self.ack = ack


def park_values(park: Park, at: datetime) -> dict[str, Any]:
    """The instance columns a park sets (state suspended, the wake, no lease, no try)."""
    return {
        "state": SUSPENDED,
        "wake_at": park.wake_at,
        "wake_step_id": park.step_id,
        "wake_scope": park.scope,
        "wake_kind": park.kind.value if park.kind is not None else None,
        "woken": park.woken,
        "updated_at": at,
        **NO_LEASE,
        **NO_TRY,
    }


class SqlJournalWrites(SqlRole):
    """The lease holder's journal of :class:`flowpark.store.sql_store.SqlStore`."""

    async def create_instance(self, new: NewInstance) -> tuple[InstanceRecord, bool]:
        """Insert a running instance leased to ``new.lease_owner`` (fencing token 1) with its
        idempotency and instance keys; or return the instance the idempotency key made.

        One INSERT (``ON CONFLICT DO NOTHING``); on PostgreSQL concurrent starts share one
        statement (:mod:`flowpark.store.lanes`). Only a start that conflicts reads what holds
        its key.

        Returns:
            ``(record, created)``; ``created`` is False for an idempotent repeat. A created
            record is built from ``new`` (what the INSERT wrote), not read back.

        Raises:
            IdempotencyKeyReused: the key was used for this flow with another request:
                another input or instance key (:meth:`NewInstance.repeats`; code
                ``idempotency_key_reused``).
            InstanceKeyInUse: a running or suspended instance of the flow holds
                ``instance_key`` (code ``instance_key_in_use``).
            JournalConflict: the instance id exists already.
            ValueError: ``new.id`` is not a canonical UUID string (see ``Engine``'s
                ``id_factory``).
        """
        if not is_instance_id(new.id):
            raise ValueError(f"instance ids are canonical UUID strings, got {new.id!r}")
        for _ in range(3):  # a key holder that ended between the INSERT and the read: again
            created = None
            if self._lanes is not None:
                require_aware(new.created_at, new.deadline_at, new.lease_expires_at)
                created = await self._lanes.create.submit(new)
            if created is None:
                async with self._write() as conn:  # RETURNING: psycopg's rowcount is -1
                    inserted = await conn.execute(
                        self._dialect.insert(INSTANCE)
                        .values(instance_values(new))
                        .on_conflict_do_nothing()
                        .returning(INSTANCE.c.id)
                    )
                    created = inserted.first() is not None
                    for row in start_step_rows(new) if created else ():
                        await insert_step(conn, row, extra=self._dialect.sequence_values())
            if created:
                return instance_from_new(new), True
            async with self._read() as conn:
                existing = await self._existing_start(conn, new)
                if existing is not None:
                    return existing, False
                taken = (
                    await conn.execute(select(INSTANCE.c.id).where(INSTANCE.c.id == new.id))
                ).first()
            if taken is not None:
                break
        raise JournalConflict(
            f"cannot start instance {new.id!r}: its id, idempotency key or instance key conflicts",
            instance_id=new.id,
        )

    async def _existing_start(
        self, conn: AsyncConnection, new: NewInstance, cause: BaseException | None = None
    ) -> InstanceRecord | None:
        """The instance an earlier start made for ``new``'s idempotency key, or None.

        The instance-key holder is read *before* the idempotency record: a start writes
        both in one transaction, so under READ COMMITTED a holder seen by the first
        statement guarantees its idempotency record is seen by the second (the other order
        could report ``InstanceKeyInUse`` for an idempotent repeat racing its original).

        Raises:
            IdempotencyKeyReused: the key was used with another input or instance key
                (the stored row's ``input`` and ``instance_key`` are the request).
            InstanceKeyInUse: an active instance holds the key and the idempotency key does
                not name it.
        """
        holder_q, first_q = conflict_queries(self._dialect, new)
        holder = None if holder_q is None else (await conn.execute(holder_q)).first()
        first = None if first_q is None else (await conn.execute(first_q)).first()
        return resolve_conflict(new, holder, first, cause)

    async def load(self, instance_id: str) -> Snapshot:
        """Read the instance, its journal (commit order) and its untaken signals (arrival
        order), from one snapshot.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        return await load_snapshot(self, instance_id)

    async def last_heartbeat(self, instance_id: str, step_id: int, scope: int) -> Heartbeat | None:
        """The checkpoint the latest try of ``(step_id, scope)`` recorded, or None."""
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(HEARTBEAT).where(
                        HEARTBEAT.c.instance_id == instance_id,
                        HEARTBEAT.c.step_id == step_id,
                        HEARTBEAT.c.scope == scope,
                    )
                )
            ).first()
        return heartbeat_from_row(row) if row is not None else None

    async def commit_step(
        self,
        token: int,
        row: StepRow,
        lease_until: datetime,
        events: list[EmittedEvent] | None = None,
        reviews: list[ReviewRequest] | None = None,
        *,
        deferred: StepRow | None = None,
    ) -> Ack:
        """Append ``row`` with its outbox events and review items, in one transaction,
        fenced by ``token``. A heartbeating try in flight is cleared and the lease
        renewed to ``lease_until``; otherwise the instance row is unchanged (on
        PostgreSQL the fence is a ``FOR SHARE`` lock, and concurrent commits, outbox
        events included, share one statement; review items take a transaction of their
        own). The lease keeper, not the commits, keeps a long run's lease.

        Args:
            deferred: a row the run executed but did not write yet (``Executor.unflushed``),
                appended before ``row`` in the same write (an emit carries the step before).

        Returns:
            ``Ack(applied=True, cancel_requested=<the instance's flag>)``.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``); nothing
                written.
            InstanceNotFound: no such instance.
            JournalConflict: the execution row (or an event or review id) exists already;
                nothing written.
        """
        if deferred is not None and deferred.instance_id != row.instance_id:
            raise ValueError("a deferred row must belong to the row's instance")
        if self._lanes is not None and not reviews:
            require_aware(row.started_at, row.committed_at, row.next_try_at, lease_until)
            if deferred is not None:
                require_aware(deferred.started_at, deferred.committed_at, deferred.next_try_at)
            answer = await self._lanes.commit.submit(
                CommitItem(token, row, lease_until, events=tuple(events or ()), deferred=deferred)
            )
            if answer is not None:
                return Ack(applied=True, cancel_requested=answer.cancel_requested)
        if not events and not reviews and deferred is None:
            ack = await self._dialect.commit_step(self, token, row, lease_until)
            if ack is not None:
                return ack
        values = after_commit(instant(lease_until), instant(row.committed_at))
        async with self._write() as conn:
            fence = await fenced(conn, row.instance_id, token, values)
            assert fence is not None
            if deferred is not None:
                await insert_step(conn, deferred, extra=self._dialect.sequence_values())
            await insert_step(conn, row, events, reviews, extra=self._dialect.sequence_values())
        return Ack(applied=True, cancel_requested=fence.cancel_requested)

    async def _commit_and_park(
        self, token: int, row: StepRow, lease_until: datetime, park: Park, at: datetime
    ) -> Ack:
        """:meth:`commit_step` of ``row`` then :meth:`_park` at ``at``, as one write where
        the store can (PostgreSQL: one statement per batch, one new version of the
        instance row).

        Returns:
            The row is committed in every case. ``Ack(applied=True)`` once parked;
            ``Ack(applied=False, cancel_requested=True)`` when a cancel was requested and
            ``Ack(applied=False, signal_pending=True)`` when an accepted signal waits: the
            instance stays running, leased to ``park.owner`` until ``lease_until`` (on
            PostgreSQL the refused park's ``wake_*`` are kept: where it would have waited;
            the run takes the signal there).

        Raises:
            StaleFencingToken, InstanceNotFound, JournalConflict: as :meth:`commit_step`
            (nothing written).
        """
        if self._lanes is not None:
            require_aware(row.started_at, row.committed_at, row.next_try_at, lease_until)
            require_aware(park.wake_at, at)
            parking = (
                at,
                park.wake_at,
                park.step_id,
                park.scope,
                park.accept_signal,
                park.owner,
                park.kind.value if park.kind is not None else None,
                park.woken,
            )
            answer = await self._lanes.park.submit(CommitItem(token, row, lease_until, parking))
            if answer is not None:
                return Ack(
                    applied=answer.parked,
                    cancel_requested=answer.cancel_requested,
                    signal_pending=answer.signal_pending,
                )
        ack = await self.commit_step(token, row, lease_until)
        if ack.cancel_requested:
            return Ack(applied=False, cancel_requested=True)
        return await self._park(row.instance_id, token, at, park)

    async def _park(self, instance_id: str, token: int, at: datetime, park: Park) -> Ack:
        """Suspend the instance as ``park`` says and release the lease.

        ``park.wake_at`` None parks it until a signal is delivered (the deliverer claims
        it) or a cancel is requested; when ``park.accept_signal`` is waiting untaken in
        the mailbox the park is not applied; ``park.unwinding`` applies it even when a
        cancel was requested.

        Returns:
            ``Ack(applied=False, cancel_requested=True)`` when a cancel was requested;
            ``Ack(applied=False, signal_pending=True)`` when ``accept_signal`` is waiting
            (the engine takes it instead); nothing changed in both cases. ``Ack()`` once
            parked.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        values = park_values(park, at)
        accept_signal, unwinding = park.accept_signal, park.unwinding
        if accept_signal is None:  # one UPDATE
            async with self._single(write=True) as conn:
                row = await fenced(conn, instance_id, token, values, unless_cancelled=not unwinding)
            if row is None:
                return Ack(applied=False, cancel_requested=True)
            return Ack(applied=True, cancel_requested=False)
        try:
            async with self._write() as conn:
                row = await fenced(conn, instance_id, token, values, unless_cancelled=True)
                if row is None:
                    return Ack(applied=False, cancel_requested=True)
                # Checked *after* the UPDATE holds the instance row: a delivery (which locks
                # the row FOR NO KEY UPDATE until it commits) is either seen here or comes
                # after the park, and then finds the instance suspended and claims it.
                if await self._signal_waiting(conn, instance_id, accept_signal):
                    raise _Undo(Ack(applied=False, signal_pending=True))
        except _Undo as undo:
            return undo.ack
        return Ack(applied=True, cancel_requested=False)

    async def _signal_waiting(self, conn: AsyncConnection, instance_id: str, name: str) -> bool:
        waiting = select(
            exists().where(
                SIGNAL.c.instance_id == instance_id,
                SIGNAL.c.name == name,
                SIGNAL.c.taken_at.is_(None),
            )
        )
        return bool((await conn.execute(waiting)).scalar_one())

    async def begin_ending(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        ending: InstanceState,
        failure: FlowFailure | None,
    ) -> Ack:
        """Record that the instance unwinds towards ``ending`` (FAILED or CANCELLED), with
        its failure (``error_*`` columns) when given.

        Raises:
            ValueError: ``ending`` is not FAILED or CANCELLED.
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        ending = InstanceState(ending)
        if ending not in (InstanceState.FAILED, InstanceState.CANCELLED):
            raise ValueError(f"an instance can only end towards failed or cancelled: {ending}")
        values = {"ending": ending.value, "updated_at": now, **failure_columns(failure)}
        async with self._single(write=True) as conn:  # one UPDATE
            row = await fenced(conn, instance_id, token, values)
        assert row is not None
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def finish(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        state: InstanceState,
        result: Any = None,
        failure: FlowFailure | None = None,
    ) -> Ack:
        """Write a final state, ``result`` (COMPLETED) or ``failure``; clear the wake (and an
        operator's mark), the lease, the try and ``ending``. In the same transaction, every
        signal still waiting untaken in the mailbox is marked discarded (``discarded_at`` =
        ``now``, ``discarded_reason`` = ``instance_<state>``): it will never be taken; and
        the correlation keys the instance holds are released.

        Returns:
            For COMPLETED, ``Ack(applied=False, cancel_requested=True)`` and nothing changed
            when a cancel was requested. FAILED and CANCELLED always apply.

        Raises:
            ValueError: ``state`` is not a final state.
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        state = InstanceState(state)
        if not state.ended:
            raise ValueError(f"finish needs a final state, got {state}")
        values: dict[str, Any] = {
            "state": state.value,
            "updated_at": now,
            "ending": None,
            "wake_at": None,
            "wake_step_id": None,
            "wake_scope": None,
            "wake_kind": None,
            "woken": False,
            **NO_LEASE,
            **NO_TRY,
            **failure_columns(failure),
        }
        completed = state == InstanceState.COMPLETED
        if completed and failure is None and self._lanes is not None:
            require_aware(now)
            done = await self._lanes.finish.submit(FinishItem(instance_id, token, now, result))
            if done:
                return Ack(applied=True, cancel_requested=False)
        if completed:
            values["result"] = result
        async with self._write() as conn:  # the UPDATE, and the mailbox's discards with it
            row = await fenced(conn, instance_id, token, values, unless_cancelled=completed)
            if row is not None:
                await conn.execute(
                    update(SIGNAL)
                    .where(
                        SIGNAL.c.instance_id == instance_id,
                        SIGNAL.c.taken_at.is_(None),
                        SIGNAL.c.discarded_at.is_(None),
                    )
                    .values(discarded_at=now, discarded_reason=f"instance_{state.value}")
                )
                await release_correlations(conn, instance_id)
        if row is None:
            return Ack(applied=False, cancel_requested=True)
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def start_try(
        self, instance_id: str, token: int, mark: TryMark, lease_until: datetime
    ) -> Ack:
        """Mark a heartbeating try in flight (``try_*`` columns) and renew the lease.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        values = {
            **NO_TRY,
            "try_step_id": mark.step_id,
            "try_scope": mark.scope,
            "try_number": mark.try_number,
            "try_started_at": mark.started_at,
            "lease_expires_at": lease_until,
            "updated_at": mark.started_at,
        }
        async with self._single(write=True) as conn:  # one UPDATE
            row = await fenced(conn, instance_id, token, values)
        assert row is not None
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def record_heartbeat(
        self, instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
    ) -> Ack:
        """Persist ``value`` as the checkpoint of the try in flight (on the instance and
        in ``flow_heartbeat``) and renew the lease.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
            JournalConflict: no try is in flight (``start_try`` was not called).
        """
        values = {
            "heartbeat_at": now,
            "heartbeat_value": value,
            "lease_expires_at": lease_until,
            "updated_at": now,
        }
        in_flight = ("try_step_id", "try_scope", "try_number")
        async with self._write() as conn:
            row = await fenced(conn, instance_id, token, values, returning=in_flight)
            assert row is not None
            if row.try_step_id is None:
                raise JournalConflict(
                    f"instance {instance_id!r} has no try in flight to heartbeat",
                    instance_id=instance_id,
                )
            key = and_(
                HEARTBEAT.c.instance_id == instance_id,
                HEARTBEAT.c.step_id == row.try_step_id,
                HEARTBEAT.c.scope == row.try_scope,
            )
            checkpoint = {"try_number": row.try_number, "value": value, "recorded_at": now}
            # the fenced UPDATE above holds the instance row: no concurrent insert can race
            updated = await conn.execute(update(HEARTBEAT).where(key).values(**checkpoint))
            if updated.rowcount == 0:
                await conn.execute(
                    insert(HEARTBEAT).values(
                        instance_id=instance_id,
                        step_id=row.try_step_id,
                        scope=row.try_scope,
                        **checkpoint,
                    )
                )
        return Ack(applied=True, cancel_requested=row.cancel_requested)
