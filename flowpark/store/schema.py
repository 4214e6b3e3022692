"""The start-up schema check without Alembic's import on the common path.

A node refuses to run on a schema other than its migrations' head
(:func:`check_schema_at_head`). Importing Alembic's runtime (its dialect implementations,
Mako and their highlighting) costs a node several percent of its start-up, so the check
reads the two revisions directly first: the head from the migration scripts' own
``revision`` / ``down_revision`` lines, the database's from flowpark's own version table
(``flow_alembic_version``). When both are plain and equal, the node starts without importing
Alembic. Anything else (no table, a different revision, several heads, a script this reader
cannot follow, a revision still recorded in ``alembic_version`` by a release before 0025)
goes through :func:`flowpark.store.migrate.check_schema_at_head`, which answers with
Alembic's own reading and raises the same ``SchemaBehindHead`` it always did.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.db import READ_ONLY, check_schema_name
from flowpark.store.version_table import VERSION_TABLE

__all__ = ["SqlSchema", "check_schema_at_head", "script_head"]

_STORE = Path(__file__).resolve().parent
#: the migrations in an installed distribution, else the source tree's ``alembic/``
_VERSION_FOLDERS = (_STORE / "migrations" / "versions", _STORE.parents[1] / "alembic" / "versions")
_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]\s*$", re.MULTILINE)
_DOWN = re.compile(
    r"^down_revision(?:\s*:[^=]+)?\s*=\s*(None|['\"]([^'\"]+)['\"])\s*$", re.MULTILINE
)


@functools.cache
def script_head() -> str | None:
    """The head revision of the migration scripts, read from their ``revision`` and
    ``down_revision`` assignments; None when it cannot be read plainly (no scripts, a
    merge, several heads): the caller then asks Alembic."""
    folder = next((f for f in _VERSION_FOLDERS if f.is_dir()), None)
    if folder is None:
        return None
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in folder.glob("*.py"):
        source = script.read_text(encoding="utf-8")
        revision = _REVISION.findall(source)
        down = _DOWN.findall(source)
        if len(revision) != 1 or len(down) != 1:
            return None
        revisions.add(revision[0])
        if down[0][0] != "None":
            parents.add(down[0][1])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 and parents <= revisions else None


async def check_schema_at_head(engine: AsyncEngine, schema: str | None = None) -> None:
    """Refuse to run on a schema other than the code's head revision.

    Args:
        engine: the service's engine (:func:`flowpark.store.db.make_async_engine`).
        schema: the PostgreSQL schema of flowpark's tables (the setting
            ``database_schema``); None: the engine's ``search_path``.

    Raises:
        SchemaBehindHead: the database is unmigrated or at another revision (code
            ``schema_behind_head``; fields ``current`` and ``head``).
    """
    head = script_head()
    if head is not None:
        table = VERSION_TABLE if schema is None else f"{check_schema_name(schema)}.{VERSION_TABLE}"
        try:
            async with engine.execution_options(**READ_ONLY).connect() as conn:
                rows = (await conn.execute(text(f"SELECT version_num FROM {table}"))).all()
        except Exception:  # noqa: BLE001 - no table, or unreachable: Alembic's check says
            rows = []
        if [tuple(r) for r in rows] == [(head,)]:
            return
    from flowpark.store.migrate import check_schema_at_head as alembic_check

    await alembic_check(engine, schema)


class SqlSchema:
    """The database's schema revision (:class:`~flowpark.engine.ports.nodes.Schema`).

    Args:
        engine: the service's engine (:func:`flowpark.store.db.make_async_engine`).
        schema: the PostgreSQL schema of flowpark's tables; None: the engine's
            ``search_path``.
    """

    def __init__(self, engine: AsyncEngine, schema: str | None = None) -> None:
        self._engine = engine
        self._schema = schema

    async def check_at_head(self) -> None:
        """See :func:`check_schema_at_head`.

        Raises:
            SchemaBehindHead: the schema is at another revision (``schema_behind_head``).
        """
        await check_schema_at_head(self._engine, self._schema)
