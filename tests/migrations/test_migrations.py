"""Migrations: upgrade an empty database to head, match the models, go down and up again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Index, MetaData, create_engine, inspect, text
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


def _request_hash(input_: Any, instance_key: str | None) -> str:
    """The request hash revision 0003's code stored (sha256 of the start's request)."""
    blob = json.dumps({"input": input_, "instanceKey": instance_key}, sort_keys=True,
                      separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


_KEYED = [  # (id, input, instance_key, idempotency_key)
    ("01a22fac-b7c5-7d5a-b879-c2ae65cc796c", {"documentId": "d-1", "pages": 3}, None, "k-1"),
    ("01a22fac-b7b9-7a11-9f87-f954f4788071", {"b": [1, True], "a": "é"}, "doc-2", "k-2"),
    ("01a22fac-b7bb-7d24-9288-2510e28dc682", {"documentId": "d-3"}, "doc-3", None),
]


def _insert_0003_instances(engine: Engine) -> None:
    """Instances as the 0003 code wrote them (request hash on keyed starts)."""
    with engine.begin() as conn:
        for id_, input_, instance_key, key in _KEYED:
            conn.execute(text(
                "INSERT INTO flow_instance (id, flow_name, flow_version, state, input, "
                "created_at, updated_at, fencing_token, cancel_requested, instance_key, "
                "idempotency_key, request_hash) VALUES (:id, 'document.process', '1.0.0', "
                "'suspended', :input, :at, :at, 1, false, :ik, :key, :hash)"),
                {"id": id_, "input": json.dumps(input_), "at": datetime(2026, 1, 1, tzinfo=UTC),
                 "ik": instance_key, "key": key,
                 "hash": _request_hash(input_, instance_key) if key else None})


def test_0004_drops_the_request_hash_and_downgrade_recomputes_it(
    empty_url: str, sync_engine: Engine
) -> None:
    upgrade(empty_url, "0003")
    _insert_0003_instances(sync_engine)
    upgrade(empty_url)
    columns = {c["name"] for c in inspect(sync_engine).get_columns("flow_instance")}
    assert "request_hash" not in columns and "idempotency_key" in columns
    downgrade(empty_url, "0003")
    with sync_engine.connect() as conn:
        rows = conn.execute(text(
            "SELECT id, request_hash FROM flow_instance ORDER BY id")).all()
    expected = {id_: _request_hash(input_, ik) if key else None
                for id_, input_, ik, key in _KEYED}
    assert dict(rows) == expected
