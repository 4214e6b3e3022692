"""Stream messages (:class:`flowpark.engine.ports.Streams`): best-effort, size-bounded
progress messages of an instance, written by its tries and read over HTTP."""

from __future__ import annotations

from sqlalchemy import func, insert, select

from flowpark.engine.ports.values import StreamWrite
from flowpark.engine.records import InstanceState, StreamMessage
from flowpark.errors import InstanceNotFound, StaleFencingToken
from flowpark.store.base import SqlRole
from flowpark.store.mapping import INSTANCE, STREAM, stream_from_row

__all__ = ["SqlStreams"]


class SqlStreams(SqlRole):
    """The streams of :class:`flowpark.store.sql_store.SqlStore`."""

    async def write_stream(
        self, message: StreamWrite, max_bytes: int, *, token: int | None = None
    ) -> bool:
        """Append ``message`` unless the stream's total ``size`` would pass ``max_bytes``.

        Args:
            message: the message, with its size in bytes (as the caller measured it).
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
        instance_id, stream, size = message.instance_id, message.stream, message.size
        async with self._write() as conn:
            lock = select(INSTANCE.c.fencing_token, INSTANCE.c.state).where(
                INSTANCE.c.id == instance_id
            )
            lock = self._dialect.locked(lock)  # serialise writers of one instance's streams
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
                    payload=message.payload,
                    size=size,
                    created_at=message.at,
                )
            )
        return True

    async def read_stream(
        self, instance_id: str, stream: str, after: int | None = None
    ) -> list[StreamMessage]:
        """Messages of one stream in write order.

        Args:
            instance_id: the instance.
            stream: the stream's name.
            after: only messages with a greater ``sequence`` (a reader's cursor).
        """
        query = select(STREAM).where(STREAM.c.instance_id == instance_id, STREAM.c.stream == stream)
        if after is not None:
            query = query.where(STREAM.c.sequence > after)
        async with self._read() as conn:
            rows = await conn.execute(query.order_by(STREAM.c.sequence))
            return [stream_from_row(r) for r in rows]
