"""Alembic environment for flowpark.

The database URL is, in order: ``-x url=...`` on the command line, the ``url`` config
attribute (set by :func:`flowpark.store.migrate.upgrade`), ``FLOWPARK_DATABASE_URL``, or
``sqlite:///flowpark.db``. Plain URLs are accepted; :func:`flowpark.store.db.sync_url` picks the
synchronous driver.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from flowpark.store.db import is_sqlite, sync_url
from flowpark.store.tables import include_in_compare, metadata

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
        render_as_batch=sqlite,
        compare_type=True,
        include_object=include_in_compare(dialect),
        literal_binds=url is not None,
        dialect_opts={"paramstyle": "named"} if url is not None else {},
    )


def run_migrations_offline() -> None:
    """Emit the migration SQL without a database (``alembic upgrade head --sql``)."""
    _configure(url=database_url())
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate the database, or the connection a caller handed over in ``connection``."""
    given: Connection | None = config.attributes.get("connection")
    if given is not None:
        _configure(connection=given)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as connection:
            _configure(connection=connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
