"""The console's sessions, kept in the store so that every node ends them alike.

A sign-in writes a row; each console request reads it back (:meth:`SqlConsoleSessions.seen`):
a session is open while its row is not ended, was seen within the idle timeout and is
younger than its lifetime. The row's ``last_seen_at`` is written again at most once per
:data:`~flowpark.engine.ports.nodes.TOUCH_SECONDS` (or a quarter of the idle timeout, if
shorter), not on every page.
Rows idle or ended for a day are deleted at the next sign-in.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, insert, or_, select, update

from flowpark.engine.ports.nodes import SESSIONS_KEPT, TOUCH_SECONDS
from flowpark.store.parts import SqlPart
from flowpark.store.tables import ConsoleSessionRow

__all__ = ["SqlConsoleSessions"]

SESSION = ConsoleSessionRow.__table__  # type: ignore[attr-defined]


class SqlConsoleSessions(SqlPart):
    """Console sessions (:class:`~flowpark.engine.ports.nodes.ConsoleSessions`): opened at
    sign-in, seen on each request, ended at sign-out."""

    async def open(self, session_id: str, fingerprint: str, now: datetime) -> None:
        """Record a new session (and delete rows ended or idle for a day).

        Args:
            session_id: a fresh random id (the cookie names it).
            fingerprint: the token's fingerprint (never the token).
            now: the engine clock's now (aware UTC).
        """
        async with self._write() as conn:
            await conn.execute(
                delete(SESSION).where(
                    or_(
                        SESSION.c.ended_at < now - SESSIONS_KEPT,
                        SESSION.c.last_seen_at < now - SESSIONS_KEPT,
                    )
                )
            )
            await conn.execute(
                insert(SESSION).values(
                    id=session_id,
                    token_fingerprint=fingerprint,
                    created_at=now,
                    last_seen_at=now,
                    ended_at=None,
                )
            )

    async def seen(
        self, session_id: str, now: datetime, idle: timedelta, lifetime: timedelta
    ) -> str | None:
        """The session's token fingerprint when it is open at ``now``, else None; an open
        one is marked seen (at most once per :data:`~flowpark.engine.ports.nodes.TOUCH_SECONDS`).

        Args:
            session_id: the cookie's session id.
            now: the engine clock's now.
            idle: the idle timeout: a session not seen for longer is over.
            lifetime: the longest a session lasts from its sign-in.
        """
        async with self._read() as conn:
            row = (
                await conn.execute(
                    select(SESSION.c.token_fingerprint, SESSION.c.last_seen_at).where(
                        SESSION.c.id == session_id,
                        SESSION.c.ended_at.is_(None),
                        SESSION.c.last_seen_at >= now - idle,
                        SESSION.c.created_at >= now - lifetime,
                    )
                )
            ).first()
        if row is None:
            return None
        if now - row.last_seen_at >= min(timedelta(seconds=TOUCH_SECONDS), idle / 4):
            async with self._write() as conn:
                await conn.execute(
                    update(SESSION)
                    .where(SESSION.c.id == session_id, SESSION.c.ended_at.is_(None))
                    .values(last_seen_at=now)
                )
        return str(row.token_fingerprint)

    async def end(self, session_id: str, now: datetime) -> None:
        """End the session (sign-out): no copy of its cookie opens the console again."""
        async with self._write() as conn:
            await conn.execute(
                update(SESSION)
                .where(SESSION.c.id == session_id, SESSION.c.ended_at.is_(None))
                .values(ended_at=now)
            )
