"""flowpark's database migrations, for an application that runs them from its own deployment.

flowpark keeps to its own place in a database it shares with an application: every table
it makes is named ``flow_*`` (:data:`TABLES`), it records its Alembic revision in its own
``flow_alembic_version`` (never in ``alembic_version``), and on PostgreSQL its tables may
live in a schema of their own (the setting ``FLOWPARK_DATABASE_SCHEMA``). Its migrations
and the application's never meet, and may run in either order.

Run them with ``flowpark db upgrade``, or with one call from the application's own Alembic
``env.py``, on its connection, after its own migrations::

    from flowpark import migrations as flowpark_migrations

    def run_migrations_online() -> None:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                include_name=flowpark_migrations.include_name,
            )
            with context.begin_transaction():
                context.run_migrations()
                flowpark_migrations.upgrade(connection, schema="flowpark")

The call leaves the application's Alembic run, its logging and its ``alembic_version`` as
they were. Alembic is imported on the first call, not by this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "TABLES",
    "VERSION_TABLE",
    "current_revision",
    "downgrade",
    "head_revision",
    "include_name",
    "upgrade",
]

#: The table in which flowpark records its revision.
VERSION_TABLE = "flow_alembic_version"
#: Every table flowpark's migrations make, its version table included.
TABLES = frozenset(
    {
        "flow_action",
        "flow_alembic_version",
        "flow_console_session",
        "flow_correlation",
        "flow_event_delivery",
        "flow_heartbeat",
        "flow_instance",
        "flow_node",
        "flow_outbox_event",
        "flow_provider",
        "flow_provider_minute",
        "flow_review_item",
        "flow_signal",
        "flow_signal_delivery",
        "flow_step",
        "flow_stream",
    }
)


def upgrade(target: str | Connection, revision: str = "head", *, schema: str | None = None) -> None:
    """Migrate flowpark's tables up to ``revision``.

    A database an earlier flowpark migrated, its revision in ``alembic_version``, is taken
    over in place: the revision moves into ``flow_alembic_version`` in the same
    transaction, and only that row (any other row of ``alembic_version`` is left alone).

    Args:
        target: a database URL (``postgresql://user@host/db``, ``sqlite:///path.db``;
            flowpark picks the driver), or an open synchronous SQLAlchemy connection (the
            application's own). A connection already in a transaction is migrated in it and
            committed by its owner; one that is not gets a transaction of its own,
            committed when the migrations succeed.
        revision: the revision to reach (default ``"head"``: the newest this flowpark has).
        schema: PostgreSQL only: the schema of flowpark's tables (created when missing), as
            the nodes' ``FLOWPARK_DATABASE_SCHEMA``; default None: the connection's default
            schema (``public``).

    Raises:
        ValueError: ``schema`` is not a plain SQL identifier (lowercase letters, digits,
            ``_``; at most 63 characters), or is given for SQLite.
        sqlalchemy.exc.DBAPIError: the database cannot be reached, or refused a statement
            (nothing of the run is kept).
        RuntimeError: ``alembic_version`` holds several revision ids of flowpark's: which
            one is flowpark's cannot be told (move it by hand, as the message says).
    """
    from flowpark.store import migrate

    migrate.upgrade(target, revision, schema=schema)


def downgrade(target: str | Connection, revision: str, *, schema: str | None = None) -> None:
    """Migrate flowpark's tables down to ``revision``.

    Args:
        target: a URL or a connection, as :func:`upgrade` takes them.
        revision: the revision to reach (``"base"``: no flowpark table left). Below
            ``"0025"`` the revision is recorded in ``alembic_version`` again and the
            tables get their names of before (``outbox_event``, ``review_item`` ...), as
            the releases before it expect.
        schema: as :func:`upgrade` takes it.

    Raises:
        ValueError: as :func:`upgrade`.
        RuntimeError: a migration refuses to go down (its message says why and what to do).
        sqlalchemy.exc.DBAPIError: the database cannot be reached or refused a statement
            (a name of before already taken, say); nothing of the run is kept.
    """
    from flowpark.store import migrate

    migrate.downgrade(target, revision, schema=schema)


def current_revision(target: str | Connection, *, schema: str | None = None) -> str | None:
    """The revision flowpark's tables are at.

    Args:
        target: a URL or a connection, as :func:`upgrade` takes them.
        schema: as :func:`upgrade` takes it.

    Returns:
        The revision id (``"0025"``); the one an earlier flowpark recorded in
        ``alembic_version``, until :func:`upgrade` moves it; None when flowpark's
        migrations never ran there.

    Raises:
        ValueError: as :func:`upgrade`.
        sqlalchemy.exc.DBAPIError: the database cannot be reached.
    """
    from flowpark.store import migrate

    return migrate.current_revision(target, schema=schema)


def head_revision() -> str:
    """The newest revision this flowpark's migrations reach.

    Returns:
        Its id (``"0027"``): what :func:`upgrade` reaches by default and what a node
        requires before it starts.
    """
    from flowpark.store import migrate

    return migrate.head_revision()


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """An ``include_name`` hook for the application's own Alembic autogenerate.

    With flowpark's tables in the application's schema, autogenerate would otherwise
    propose to drop them (they are in the database, not in the application's models).
    ``context.configure(..., include_name=flowpark.migrations.include_name)`` leaves them
    out; with flowpark in a schema of its own there is nothing to leave out.

    Args:
        name: the name Alembic asks about.
        type_: what it names (``"table"``, ``"schema"``, ``"column"``, ...).
        parent_names: the names around it (not read).

    Returns:
        False for a table of :data:`TABLES`; True for anything else.
    """
    return not (type_ == "table" and name in TABLES)
