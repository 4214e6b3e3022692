"""PostgreSQL, the store of several nodes: claims with ``FOR UPDATE SKIP LOCKED``, the hot
writes as one statement each in autocommit (a fenced commit, a signal's take, a delivery
that claims, a load with its journal as JSON arrays), group commit over the lanes of
:mod:`flowpark.store.batched`, advisory locks for the jobs one node runs at a time, and
REPEATABLE READ for reads of several statements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any

from sqlalchemy import (
    JSON,
    Integer,
    String,
    Table,
    and_,
    any_,
    bindparam,
    exists,
    func,
    literal_column,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import Select

from flowpark.engine.ports.values import NewSignal, WakeClaim
from flowpark.engine.records import (
    Ack,
    Claim,
    Delivery,
    InstanceState,
    NewInstance,
    Snapshot,
    StepRow,
)
from flowpark.errors import InstanceEnded, InstanceNotFound
from flowpark.store.base import Dialect, JournalConflict, SqlContext, SqlRole, const
from flowpark.store.batched import PgBatches
from flowpark.store.claims import claim_due_pick_in_order, claim_due_update, claim_values
from flowpark.store.db import READ_ONLY
from flowpark.store.fencing import RUNNING, after_commit, fenced, why
from flowpark.store.lanes import Lanes
from flowpark.store.mapping import (
    INSTANCE,
    SIGNAL,
    STEP,
    journal_aggregates,
    journal_insert,
    signal_from_json,
    snapshot_from_row,
    step_values,
)
from flowpark.store.signals import repeat_after_race, signal_not_waiting
from flowpark.store.tables import IDEMPOTENCY_DIGEST_SQL, idempotency_digest_sql
from flowpark.store.types import UtcDateTime

__all__ = ["PostgresDialect"]

_RUNNING = RUNNING
_ENDED = tuple(s.value for s in InstanceState if s.ended)
_DIGEST_OF_PARAMS = idempotency_digest_sql("CAST(:d_flow AS text)", "CAST(:d_key AS text)")


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
    token, no instance, or the signal is unknown or taken: see :meth:`SqlStore._why`).
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


@cache
def _claim_due_statement() -> Any:
    """``claim_due`` as one statement, built once (bound parameters of
    :func:`~flowpark.store.claims.claim_due_pick_in_order`): the pick skips rows other claims
    hold and reads about as many rows as it takes, and
    the claimed rows come back whole, with their journals and mailboxes: the runs need no
    load of their own (the lease keeps the journal as read). A sub-select in RETURNING
    reads the statement's snapshot, i.e. the row before this claim: it tells a lease
    takeover (the row was running) from a wake."""
    stmt = claim_due_update(claim_due_pick_in_order())
    steps, signals = journal_aggregates()
    before = INSTANCE.alias("before")
    was_running = select(before.c.state).where(
        before.c.id == INSTANCE.c.id
    ).scalar_subquery() == const(_RUNNING)
    return stmt.returning(
        *INSTANCE.c,
        steps.label("j_steps"),
        signals.label("j_signals"),
        was_running.label("taken_over"),
    )


@cache
def _load_statement() -> Any:
    """PostgreSQL ``load`` as one statement, built once (bound parameter ``id``)."""
    steps, signals = journal_aggregates()
    return select(INSTANCE, steps.label("j_steps"), signals.label("j_signals")).where(
        INSTANCE.c.id == bindparam("id")
    )


@cache
def _commit_step_statement() -> Any:
    """``commit_step`` as one PostgreSQL statement, built once (bound parameters ``f_*`` for
    the fence, ``s_*`` for the journal row's columns)."""
    fence = (
        update(INSTANCE)
        .where(
            INSTANCE.c.id == bindparam("f_id"),
            INSTANCE.c.fencing_token == bindparam("f_token"),
            INSTANCE.c.state == RUNNING,
        )
        .values(
            **after_commit(
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


class PostgresDialect(Dialect):
    """PostgreSQL (see the module)."""

    name = "postgresql"
    # several SELECTs in one read (load) must see one snapshot
    read_options: dict[str, object] = {**READ_ONLY, "isolation_level": "REPEATABLE READ"}

    def single_engine(self, engine: AsyncEngine) -> AsyncEngine | None:
        """Autocommit: the statement is atomic and sees one snapshot by itself, and BEGIN
        and COMMIT would cost two round trips more than the statement (the hot paths:
        get_instance after a start, claims, counts)."""
        return engine.execution_options(isolation_level="AUTOCOMMIT", **READ_ONLY)

    def make_lanes(
        self, context: SqlContext, on_batch: Callable[[str, int], None] | None
    ) -> Lanes | None:
        """Group commit: concurrent starts, commits, parks and completions share one
        statement per batch (:mod:`flowpark.store.batched`)."""
        return PgBatches(context).make_lanes(on_batch)

    def insert(self, table: Table) -> Any:
        """PostgreSQL's INSERT (``ON CONFLICT``)."""
        return pg_insert(table)

    def locked(self, query: Select[Any], *, skip_locked: bool = False, of: Any = None) -> Any:
        """``SELECT ... FOR UPDATE [SKIP LOCKED] [OF ...]``."""
        return query.with_for_update(skip_locked=skip_locked, of=of)

    async def try_lock(self, conn: AsyncConnection, key: int) -> bool:
        """``pg_try_advisory_xact_lock(key)``: held until the transaction ends."""
        got = await conn.execute(text("SELECT pg_try_advisory_xact_lock(:key)"), {"key": key})
        return bool(got.scalar_one())

    def by_idempotency_key(self, query: Select[Any], new: NewInstance) -> Select[Any]:
        """Through the digest index (the texts, compared too, confirm the match)."""
        assert new.idempotency_key is not None
        return query.where(
            text(f"{IDEMPOTENCY_DIGEST_SQL} = {_DIGEST_OF_PARAMS}").bindparams(
                d_flow=new.flow_name, d_key=new.idempotency_key
            )
        )

    async def claim_due(self, role: SqlRole, params: dict[str, Any]) -> list[Claim]:
        """One ``UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING``
        that brings the claimed rows back whole, with their journals and mailboxes."""
        async with role._single(write=True) as conn:
            rows = (await conn.execute(_claim_due_statement(), params)).all()
        now = params["c_now"]
        # RETURNING has no order: restore the pick's (expired leases without a wake first)
        ordered = sorted(rows, key=lambda r: (r.wake_at is not None, r.wake_at or now, r.id))
        return [
            Claim(r.id, r.fencing_token, snapshot_from_row(r), taken_over=bool(r.taken_over))
            for r in ordered
        ]

    async def load(self, role: SqlRole, instance_id: str) -> Snapshot:
        """One statement (autocommit, one round trip), the journal and the signals
        aggregated as JSON arrays."""
        async with role._single(write=False) as conn:
            row = (await conn.execute(_load_statement(), {"id": instance_id})).first()
        if row is None:
            raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
        return snapshot_from_row(row)

    async def commit_step(
        self, role: SqlRole, token: int, row: StepRow, lease_until: Any
    ) -> Ack | None:
        """PostgreSQL: the fenced UPDATE and the journal INSERT as one statement
        (``WITH fence AS (UPDATE ... RETURNING), ins AS (INSERT ... SELECT ... FROM fence)``)
        in autocommit: atomic, one round trip. No fence row: nothing inserted, and the
        usual diagnosis (stale token or no instance) follows."""
        params = {f"s_{k}": v for k, v in step_values(row).items()}
        params.update(
            f_id=row.instance_id, f_token=token, f_lease=lease_until, f_updated=row.committed_at
        )
        try:
            async with role._single(write=True) as conn:
                found = (await conn.execute(_commit_step_statement(), params)).first()
                if found is None:
                    # stale token or no instance (a token never becomes current again)
                    await fenced(conn, row.instance_id, token, {"updated_at": row.committed_at})
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

    async def take_signal(
        self, role: SqlRole, token: int, signal_id: str, row: StepRow
    ) -> Ack | None:
        """A take as one statement in autocommit (one round trip instead of five); when it
        writes nothing, a read says why."""
        params = {f"s_{k}": v for k, v in step_values(row).items()}
        params.update(f_id=row.instance_id, f_token=token, t_signal=signal_id)
        try:
            async with role._single(write=True) as conn:
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

    async def deliver(
        self, role: SqlRole, signal: NewSignal, claim_for: WakeClaim | None
    ) -> Delivery:
        """:meth:`~flowpark.store.signals.SqlMailbox.deliver_and_claim` as one statement in
        autocommit (the instance row locked ``FOR NO KEY UPDATE``: a concurrent park
        either sees the signal or is seen suspended here)."""
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
        async with role._single(write=True) as conn:
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
            return await repeat_after_race(role, instance_id, idempotency_key, signal_id, None)
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
