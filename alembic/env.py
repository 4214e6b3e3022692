"""Alembic environment for flowpark.

The database URL is, in order: ``-x url=...`` on the command line, the ``url`` config
attribute (set by :func:`flowpark.store.migrate.upgrade`), ``FLOWPARK_DATABASE_URL``, or
``sqlite:///flowpark.db``. Plain URLs are accepted; :func:`flowpark.store.db.sync_url` picks the
synchronous driver. A caller may hand over its own connection instead (the ``connection``
attribute): one in a transaction is migrated in it, and committed by its owner.

The PostgreSQL schema of flowpark's tables is, in order: ``-x schema=...``, the ``schema``
config attribute (None there: the connection's default schema), ``FLOWPARK_DATABASE_SCHEMA``,
or none. The schema is created when missing, and the run works with it alone on its
``search_path`` (the tables are defined without a schema); ``--sql`` writes the same.

The revision is recorded in ``flow_alembic_version``, never in ``alembic_version`` (an
application's own Alembic may use that one). A run that moves the revision (upgrade,
downgrade, stamp) first adopts the revision a release before 0025 left in
``alembic_version``, and after going below 0025 puts it back there
(:mod:`flowpark.store.version_table`), in the run's one transaction. ``--sql`` (offline) does
neither: it writes ``flow_alembic_version`` only.

An upgrade to head that :func:`flowpark.store.migrate.upgrade` asks for (the ``from_models``
attribute), on a database holding nothing of flowpark's, makes the tables from the models
(which the tests pin to what the migrations make) and records head, instead of running every
migration: a migration before 0025 would make a table under a name the application may use
itself (``outbox_event``, ``review_item``).
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from logging.config import fileConfig

from alembic import context
from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from flowpark.store.db import is_sqlite, make_sync_engine, schema_connect_args, sync_url
from flowpark.store.migrate import current_revision, in_schema
from flowpark.store.tables import include_in_compare, metadata
from flowpark.store.version_table import (
    VERSION_TABLE,
    adopt_legacy_revision,
    restore_legacy_revision,
)

DEFAULT_URL = "sqlite:///flowpark.db"

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = metadata


def database_url() -> str:
    """The URL to migrate, with the synchronous driver."""
    url = (
        context.get_x_argument(as_dictionary=True).get("url")
        or config.attributes.get("url")
        or os.environ.get("FLOWPARK_DATABASE_URL")
        or DEFAULT_URL
    )
    return sync_url(url)


def database_schema() -> str | None:
    """The PostgreSQL schema of flowpark's tables; None: the connection's default."""
    given = context.get_x_argument(as_dictionary=True).get("schema")
    if given:
        return str(given)
    if "schema" in config.attributes:
        schema: str | None = config.attributes["schema"]
        return schema
    return os.environ.get("FLOWPARK_DATABASE_SCHEMA") or None


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    if url is not None:
        sqlite = is_sqlite(url)
    else:
        sqlite = connection is not None and connection.dialect.name == "sqlite"
    dialect = "sqlite" if sqlite else "postgresql"
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=sqlite,
        compare_type=True,
        include_object=include_in_compare(dialect),
        literal_binds=url is not None,
        dialect_opts={"paramstyle": "named"} if url is not None else {},
    )


def run_migrations_offline() -> None:
    """Emit the migration SQL without a database (``alembic upgrade head --sql``)."""
    url = database_url()
    schema = database_schema()
    _configure(url=url)
    with context.begin_transaction():
        if schema is not None:  # as an online run: made when missing, the one path
            schema_connect_args(url, schema)  # a plain name, and PostgreSQL
            context.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            context.execute(f"SET search_path TO {schema}")
        context.run_migrations()


def _from_models(connection: Connection) -> bool:
    """Whether to make the tables from the models: an upgrade to head asked for by
    flowpark's own ``upgrade``, on a database with no revision and no table of flowpark's."""
    if not config.attributes.get("from_models"):
        return False
    if context.get_revision_argument() != context.script.get_current_head():
        return False
    if current_revision(connection) is not None:
        return False
    return not set(metadata.tables) & set(inspect(connection).get_table_names())


def _migrate(connection: Connection, schema: str | None, *, set_path: bool) -> None:
    """Migrate on ``connection``, in a transaction begun already (Alembic leaves it to us)."""
    with in_schema(connection, schema, set_path=set_path):
        _configure(connection=connection)
        # upgrade, downgrade and stamp name a destination; current, history, check read
        moves = "destination_rev" in context.get_context().opts
        if moves:
            adopt_legacy_revision(connection)
        if moves and _from_models(connection):
            metadata.create_all(connection)
            context.get_context().stamp(context.script, "head")
        else:
            with context.begin_transaction():
                context.run_migrations()
        if moves:
            restore_legacy_revision(connection)


def run_migrations_online() -> None:
    """Migrate the database, or the connection a caller handed over in ``connection``."""
    schema = database_schema()
    given: Connection | None = config.attributes.get("connection")
    if given is not None:
        with nullcontext() if given.in_transaction() else given.begin():
            _migrate(given, schema, set_path=True)
        return
    engine = make_sync_engine(database_url(), schema=schema)
    try:
        with engine.connect() as connection, connection.begin():
            _migrate(connection, schema, set_path=False)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
