"""``SqlJournal``: the SQL implementation of the engine's ``Journal`` protocol.

Each method is one transaction. Every instant comes from the caller (the engine clock, aware
UTC); the database's own ``now()`` is never used. Writes for an instance are fenced: the
``flow_instance`` row is updated first, guarded by ``id``, the caller's fencing token and
``state = 'running'``; when that guard matches nothing the method raises
:class:`~app.errors.StaleFencingToken` and the transaction rolls back, so nothing is written.

The operations live in mixins by concern: claims (:mod:`app.store.claims`), starts and
streams (:mod:`app.store.intake`), signals (:mod:`app.store.signals`), reads
(:mod:`app.store.reads`), and the fenced writes of the lease holder (here).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import cache, lru_cache
from typing import Any

from sqlalchemy import (
    Row,
    and_,
    bindparam,
    case,
    exists,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import ClauseElement

from app.engine.journal import (
    Ack,
    EmittedEvent,
    InstanceState,
    ReviewRequest,
    StepRow,
    WakeKind,
)
from app.errors import FlowFailure, InstanceNotFound, StaleFencingToken
from app.store.actions import SqlOperatorActions
from app.store.base import JournalConflict, instant
from app.store.batched import CommitItem, FinishItem, PgBatches, require_aware
from app.store.claims import SqlClaims
from app.store.intake import SqlIntake
from app.store.listing import SqlOperatorReads
from app.store.mapping import (
    EVENT,
    HEARTBEAT,
    INSTANCE,
    REVIEW,
    SIGNAL,
    STEP,
    failure_columns,
    journal_insert,
    step_values,
)
from app.store.overview import SqlOverviewReads
from app.store.reads import SqlReads
from app.store.signals import SqlSignals

__all__ = ["SqlJournal"]

_RUNNING = InstanceState.RUNNING.value
_SUSPENDED = InstanceState.SUSPENDED.value
_NO_ATTEMPT: dict[str, Any] = {
    "attempt_step_id": None,
    "attempt_scope": None,
    "attempt_try": None,
    "attempt_started_at": None,
    "heartbeat_at": None,
    "heartbeat_value": None,
}
_NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


@lru_cache(maxsize=256)
def _fenced_statement(
    keys: tuple[str, ...], unless_cancelled: bool, returning: tuple[str, ...]
) -> Any:
    """The fenced ``UPDATE flow_instance`` setting ``keys``, built once per shape (bound
    parameters ``f_id``, ``f_token`` and ``v_<column>``): building a statement costs more
    CPU than the round trip it saves."""
    guard = [
        INSTANCE.c.id == bindparam("f_id"),
        INSTANCE.c.fencing_token == bindparam("f_token"),
        INSTANCE.c.state == _RUNNING,
    ]
    if unless_cancelled:
        guard.append(INSTANCE.c.cancel_requested.is_(False))
    cols = [INSTANCE.c.cancel_requested, *(INSTANCE.c[name] for name in returning)]
    values = {k: bindparam(f"v_{k}", type_=INSTANCE.c[k].type) for k in keys}
    return update(INSTANCE).where(*guard).values(**values).returning(*cols)


def _after_commit(lease_until: Any, committed_at: Any) -> dict[str, Any]:
    """What a journal commit changes on the instance row: a heartbeating attempt in flight
    is cleared, and then the lease is renewed (from the attempt's heartbeat timeout back to
    a lease); a row with no attempt in flight changes nothing (a plain commit only fences,
    see :mod:`app.store.batched`)."""
    busy = INSTANCE.c.attempt_step_id.is_not(None)
    return {
        "lease_expires_at": case((busy, lease_until), else_=INSTANCE.c.lease_expires_at),
        "updated_at": case((busy, committed_at), else_=INSTANCE.c.updated_at),
        **{k: null() for k in _NO_ATTEMPT},
    }


@cache
def _commit_step_statement() -> Any:
    """``commit_step`` as one PostgreSQL statement, built once (bound parameters ``f_*`` for
    the fence, ``s_*`` for the journal row's columns)."""
    fence = (
        update(INSTANCE)
        .where(
            INSTANCE.c.id == bindparam("f_id"),
            INSTANCE.c.fencing_token == bindparam("f_token"),
            INSTANCE.c.state == _RUNNING,
        )
        .values(
            **_after_commit(
                bindparam("f_lease", type_=INSTANCE.c.lease_expires_at.type),
                bindparam("f_updated", type_=INSTANCE.c.updated_at.type),
            )
        )
        .returning(INSTANCE.c.cancel_requested)
        .cte("fence")
    )
    inserted = journal_insert(fence)
    return select(
        fence.c.cancel_requested, select(func.count()).select_from(inserted).scalar_subquery()
    )


# SQLite: a journal row's sequence is the rowid it gets (max + 1: the file has one writer
# at a time, so this is the commit order); PostgreSQL fills it from its identity.
_NEXT_SQLITE_SEQUENCE = (
    select(func.coalesce(func.max(literal_column("rowid")), 0) + 1)
    .select_from(STEP)
    .scalar_subquery()
)


class _Undo(Exception):  # control flow only: never escapes this module
    """Roll the transaction back and answer ``ack`` instead."""

    def __init__(self, ack: Ack) -> None:
        super().__init__(ack)
        self.ack = ack


class SqlJournal(
    SqlClaims,
    SqlIntake,
    SqlSignals,
    SqlReads,
    SqlOperatorReads,
    SqlOperatorActions,
    SqlOverviewReads,
    PgBatches,
):
    """The journal repository: every SQL statement flowpark runs lives in ``app.store``.

    Implements :class:`app.engine.journal.Journal`, plus read-side listings for the HTTP
    API (:meth:`list_reviews`, :meth:`list_events`, :meth:`list_signals`,
    :meth:`count_instances`, :meth:`ping`) and the operator's read model
    (:class:`app.store.read_model.OperatorReads`).

    Args:
        engine: an engine from :func:`app.store.db.make_async_engine`, migrated to head.
        on_batch: told ``(lane, size)`` for each group-commit batch on PostgreSQL (lanes
            ``create``, ``commit``, ``park``, ``finish``), e.g. for metrics.

    On PostgreSQL, concurrent starts, journal commits, parks and completions are grouped
    into one statement per batch (:mod:`app.store.batched`); each keeps its own fence.
    """

    def __init__(
        self, engine: AsyncEngine, *, on_batch: Callable[[str, int], None] | None = None
    ) -> None:
        super().__init__(engine)
        if self.is_postgresql:
            self._lanes = self._make_lanes(on_batch)

    async def _fenced(
        self,
        conn: AsyncConnection,
        instance_id: str,
        token: int,
        values: dict[str, Any],
        *,
        unless_cancelled: bool = False,
        returning: tuple[str, ...] = (),
    ) -> Row[Any] | None:
        """Apply ``values`` to the instance if ``token`` is current and it is running.

        Returns:
            The row of ``cancel_requested`` plus ``returning`` columns; None when
            ``unless_cancelled`` and a cancel was requested (nothing changed).

        Raises:
            InstanceNotFound: no such instance.
            StaleFencingToken: the token is not the current one, or the instance is no
                longer running (parked, ended or released).
        """
        if all(not isinstance(v, ClauseElement) for v in values.values()):
            stmt = _fenced_statement(tuple(values), unless_cancelled, returning)
            params = {f"v_{k}": v for k, v in values.items()}
            params.update(f_id=instance_id, f_token=token)
            row = (await conn.execute(stmt, params)).first()
        else:
            guard = [INSTANCE.c.id == instance_id, INSTANCE.c.fencing_token == token]
            guard.append(INSTANCE.c.state == _RUNNING)
            if unless_cancelled:
                guard.append(INSTANCE.c.cancel_requested.is_(False))
            cols = [INSTANCE.c.cancel_requested, *(INSTANCE.c[name] for name in returning)]
            stmt = update(INSTANCE).where(*guard).values(**values).returning(*cols)
            row = (await conn.execute(stmt)).first()
        if row is not None:
            return row
        await self._why(conn, instance_id, token)
        return None  # unless_cancelled and the cancel flag is set

    async def _why(self, conn: AsyncConnection, instance_id: str, token: int) -> None:
        """After a fenced write matched nothing: raise when the fence itself failed.

        Raises:
            InstanceNotFound: no such instance.
            StaleFencingToken: ``token`` is not the current one, or the instance is not
                running; returns when it is (something else kept the write out).
        """
        current = (
            await conn.execute(
                select(INSTANCE.c.fencing_token, INSTANCE.c.state).where(
                    INSTANCE.c.id == instance_id
                )
            )
        ).first()
        if current is None:
            raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
        if current.fencing_token != token or current.state != _RUNNING:
            raise StaleFencingToken(
                f"instance {instance_id!r}: fencing token {token} refused "
                f"(current {current.fencing_token}, state {current.state})",
                instance_id=instance_id,
                token=token,
                current_token=current.fencing_token,
                state=current.state,
            )

    async def _insert_step(
        self,
        conn: AsyncConnection,
        row: StepRow,
        events: list[EmittedEvent] | None = None,
        reviews: list[ReviewRequest] | None = None,
    ) -> None:
        """Insert a journal row with its outbox events and review items.

        Raises:
            JournalConflict: the execution row, an event id or a review id exists already
                (the caller's transaction then rolls back).
        """
        values = step_values(row)
        if not self.is_postgresql:
            values["sequence"] = _NEXT_SQLITE_SEQUENCE
        try:
            await conn.execute(insert(STEP).values(values))
            for event in events or ():
                await conn.execute(
                    insert(EVENT).values(
                        id=event.id,
                        instance_id=row.instance_id,
                        name=event.name,
                        payload=dict(event.payload),
                        created_at=row.committed_at,
                    )
                )
            for review in reviews or ():
                await conn.execute(
                    insert(REVIEW).values(
                        id=review.id,
                        instance_id=row.instance_id,
                        subject=review.subject,
                        reason=review.reason,
                        details=dict(review.details),
                        created_at=row.committed_at,
                    )
                )
        except IntegrityError as exc:
            raise JournalConflict(
                f"instance {row.instance_id!r}: step {row.step_id} scope {row.scope} "
                f"{row.kind} try {row.try_number} conflicts with the journal: {exc.orig}",
                instance_id=row.instance_id,
                step_id=row.step_id,
                scope=row.scope,
            ) from exc

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        """Extend the lease to ``lease_until``.

        Raises:
            StaleFencingToken: the token is stale or the instance no longer runs
                (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        async with self._single(write=True) as conn:  # one UPDATE
            row = await self._fenced(conn, instance_id, token, {"lease_expires_at": lease_until})
        assert row is not None
        return Ack(applied=True, cancel_requested=row.cancel_requested)

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
        fenced by ``token``. A heartbeating attempt in flight is cleared and the lease
        renewed to ``lease_until``; otherwise the instance row is unchanged (on
        PostgreSQL the fence is a ``FOR SHARE`` lock, and concurrent commits, outbox
        events included, share one statement; review items take a transaction of their
        own). The lease keeper, not the commits, keeps a long run's lease.

        Args:
            deferred: a row of the same instance that the run executed but did not write
                yet (:attr:`app.engine.runner.Run.unflushed`): appended before ``row``, in
                the same write (an emit's commit carries the step before it).

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
        if self.is_postgresql and not events and not reviews and deferred is None:
            return await self._commit_step_one_statement(token, row, lease_until)
        values = _after_commit(instant(lease_until), instant(row.committed_at))
        async with self._write() as conn:
            fence = await self._fenced(conn, row.instance_id, token, values)
            assert fence is not None
            if deferred is not None:
                await self._insert_step(conn, deferred)
            await self._insert_step(conn, row, events, reviews)
        return Ack(applied=True, cancel_requested=fence.cancel_requested)

    async def _commit_step_one_statement(
        self, token: int, row: StepRow, lease_until: datetime
    ) -> Ack:
        """PostgreSQL: the fenced UPDATE and the journal INSERT as one statement
        (``WITH fence AS (UPDATE ... RETURNING), ins AS (INSERT ... SELECT ... FROM fence)``)
        in autocommit: atomic, one round trip. No fence row: nothing inserted, and the
        usual diagnosis (stale token or no instance) follows."""
        params = {f"s_{k}": v for k, v in step_values(row).items()}
        params.update(
            f_id=row.instance_id, f_token=token, f_lease=lease_until, f_updated=row.committed_at
        )
        try:
            async with self._single(write=True) as conn:
                found = (await conn.execute(_commit_step_statement(), params)).first()
                if found is None:
                    # stale token or no instance (a token never becomes current again)
                    await self._fenced(
                        conn, row.instance_id, token, {"updated_at": row.committed_at}
                    )
                    raise AssertionError("fenced write matched nothing")  # pragma: no cover
        except IntegrityError as exc:
            raise JournalConflict(
                f"instance {row.instance_id!r}: step {row.step_id} scope {row.scope} "
                f"{row.kind} try {row.try_number} conflicts with the journal: {exc.orig}",
                instance_id=row.instance_id,
                step_id=row.step_id,
                scope=row.scope,
            ) from exc
        return Ack(applied=True, cancel_requested=found.cancel_requested)

    async def commit_and_park(
        self,
        token: int,
        row: StepRow,
        lease_until: datetime,
        *,
        owner: str,
        wake_at: datetime | None,
        wake_step_id: int,
        wake_scope: int,
        accept_signal: str | None = None,
        wake_kind: WakeKind | None = None,
    ) -> Ack:
        """:meth:`commit_step` of ``row`` then :meth:`park` at ``row.committed_at``, as one
        write where the store can (PostgreSQL: one statement per batch, one new version of
        the instance row).

        Args:
            owner: this node (the lease is given back to it when the park is refused).
            wake_at / wake_step_id / wake_scope / accept_signal / wake_kind: as for
                :meth:`park`.

        Returns:
            The row is committed in every case. ``Ack(applied=True)`` once parked;
            ``Ack(applied=False, cancel_requested=True)`` when a cancel was requested and
            ``Ack(applied=False, signal_pending=True)`` when an accepted signal waits: the
            instance stays running, leased to ``owner`` until ``lease_until`` (on
            PostgreSQL the refused park's ``wake_*`` are kept: where it would have waited;
            the run takes the signal there).

        Raises:
            StaleFencingToken, InstanceNotFound, JournalConflict: as :meth:`commit_step`
            (nothing written).
        """
        if self._lanes is not None:
            require_aware(row.started_at, row.committed_at, row.next_try_at, lease_until, wake_at)
            park = (
                row.committed_at,
                wake_at,
                wake_step_id,
                wake_scope,
                accept_signal,
                owner,
                wake_kind.value if wake_kind is not None else None,
            )
            answer = await self._lanes.park.submit(CommitItem(token, row, lease_until, park))
            if answer is not None:
                return Ack(
                    applied=answer.parked,
                    cancel_requested=answer.cancel_requested,
                    signal_pending=answer.signal_pending,
                )
        ack = await self.commit_step(token, row, lease_until)
        if ack.cancel_requested:
            return Ack(applied=False, cancel_requested=True)
        return await self.park(
            row.instance_id,
            token,
            row.committed_at,
            wake_at,
            wake_step_id,
            wake_scope,
            accept_signal,
            wake_kind=wake_kind,
        )

    async def park(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        wake_at: datetime | None,
        wake_step_id: int,
        wake_scope: int,
        accept_signal: str | None = None,
        wake_kind: WakeKind | None = None,
        unwinding: bool = False,
    ) -> Ack:
        """Suspend the instance until ``wake_at`` and release the lease.

        Args:
            wake_at: when the sweep should resume it; None parks it until a signal is
                delivered (the deliverer claims it) or a cancel is requested.
            wake_step_id / wake_scope: the node and scope to resume at.
            accept_signal: the name of the signal the parked node waits for; when such a
                signal is already in the mailbox, untaken, the park is not applied.
            wake_kind: what the instance waits for (the operator's list shows and filters
                it).
            unwinding: the instance unwinds (a compensation waits for its next try): the
                park applies even when a cancel was requested.

        Returns:
            ``Ack(applied=False, cancel_requested=True)`` when a cancel was requested;
            ``Ack(applied=False, signal_pending=True)`` when ``accept_signal`` is waiting
            (the engine takes it instead); nothing changed in both cases. ``Ack()`` once
            parked.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        values = {
            "state": _SUSPENDED,
            "wake_at": wake_at,
            "wake_step_id": wake_step_id,
            "wake_scope": wake_scope,
            "wake_kind": wake_kind.value if wake_kind is not None else None,
            "updated_at": now,
            **_NO_LEASE,
            **_NO_ATTEMPT,
        }
        if accept_signal is None:  # one UPDATE
            async with self._single(write=True) as conn:
                row = await self._fenced(
                    conn, instance_id, token, values, unless_cancelled=not unwinding
                )
            if row is None:
                return Ack(applied=False, cancel_requested=True)
            return Ack(applied=True, cancel_requested=False)
        try:
            async with self._write() as conn:
                row = await self._fenced(conn, instance_id, token, values, unless_cancelled=True)
                if row is None:
                    return Ack(applied=False, cancel_requested=True)
                # Checked *after* the UPDATE holds the instance row: a delivery (which locks
                # the row FOR NO KEY UPDATE until it commits) is either seen here or comes
                # after the park, and then finds the instance suspended and claims it.
                if accept_signal is not None and await self._signal_waiting(
                    conn, instance_id, accept_signal
                ):
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
            row = await self._fenced(conn, instance_id, token, values)
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
        """Write a final state, ``result`` (COMPLETED) or ``failure``; clear the wake, the
        lease, the attempt and ``ending``. In the same transaction, every signal still
        waiting untaken in the mailbox is marked discarded (``discarded_at`` = ``now``,
        ``discarded_reason`` = ``instance_<state>``): it will never be taken.

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
            **_NO_LEASE,
            **_NO_ATTEMPT,
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
            row = await self._fenced(conn, instance_id, token, values, unless_cancelled=completed)
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
        if row is None:
            return Ack(applied=False, cancel_requested=True)
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def release(self, instance_id: str, token: int, now: datetime) -> None:
        """Give up the lease: state back to suspended, wake unchanged.

        An instance with no wake, or with a cancel requested, is made due at ``now`` so the
        sweep picks it up again rather than leaving it parked forever.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        wake = case(
            (or_(INSTANCE.c.wake_at.is_(None), INSTANCE.c.cancel_requested), instant(now)),
            else_=INSTANCE.c.wake_at,
        )
        values = {"state": _SUSPENDED, "wake_at": wake, "updated_at": now, **_NO_LEASE}
        async with self._single(write=True) as conn:  # one UPDATE
            await self._fenced(conn, instance_id, token, values)

    async def start_attempt(
        self,
        instance_id: str,
        token: int,
        step_id: int,
        scope: int,
        try_number: int,
        now: datetime,
        lease_until: datetime,
    ) -> Ack:
        """Mark an attempt in flight (``attempt_*`` columns) and renew the lease.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        values = {
            **_NO_ATTEMPT,
            "attempt_step_id": step_id,
            "attempt_scope": scope,
            "attempt_try": try_number,
            "attempt_started_at": now,
            "lease_expires_at": lease_until,
            "updated_at": now,
        }
        async with self._single(write=True) as conn:  # one UPDATE
            row = await self._fenced(conn, instance_id, token, values)
        assert row is not None
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def record_heartbeat(
        self, instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
    ) -> Ack:
        """Persist ``value`` as the checkpoint of the attempt in flight (on the instance and
        in ``flow_heartbeat``) and renew the lease.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
            JournalConflict: no attempt is in flight (``start_attempt`` was not called).
        """
        values = {
            "heartbeat_at": now,
            "heartbeat_value": value,
            "lease_expires_at": lease_until,
            "updated_at": now,
        }
        attempt = ("attempt_step_id", "attempt_scope", "attempt_try")
        async with self._write() as conn:
            row = await self._fenced(conn, instance_id, token, values, returning=attempt)
            assert row is not None
            if row.attempt_step_id is None:
                raise JournalConflict(
                    f"instance {instance_id!r} has no attempt in flight to heartbeat",
                    instance_id=instance_id,
                )
            key = and_(
                HEARTBEAT.c.instance_id == instance_id,
                HEARTBEAT.c.step_id == row.attempt_step_id,
                HEARTBEAT.c.scope == row.attempt_scope,
            )
            checkpoint = {"try_number": row.attempt_try, "value": value, "recorded_at": now}
            # the fenced UPDATE above holds the instance row: no concurrent insert can race
            updated = await conn.execute(update(HEARTBEAT).where(key).values(**checkpoint))
            if updated.rowcount == 0:
                await conn.execute(
                    insert(HEARTBEAT).values(
                        instance_id=instance_id,
                        step_id=row.attempt_step_id,
                        scope=row.attempt_scope,
                        **checkpoint,
                    )
                )
        return Ack(applied=True, cancel_requested=row.cancel_requested)
