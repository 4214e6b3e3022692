"""Writes that come from outside a lease: starts and stream messages (signal deliveries:
:mod:`app.store.signals`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    func,
    insert,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from app.engine.journal import (
    InstanceRecord,
    InstanceState,
    NewInstance,
)
from app.errors import (
    IdempotencyKeyReused,
    InstanceKeyInUse,
    InstanceNotFound,
    StaleFencingToken,
)
from app.store.base import JournalConflict, SqlBase, const
from app.store.batched import require_aware
from app.store.mapping import (
    INSTANCE,
    STREAM,
    instance_from_new,
    instance_from_row,
    instance_values,
)
from app.store.tables import ACTIVE_STATES, IDEMPOTENCY_DIGEST_SQL, idempotency_digest_sql
from app.store.types import is_instance_id

__all__ = ["SqlIntake"]

_DIGEST_OF_PARAMS = idempotency_digest_sql("CAST(:d_flow AS text)", "CAST(:d_key AS text)")


class SqlIntake(SqlBase):
    """Start and stream operations of :class:`app.store.sql_journal.SqlJournal`."""

    async def create_instance(self, new: NewInstance) -> tuple[InstanceRecord, bool]:
        """Insert a running instance leased to ``new.lease_owner`` (fencing token 1) with its
        idempotency and instance keys; or return the instance the idempotency key made.

        One INSERT (``ON CONFLICT DO NOTHING``); on PostgreSQL concurrent starts share one
        statement (:mod:`app.store.lanes`). Only a start that conflicts reads what holds
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
                insert_ = pg_insert if self.is_postgresql else sqlite_insert
                async with self._write() as conn:  # RETURNING: psycopg's rowcount is -1
                    inserted = await conn.execute(
                        insert_(INSTANCE)
                        .values(instance_values(new))
                        .on_conflict_do_nothing()
                        .returning(INSTANCE.c.id)
                    )
                    created = inserted.first() is not None
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
        holder = None
        if new.instance_key is not None:
            holder = (
                await conn.execute(
                    select(INSTANCE.c.id).where(
                        INSTANCE.c.flow_name == new.flow_name,
                        INSTANCE.c.instance_key == new.instance_key,
                        INSTANCE.c.state.in_([const(s) for s in ACTIVE_STATES]),
                    )
                )
            ).first()
        if new.idempotency_key is not None:
            stmt = select(INSTANCE).where(
                INSTANCE.c.flow_name == new.flow_name,
                INSTANCE.c.idempotency_key == new.idempotency_key,
            )
            if self.is_postgresql:  # through the digest index (the texts confirm it)
                stmt = stmt.where(
                    text(f"{IDEMPOTENCY_DIGEST_SQL} = {_DIGEST_OF_PARAMS}").bindparams(
                        d_flow=new.flow_name, d_key=new.idempotency_key
                    )
                )
            record = (await conn.execute(stmt)).first()
            if record is not None:
                if not new.repeats(record.input, record.instance_key):
                    raise IdempotencyKeyReused(
                        f"idempotency key {new.idempotency_key!r} of flow {new.flow_name!r} "
                        "was used with a different request",
                        flow=new.flow_name,
                        idempotency_key=new.idempotency_key,
                        instance_id=record.id,
                    ) from cause
                return instance_from_row(record)
        if holder is not None:
            raise InstanceKeyInUse(
                f"instance key {new.instance_key!r} of flow {new.flow_name!r} is held by "
                f"instance {holder.id!r}",
                flow=new.flow_name,
                instance_key=new.instance_key,
                instance_id=holder.id,
            ) from cause
        return None

    async def write_stream(
        self,
        instance_id: str,
        stream: str,
        payload: Any,
        size: int,
        max_bytes: int,
        now: datetime,
        *,
        token: int | None = None,
    ) -> bool:
        """Append a stream message unless the stream's total ``size`` would pass
        ``max_bytes``.

        Args:
            size: the message's size in bytes (as the caller measured it).
            max_bytes: the bound on the sum of ``size`` over the stream.
            token: the writer's fencing token; when given, the instance must be running
                under it (a try whose lease another node took over writes nothing).

        Returns:
            Whether the message was stored (False: dropped at the bound).

        Raises:
            InstanceNotFound: no such instance.
            StaleFencingToken: ``token`` is not current or the instance no longer runs
                (code ``stale_fencing_token``); nothing written.
        """
        async with self._write() as conn:
            lock = select(INSTANCE.c.fencing_token, INSTANCE.c.state).where(
                INSTANCE.c.id == instance_id
            )
            if self.is_postgresql:
                lock = lock.with_for_update()  # serialise writers of one instance's streams
            current = (await conn.execute(lock)).first()
            if current is None:
                raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
            if token is not None and (
                current.fencing_token != token or current.state != InstanceState.RUNNING.value
            ):
                raise StaleFencingToken(
                    f"instance {instance_id!r}: stream write with fencing token {token} "
                    f"refused (current {current.fencing_token}, state {current.state})",
                    instance_id=instance_id,
                    token=token,
                    current_token=current.fencing_token,
                    state=current.state,
                )
            used = (
                await conn.execute(
                    select(func.coalesce(func.sum(STREAM.c.size), 0)).where(
                        STREAM.c.instance_id == instance_id, STREAM.c.stream == stream
                    )
                )
            ).scalar_one()
            if int(used) + size > max_bytes:
                return False
            await conn.execute(
                insert(STREAM).values(
                    instance_id=instance_id,
                    stream=stream,
                    payload=payload,
                    size=size,
                    created_at=now,
                )
            )
        return True
