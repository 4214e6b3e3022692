"""Schema migrations: run Alembic programmatically and check a database is at head.

The Alembic scripts live in ``alembic/`` at the repository root, configured by
``alembic.ini`` there; an installed distribution carries them as ``flowpark/store/migrations/``
(copied at build time by ``setup.py``), used when there is no source tree.
``flowpark db upgrade`` calls :func:`upgrade`; the service calls :func:`check_schema_at_head`
at start-up and refuses to run on an older schema.

flowpark records its revision in a table of its own, ``flow_alembic_version``
(:mod:`flowpark.store.version_table`), never in ``alembic_version``, and on PostgreSQL may
keep every table in a schema of its own (``schema``). :func:`upgrade` and :func:`downgrade`
take a URL or an application's own connection, and may run while the application's own
Alembic runs in the same process (from its ``env.py``): they leave its logging, its
``alembic_version`` and its Alembic context as they found them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.errors import SchemaBehindHead
from flowpark.store.db import READ_ONLY, check_schema_name, make_sync_engine
from flowpark.store.version_table import (
    LEGACY_VERSION_TABLE,
    VERSION_TABLE,
    legacy_revision,
)

__all__ = [
    "ALEMBIC_INI",
    "PACKAGED_SCRIPTS",
    "alembic_config",
    "check_schema_at_head",
    "current_revision",
    "downgrade",
    "head_revision",
    "in_schema",
    "upgrade",
]

#: ``alembic.ini`` at the repository root (``flowpark/store/migrate.py`` -> ``../../``).
ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
#: The migrations inside an installed distribution (absent in the source tree).
PACKAGED_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def alembic_config(url: str | None = None, *, schema: str | None = None) -> Config:
    """An Alembic config for flowpark's scripts, migrating ``url`` when given.

    Args:
        url: a database URL in any form :func:`flowpark.store.db.sync_url` accepts; None leaves
            the choice to ``alembic/env.py`` (``FLOWPARK_DATABASE_URL`` or the default).
        schema: the PostgreSQL schema of flowpark's tables (``schema`` config attribute);
            None: the connection's default schema. With neither ``url`` nor ``schema``,
            ``alembic/env.py`` reads ``FLOWPARK_DATABASE_SCHEMA``.

    Returns:
        A config whose ``env.py`` leaves the caller's logging as it is.
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
    if url is not None or schema is not None:
        config.attributes["schema"] = None if schema is None else check_schema_name(schema)
    return config


@contextmanager
def _beside_the_callers_alembic() -> Iterator[None]:
    """Run flowpark's Alembic inside a caller's own Alembic run.

    Alembic's ``alembic.context`` and ``alembic.op`` are module-level proxies to the run
    that entered last, removed when it ends: a run of flowpark's from a caller's
    ``env.py`` or migration would leave the caller's without them. They are put back.
    """
    from alembic import context, op

    saved = [getattr(module, "_proxy", None) for module in (context, op)]
    try:
        yield
    finally:
        for proxy in saved:
            if proxy is not None:
                proxy._install_proxy()  # Alembic's one way to reinstate it


def _run(
    step: Callable[[Config, str], None],
    target: str | Connection,
    revision: str,
    schema: str | None,
) -> None:
    if isinstance(target, Connection):
        config = alembic_config(schema=schema)
        config.attributes["schema"] = schema  # given: never FLOWPARK_DATABASE_SCHEMA
        config.attributes["connection"] = target
    else:
        config = alembic_config(target, schema=schema)
    # a new database is made from the models (see alembic/env.py)
    config.attributes["from_models"] = step is command.upgrade
    with _beside_the_callers_alembic():
        step(config, revision)


def upgrade(target: str | Connection, revision: str = "head", *, schema: str | None = None) -> None:
    """Migrate a database up to ``revision`` (default: head).

    Args:
        target: a URL (``sqlite:///path.db``, ``postgresql://...``, any driver suffix), or
            an open synchronous SQLAlchemy connection (an application's own, e.g. in its
            Alembic ``env.py``). A connection already in a transaction is migrated in it
            and left to its owner to commit; otherwise the migration commits its own.
        revision: the target revision. Head on a database with nothing of flowpark's
            makes the tables as the migrations would and records head, without running
            the migrations one by one.
        schema: PostgreSQL only: the schema of flowpark's tables, created when missing;
            None: the connection's default schema (``public``).

    Raises:
        ValueError: ``schema`` is no plain SQL identifier, or is given for SQLite.
        sqlalchemy.exc.DBAPIError: the database cannot be reached or refused a statement
            (nothing of the run is kept).
    """
    _run(command.upgrade, target, revision, schema)


