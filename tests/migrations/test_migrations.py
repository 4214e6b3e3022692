"""Migrations: upgrade an empty database to head, match the models, go down and up again."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Index, MetaData, create_engine, inspect
from sqlalchemy.engine import Engine

from app.errors import SchemaBehindHead
from app.store.db import make_async_engine, sync_url
from app.store.migrate import (
    check_schema_at_head,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from app.store.tables import metadata

TABLES = {
    "flow_instance",
    "flow_step",
    "flow_signal",
    "outbox_event",
    "review_item",
    "flow_heartbeat",
    "flow_stream",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    """A fresh, unmigrated database of each kind."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def sync_engine(empty_url: str) -> Iterator[Engine]:
    engine = create_engine(sync_url(empty_url))
    try:
        yield engine
    finally:
        engine.dispose()


def _diff(engine: Engine, target: MetaData) -> list[Any]:
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        return list(compare_metadata(context, target))


def _user_tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_head_on_an_empty_database_matches_the_models(
    empty_url: str, sync_engine: Engine
) -> None:
    assert current_revision(empty_url) is None
    upgrade(empty_url)
    assert current_revision(empty_url) == head_revision()
    assert _user_tables(sync_engine) == TABLES
    assert _diff(sync_engine, metadata) == []


def test_compare_is_live(empty_url: str, sync_engine: Engine) -> None:
    """The no-difference check would notice a model the migration does not create."""
    upgrade(empty_url)
    changed = MetaData()
    for table in metadata.sorted_tables:
        table.to_metadata(changed)
    Index("ix_flow_step_extra", changed.tables["flow_step"].c.kind)
    diff = _diff(sync_engine, changed)
    assert [d[0] for d in diff] == ["add_index"]


def test_partial_indexes_are_created(empty_url: str, sync_engine: Engine) -> None:
    upgrade(empty_url)
    indexes = {ix["name"]: ix for ix in inspect(sync_engine).get_indexes("flow_instance")}
    assert {
        "ix_flow_instance_wake_suspended",
        "ix_flow_instance_lease_running",
        "uq_flow_instance_active_key",
    } <= set(indexes)
    assert indexes["uq_flow_instance_active_key"]["unique"]
    with sync_engine.connect() as conn:
        if sync_engine.dialect.name == "sqlite":
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'ix_flow_instance_wake_suspended'"
            ).scalar_one()
        else:
            sql = conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE indexname = "
                "'ix_flow_instance_wake_suspended'"
            ).scalar_one()
    assert "WHERE" in sql.upper() and "suspended" in sql


def test_downgrade_base_then_upgrade_again(empty_url: str, sync_engine: Engine) -> None:
    upgrade(empty_url)
    downgrade(empty_url, "base")
    assert current_revision(empty_url) is None
    assert _user_tables(sync_engine) == set()
    upgrade(empty_url)
    assert current_revision(empty_url) == head_revision()
    assert _user_tables(sync_engine) == TABLES
    assert _diff(sync_engine, metadata) == []


async def test_service_refuses_a_schema_behind_head(empty_url: str) -> None:
    engine = make_async_engine(empty_url)
    try:
        with pytest.raises(SchemaBehindHead) as info:
            await check_schema_at_head(engine)
        assert info.value.code == "store.schema_behind_head"
        assert "flowpark db upgrade" in info.value.message
        assert info.value.fields == {"current": None, "head": head_revision()}
        upgrade(empty_url)
        await check_schema_at_head(engine)
    finally:
        await engine.dispose()
