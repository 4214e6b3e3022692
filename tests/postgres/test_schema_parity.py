"""The same Alembic migrations give the same schema on SQLite and PostgreSQL: tables,
columns (name, nullability), primary keys, unique constraints and indexes (name, columns,
uniqueness, partial or not), read back with SQLAlchemy's inspector."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine.interfaces import ReflectedIndex

from flowpark.store.db import sync_url
from flowpark.store.migrate import upgrade

pytestmark = pytest.mark.postgres


def _partial(index: ReflectedIndex) -> bool:
    """Whether an index has a WHERE clause (the predicates' spelling differs per backend)."""
    options = index.get("dialect_options", {})
    return any(options.get(f"{dialect}_where") is not None for dialect in ("sqlite", "postgresql"))


def _schema(url: str) -> dict[str, Any]:
    engine = create_engine(sync_url(url))
    try:
        insp = inspect(engine)
        schema: dict[str, Any] = {}
        for table in sorted(insp.get_table_names()):
            # PostgreSQL lists the index behind a unique constraint as an index too
            indexes = {
                ix["name"]: (tuple(ix["column_names"]), bool(ix["unique"]), _partial(ix))
                for ix in insp.get_indexes(table)
                if not ix.get("duplicates_constraint")
            }
            schema[table] = {
                "columns": {c["name"]: bool(c["nullable"]) for c in insp.get_columns(table)},
                "primary_key": tuple(insp.get_pk_constraint(table)["constrained_columns"]),
                "unique": {
                    u["name"]: tuple(u["column_names"]) for u in insp.get_unique_constraints(table)
                },
                "indexes": indexes,
                "foreign_keys": sorted(
                    (tuple(fk["constrained_columns"]), fk["referred_table"])
                    for fk in insp.get_foreign_keys(table)
                ),
            }
        return schema
    finally:
        engine.dispose()


def test_migrations_give_the_same_schema_on_sqlite_and_postgresql(
    sqlite_url: str,
    pg_url: str,
) -> None:
    upgrade(sqlite_url)
    upgrade(pg_url)
    on_sqlite, on_postgres = _schema(sqlite_url), _schema(pg_url)
    # the one index spelled per backend (migration 0006): the two texts on SQLite, their
    # digest on PostgreSQL; unique and partial on both
    digest = on_postgres["flow_instance"]["indexes"].pop("uq_flow_instance_idempotency")
    texts = on_sqlite["flow_instance"]["indexes"].pop("uq_flow_instance_idempotency")
    assert texts == (("flow_name", "idempotency_key"), True, True)
    assert digest[1:] == (True, True)
    assert set(on_sqlite) == set(on_postgres)
    for table in on_sqlite:
        assert on_sqlite[table] == on_postgres[table], table
    instance = on_postgres["flow_instance"]
    assert {"id", "state", "wake_at", "lease_owner", "lease_expires_at", "fencing_token"} <= set(
        instance["columns"]
    )
    # the claim's partial indexes exist on both
    for name in ("ix_flow_instance_wake_suspended", "ix_flow_instance_lease_running"):
        assert instance["indexes"][name][2], f"{name} is not partial"
    assert {"instance_id", "step_id", "scope", "capability_id", "outcome"} <= set(
        on_postgres["flow_step"]["columns"]
    )