def downgrade(
    target: str | Connection, revision: str = "base", *, schema: str | None = None
) -> None:
    """Migrate a database down to ``revision`` (default: an empty schema).

    Args:
        target: a URL or a connection, as :func:`upgrade` takes them.
        revision: the target revision; below ``0025`` the revision is recorded in
            ``alembic_version`` again, where the releases before it read it.
        schema: as :func:`upgrade` takes it.

    Raises:
        ValueError: as :func:`upgrade`.
        RuntimeError: a migration refuses to go down (its message says why).
    """
    _run(command.downgrade, target, revision, schema)


def head_revision() -> str:
    """The newest revision the code's migrations define."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the repository always ships a migration
        raise RuntimeError("no Alembic revision found")
    return head


def _revisions_of(connection: Connection, schema: str | None) -> tuple[str | None, str | None]:
    """(the revision in ``flow_alembic_version``, else flowpark's in ``alembic_version``)."""
    opts = {"version_table": VERSION_TABLE, "version_table_schema": schema}
    current = MigrationContext.configure(connection, opts=opts).get_current_revision()
    return current, (legacy_revision(connection, schema) if current is None else None)


def current_revision(target: str | Connection, *, schema: str | None = None) -> str | None:
    """The revision a database is at.

    Args:
        target: a URL or a connection, as :func:`upgrade` takes them.
        schema: as :func:`upgrade` takes it.

    Returns:
        The revision in ``flow_alembic_version``; for a database a release before 0025
        migrated, flowpark's revision in ``alembic_version``; None for an unmigrated one.
    """
    if isinstance(target, Connection):
        current, legacy = _revisions_of(target, schema)
        return current or legacy
    engine = make_sync_engine(target, schema=schema)
    try:
        with engine.execution_options(**READ_ONLY).connect() as connection:
            current, legacy = _revisions_of(connection, schema)
            return current or legacy
    finally:
        engine.dispose()


@contextmanager
def in_schema(connection: Connection, schema: str | None, *, set_path: bool) -> Iterator[None]:
    """Work in ``schema`` on ``connection``: create the schema when missing and, with
    ``set_path``, name it alone in ``search_path`` until the block ends (then the
    connection's own is set back; a block that fails leaves it to the transaction's
    rollback, which undoes the change).

    Args:
        connection: a PostgreSQL connection in a transaction (any connection when
            ``schema`` is None).
        schema: the schema; None: nothing to do.
        set_path: set ``search_path`` (a connection whose ``search_path`` is not set
            already, as :func:`flowpark.store.db.make_sync_engine` sets it).

    Raises:
        ValueError: ``schema`` is given on a SQLite connection.
    """
    if schema is None:
        yield
        return
    if connection.dialect.name != "postgresql":
        raise ValueError("SQLite has no schemas: a database schema applies to PostgreSQL only")
    check_schema_name(schema)
    found = connection.execute(
        text("SELECT 1 FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
    ).first()
    if found is None:  # an existing one needs no CREATE privilege on the database
        connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    if not set_path:
        yield
        return
    own = connection.exec_driver_sql("SHOW search_path").scalar_one()
    connection.execute(text("SELECT set_config('search_path', :path, false)"), {"path": schema})
    yield
    connection.execute(text("SELECT set_config('search_path', :path, false)"), {"path": own})


async def check_schema_at_head(engine: AsyncEngine, schema: str | None = None) -> None:
    """Refuse to run on a schema other than the code's head revision.

    Args:
        engine: the service's engine (:func:`flowpark.store.db.make_async_engine`).
        schema: the schema of flowpark's tables; None: the engine's ``search_path``.

    Raises:
        SchemaBehindHead: the database is unmigrated or at another revision, or still
            records flowpark's revision in ``alembic_version`` (code
            ``schema_behind_head``; fields ``current`` and ``head``).
    """
    async with engine.execution_options(**READ_ONLY).connect() as conn:
        current, legacy = await conn.run_sync(_revisions_of, schema)
    head = head_revision()
    if legacy is not None:
        raise SchemaBehindHead(
            f"the database schema is at revision {legacy} (recorded in "
            f"{LEGACY_VERSION_TABLE}, as flowpark did before revision 0025) but this "
            f"flowpark needs revision {head}; run `flowpark db upgrade` first",
            current=legacy,
            head=head,
        )
    if current != head:
        raise SchemaBehindHead(
            f"the database schema is at revision {current or 'none (empty database)'} but "
            f"this flowpark needs revision {head}; run `flowpark db upgrade` first",
            current=current,
            head=head,
        )
