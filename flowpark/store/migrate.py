"""Schema migrations: run Alembic programmatically and check a database is at head.

The Alembic scripts live in ``alembic/`` at the repository root, configured by
``alembic.ini`` there; an installed distribution carries them as ``flowpark/store/migrations/``
(copied at build time by ``setup.py``), used when there is no source tree.
``flowpark db upgrade`` calls :func:`upgrade`; the service calls :func:`check_schema_at_head`
at start-up and refuses to run on an older schema.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.errors import SchemaBehindHead
from flowpark.store.db import READ_ONLY, sync_url

__all__ = [
    "ALEMBIC_INI",
    "PACKAGED_SCRIPTS",
    "alembic_config",
    "check_schema_at_head",
    "current_revision",
    "downgrade",
    "head_revision",
    "upgrade",
]

#: ``alembic.ini`` at the repository root (``flowpark/store/migrate.py`` -> ``../../``).
ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
#: The migrations inside an installed distribution (absent in the source tree).
PACKAGED_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    """An Alembic config for flowpark's scripts, migrating ``url`` when given.

    Args:
        url: a database URL in any form :func:`flowpark.store.db.sync_url` accepts; None leaves
            the choice to ``alembic/env.py`` (``FLOWPARK_DATABASE_URL`` or the default).
    """
    if PACKAGED_SCRIPTS.is_dir():
        config = Config()
        config.set_main_option("script_location", str(PACKAGED_SCRIPTS))
        config.set_main_option("path_separator", "os")
    else:
        config = Config(str(ALEMBIC_INI))
    config.attributes["configure_logger"] = False  # keep the caller's logging setup
    if url is not None:
        config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` (default: head).

    Args:
        url: ``sqlite:///path.db``, ``postgresql://...`` (any driver suffix).
        revision: the target revision.
    """
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate the database at ``url`` down to ``revision`` (default: an empty schema)."""
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The newest revision the code's migrations define."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the repository always ships a migration
        raise RuntimeError("no Alembic revision found")
    return head


def _revision_of(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def current_revision(url: str) -> str | None:
    """The revision the database at ``url`` is at; None for an unmigrated database."""
    engine = create_engine(sync_url(url), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            return _revision_of(connection)
    finally:
        engine.dispose()


async def check_schema_at_head(engine: AsyncEngine) -> None:
    """Refuse to run on a schema other than the code's head revision.

    Args:
        engine: the service's engine (:func:`flowpark.store.db.make_async_engine`).

    Raises:
        SchemaBehindHead: the database is unmigrated or at another revision (code
            ``schema_behind_head``; fields ``current`` and ``head``).
    """
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        current = await conn.run_sync(_revision_of)
    head = head_revision()
    if current != head:
        raise SchemaBehindHead(
            f"the database schema is at revision {current or 'none (empty database)'} but "
            f"this flowpark needs revision {head}; run `flowpark db upgrade` first",
            current=current,
            head=head,
        )
