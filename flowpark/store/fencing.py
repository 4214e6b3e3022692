"""Fenced writes shared by the store's roles: the guarded ``UPDATE`` of the instance row
that every write of the lease holder starts with, the diagnosis when it matches nothing, and
the journal-row insert.

Writes for an instance are fenced: the ``flow_instance`` row is updated first, guarded by
``id``, the caller's fencing token and ``state = 'running'``; when that guard matches nothing
the write raises :class:`~flowpark.errors.StaleFencingToken` and its transaction rolls back, so
nothing is written.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy import Row, bindparam, case, func, insert, literal_column, null, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ClauseElement

from flowpark.engine.records import EmittedEvent, InstanceState, ReviewRequest, StepRow
from flowpark.errors import InstanceNotFound, StaleFencingToken
from flowpark.store.base import JournalConflict
from flowpark.store.mapping import EVENT, INSTANCE, REVIEW, STEP, step_values

__all__ = [
    "NEXT_SQLITE_SEQUENCE",
    "NO_TRY",
    "NO_LEASE",
    "RUNNING",
    "SUSPENDED",
    "after_commit",
    "fenced",
    "insert_step",
    "why",
]

RUNNING = InstanceState.RUNNING.value
SUSPENDED = InstanceState.SUSPENDED.value
NO_TRY: dict[str, Any] = {
    "try_step_id": None,
    "try_scope": None,
    "try_number": None,
    "try_started_at": None,
    "heartbeat_at": None,
    "heartbeat_value": None,
}
NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


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
        INSTANCE.c.state == RUNNING,
    ]
    if unless_cancelled:
        guard.append(INSTANCE.c.cancel_requested.is_(False))
    cols = [INSTANCE.c.cancel_requested, *(INSTANCE.c[name] for name in returning)]
    values = {k: bindparam(f"v_{k}", type_=INSTANCE.c[k].type) for k in keys}
    return update(INSTANCE).where(*guard).values(**values).returning(*cols)


# SQLite: a journal row's sequence is the rowid it gets (max + 1: the file has one writer
# at a time, so this is the commit order); PostgreSQL fills it from its identity.
NEXT_SQLITE_SEQUENCE = (
    select(func.coalesce(func.max(literal_column("rowid")), 0) + 1)
    .select_from(STEP)
    .scalar_subquery()
)


def after_commit(lease_until: Any, committed_at: Any) -> dict[str, Any]:
    """What a journal commit changes on the instance row: a heartbeating try in flight
    is cleared, and then the lease is renewed (from the attempt's heartbeat timeout back to
    a lease); a row with no try in flight changes nothing (a plain commit only fences,
    see :mod:`flowpark.store.batched`)."""
    busy = INSTANCE.c.try_step_id.is_not(None)
    return {
        "lease_expires_at": case((busy, lease_until), else_=INSTANCE.c.lease_expires_at),
        "updated_at": case((busy, committed_at), else_=INSTANCE.c.updated_at),
        **{k: null() for k in NO_TRY},
    }


async def fenced(
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
        guard.append(INSTANCE.c.state == RUNNING)
        if unless_cancelled:
            guard.append(INSTANCE.c.cancel_requested.is_(False))
        cols = [INSTANCE.c.cancel_requested, *(INSTANCE.c[name] for name in returning)]
        stmt = update(INSTANCE).where(*guard).values(**values).returning(*cols)
        row = (await conn.execute(stmt)).first()
    if row is not None:
        return row
    await why(conn, instance_id, token)
    return None  # unless_cancelled and the cancel flag is set


async def why(conn: AsyncConnection, instance_id: str, token: int) -> None:
    """After a fenced write matched nothing: raise when the fence itself failed.

    Raises:
        InstanceNotFound: no such instance.
        StaleFencingToken: ``token`` is not the current one, or the instance is not
            running; returns when it is (something else kept the write out).
    """
    current = (
        await conn.execute(
            select(INSTANCE.c.fencing_token, INSTANCE.c.state).where(INSTANCE.c.id == instance_id)
        )
    ).first()
    if current is None:
        raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
    if current.fencing_token != token or current.state != RUNNING:
        raise StaleFencingToken(
            f"instance {instance_id!r}: fencing token {token} refused "
            f"(current {current.fencing_token}, state {current.state})",
            instance_id=instance_id,
            token=token,
            current_token=current.fencing_token,
            state=current.state,
        )


async def insert_step(
    conn: AsyncConnection,
    row: StepRow,
    events: list[EmittedEvent] | None = None,
    reviews: list[ReviewRequest] | None = None,
    *,
    extra: dict[str, Any],
) -> None:
    """Insert a journal row with its outbox events and review items; ``extra``: the
    dialect's own values of the row (:meth:`flowpark.store.dialects.Dialect.sequence_values`).

    Raises:
        JournalConflict: the execution row, an event id or a review id exists already
            (the caller's transaction then rolls back).
    """
    values = {**step_values(row), **extra}
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
