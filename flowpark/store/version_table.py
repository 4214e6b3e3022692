"""Where flowpark records its schema revision: a table of its own, ``flow_alembic_version``.

Alembic records a database's revision in ``alembic_version`` unless told otherwise, and an
application running its own Alembic in the same database records its revision there too.
flowpark's migrations record theirs in :data:`VERSION_TABLE`, so the two histories never
meet: each tool reads and moves only its own row.

Releases before revision 0025 recorded flowpark's revision in ``alembic_version``. A
migration run (``alembic/env.py``) that moves revisions therefore:

* before it migrates, adopts such a revision (:func:`adopt_legacy_revision`): when
  ``flow_alembic_version`` holds no revision, ``alembic_version`` holds one of
  :data:`LEGACY_REVISIONS` and flowpark's tables are there, that row moves into
  ``flow_alembic_version``, and ``alembic_version`` is dropped if this leaves it empty. It
  runs in the migration's transaction: a run that fails leaves the row where it was. Any
  other row of ``alembic_version`` belongs to someone else and is never touched;
* after a downgrade below 0025, puts the revision back where those releases read it
  (:func:`restore_legacy_revision`), so an earlier release runs on the database again;
  not beside another history's row (that release could not run beside it either, and the
  other history would find a revision it does not know).

Every name is looked up in ``schema`` when one is given, else through the connection's
``search_path``. No Alembic import: the node's start-up check reads these tables too.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    delete,
    insert,
    inspect,
    select,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

__all__ = [
    "LEGACY_REVISIONS",
    "LEGACY_VERSION_TABLE",
    "VERSION_TABLE",
    "adopt_legacy_revision",
    "legacy_revision",
    "restore_legacy_revision",
    "version_table",
]

#: flowpark's own version table (Alembic's ``version_table``).
VERSION_TABLE = "flow_alembic_version"
#: Alembic's default version table, where releases before revision 0025 recorded flowpark's.
LEGACY_VERSION_TABLE = "alembic_version"
#: The revisions a release before 0025 could record in ``alembic_version``.
LEGACY_REVISIONS = frozenset(f"{n:04d}" for n in range(1, 25))
#: A table every revision of flowpark has: ``alembic_version`` names flowpark's revision
#: only where it is present (an application's own history may use the same ids).
_MARKER_TABLE = "flow_instance"


def version_table(name: str = VERSION_TABLE, schema: str | None = None) -> Table:
    """A version table as Alembic makes it: ``version_num varchar(32)``, the primary key
    named ``<name>_pkc``.

    Args:
        name: the table's name (default :data:`VERSION_TABLE`).
        schema: its schema; None: the connection's ``search_path``.

    Returns:
        A :class:`~sqlalchemy.Table` on a metadata of its own.
    """
    return Table(
        name,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{name}_pkc"),
        schema=schema,
    )


def _revisions(connection: Connection, table: Table) -> list[str] | None:
    """The revisions ``table`` holds; None when there is no such table."""
    if not inspect(connection).has_table(table.name, schema=table.schema):
        return None
    return list(connection.execute(select(table.c.version_num)).scalars())


def legacy_revision(connection: Connection, schema: str | None = None) -> str | None:
    """flowpark's revision as a release before 0025 recorded it.

    Args:
        connection: a connection to the database.
        schema: the schema of flowpark's tables; None: the connection's ``search_path``.

    Returns:
        The one revision of :data:`LEGACY_REVISIONS` in ``alembic_version``, when
        ``flow_alembic_version`` holds none and flowpark's tables are there; else None.

    Raises:
        RuntimeError: ``alembic_version`` holds several of them (two histories wrote to
            one table): which one is flowpark's cannot be told.
    """
    if _revisions(connection, version_table(schema=schema)):
        return None
    legacy = _revisions(connection, version_table(LEGACY_VERSION_TABLE, schema))
    ours = sorted(set(legacy or ()) & LEGACY_REVISIONS)
    if not ours or not inspect(connection).has_table(_MARKER_TABLE, schema=schema):
        return None
    if len(ours) > 1:
        raise RuntimeError(
            f"{LEGACY_VERSION_TABLE} holds the revisions {', '.join(ours)}: which one is "
            f"flowpark's cannot be told; move flowpark's into {VERSION_TABLE} by hand "
            f"(CREATE TABLE {VERSION_TABLE} (version_num VARCHAR(32) NOT NULL PRIMARY KEY)) "
            "and delete it from alembic_version"
        )
    return ours[0]


def _drop_if_unused(connection: Connection, table: Table) -> None:
    """Drop ``table`` when it holds no row and nothing depends on it (PostgreSQL refuses
    the drop then: it is kept)."""
    if connection.execute(select(table.c.version_num).limit(1)).first() is not None:
        return
    if connection.dialect.name == "sqlite":
        table.drop(connection)
        return
    try:
        with connection.begin_nested():
            table.drop(connection)
    except DBAPIError:  # a view or another object depends on it: left in place
        return


def adopt_legacy_revision(connection: Connection, schema: str | None = None) -> str | None:
    """Move flowpark's revision from ``alembic_version`` into ``flow_alembic_version``.

    Runs in the caller's transaction: the row is deleted from ``alembic_version`` first,
    then ``flow_alembic_version`` is made and given it, then ``alembic_version`` is dropped
    if it is left empty and nothing depends on it.

    Args:
        connection: a connection in a transaction.
        schema: the schema of flowpark's tables; None: the connection's ``search_path``.

    Returns:
        The revision moved (see :func:`legacy_revision`), or None: nothing to move.

    Raises:
        RuntimeError: as :func:`legacy_revision`.
    """
    revision = legacy_revision(connection, schema)
    if revision is None:
        return None
    own = version_table(schema=schema)
    legacy = version_table(LEGACY_VERSION_TABLE, schema)
    connection.execute(delete(legacy).where(legacy.c.version_num == revision))
    own.create(connection, checkfirst=True)
    connection.execute(insert(own).values(version_num=revision))
    _drop_if_unused(connection, legacy)
    return revision


def restore_legacy_revision(connection: Connection, schema: str | None = None) -> str | None:
    """After a migration to a revision before 0025, record it where that release reads it.

    Args:
        connection: a connection in a transaction.
        schema: the schema of flowpark's tables; None: the connection's ``search_path``.

    Returns:
        The revision moved into ``alembic_version`` (``flow_alembic_version`` is then
        dropped), or None when ``flow_alembic_version`` holds no revision of
        :data:`LEGACY_REVISIONS` or ``alembic_version`` holds a row (another history's:
        the revision stays in ``flow_alembic_version``).
    """
    own = version_table(schema=schema)
    revisions = _revisions(connection, own)
    if not revisions or len(revisions) > 1 or revisions[0] not in LEGACY_REVISIONS:
        return None
    legacy = version_table(LEGACY_VERSION_TABLE, schema)
    if _revisions(connection, legacy):
        return None
    connection.execute(delete(own))
    legacy.create(connection, checkfirst=True)
    connection.execute(insert(legacy).values(version_num=revisions[0]))
    own.drop(connection)
    return revisions[0]
