"""Reads of a migrated database for the migration tests: the revisions its version tables
hold, what autogenerate finds between it and the models, index and constraint names."""

from __future__ import annotations

from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine

from flowpark.store.tables import include_in_compare, metadata
from flowpark.store.version_table import LEGACY_VERSION_TABLE, VERSION_TABLE

__all__ = ["diff_from_models", "object_names", "table_names", "versions"]


def versions(engine: Engine, schema: str | None = None) -> dict[str, list[str]]:
    """The revisions ``alembic_version`` and ``flow_alembic_version`` hold, by table (a
    table that does not exist is not named)."""
    found: dict[str, list[str]] = {}
    insp = inspect(engine)
    with engine.connect() as conn:
        for table in (LEGACY_VERSION_TABLE, VERSION_TABLE):
            if insp.has_table(table, schema=schema):
                name = table if schema is None else f"{schema}.{table}"
                rows = conn.execute(text(f"SELECT version_num FROM {name}")).scalars()
                found[table] = sorted(rows)
    return found


def table_names(engine: Engine, schema: str | None = None) -> set[str]:
    """The tables of ``schema`` (default: the connection's)."""
    return set(inspect(engine).get_table_names(schema=schema))


def diff_from_models(engine: Engine) -> list[Any]:
    """What autogenerate finds between the database and flowpark's models."""
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_object": include_in_compare(engine.dialect.name),
                "version_table": VERSION_TABLE,
            },
        )
        return list(compare_metadata(context, metadata))


def object_names(engine: Engine, schema: str | None = None) -> list[tuple[str, str]]:
    """``(table, name)`` of each index, named constraint and (PostgreSQL) sequence of a
    flowpark table, sorted (index names share a SQLite database; index, constraint and
    sequence names a PostgreSQL schema)."""
    tables = set(metadata.tables) | {VERSION_TABLE}
    names: list[tuple[str, str]] = []
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            names += conn.execute(
                text(
                    "SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' "
                    "AND name NOT LIKE 'sqlite_autoindex_%'"
                )
            ).all()
            insp = inspect(conn)
            for table in tables & set(insp.get_table_names()):
                uniques = insp.get_unique_constraints(table)
                names += [(table, u["name"]) for u in uniques if u["name"]]
        else:
            where = "current_schema()" if schema is None else ":schema"
            params = {} if schema is None else {"schema": schema}
            names += conn.execute(
                text(
                    "SELECT t.relname, c.relname FROM pg_index i "
                    "JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid "
                    f"JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = {where}"
                ),
                params,
            ).all()
            names += conn.execute(
                text(
                    "SELECT t.relname, k.conname FROM pg_constraint k "
                    "JOIN pg_class t ON t.oid = k.conrelid "
                    f"JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = {where}"
                ),
                params,
            ).all()
            names += conn.execute(
                text(
                    "SELECT t.relname, s.relname FROM pg_class s "
                    "JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass "
                    "JOIN pg_class t ON t.oid = d.refobjid "
                    f"JOIN pg_namespace n ON n.oid = s.relnamespace "
                    f"WHERE s.relkind = 'S' AND n.nspname = {where}"
                ),
                params,
            ).all()
    return sorted((t, n) for t, n in names if t in tables and n)
