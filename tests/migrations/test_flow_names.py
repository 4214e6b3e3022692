"""Migration 0025 and flowpark's own version table: a database an earlier release migrated
(its revision in ``alembic_version``, five tables under generic names) upgrades in place,
its rows kept under the ``flow_*`` names and its revision moved into
``flow_alembic_version``; down to 0024 gives the earlier layout back, and up again."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

from flowpark import migrations
from flowpark.errors import SchemaBehindHead
from flowpark.store.db import make_async_engine, sync_url
from flowpark.store.migrate import check_schema_at_head as alembic_check
from flowpark.store.migrate import current_revision, downgrade, head_revision, upgrade
from flowpark.store.schema import check_schema_at_head as startup_check
from flowpark.store.tables import metadata
from flowpark.store.version_table import VERSION_TABLE
from tests.support.migrations import diff_from_models, object_names, table_names, versions

#: the five tables 0025 renames, by their earlier names
RENAMED = ("outbox_event", "event_delivery", "review_item", "signal_delivery", "console_session")
INSTANCE = "01a22fac-b7c5-7d5a-b879-c2ae65cc796c"
AT = datetime(2026, 1, 1, tzinfo=UTC)
#: rows as a release at 0024 wrote them, by earlier table name
ROWS = {
    "outbox_event": [
        "INSERT INTO outbox_event (id, instance_id, name, payload, created_at) VALUES "
        "('e-1', :id, 'document.processed', '{\"pages\": 3}', :at)",
        "INSERT INTO outbox_event (id, instance_id, name, created_at, published_at) VALUES "
        "('e-2', :id, 'document.archived', :at, :at)",
    ],
    "event_delivery": [
        "INSERT INTO event_delivery (event_id, event_sequence, instance_id, subscriber, state, "
        "tries, next_try_at, created_at) VALUES ('e-1', 1, :id, 'billing', 'pending', 2, :at, :at)"
    ],
    "review_item": [
        "INSERT INTO review_item (id, instance_id, subject, reason, details, created_at, state, "
        "claimed_by, claimed_at) VALUES ('r-1', :id, 'doc-1', 'late', '{\"jobId\": \"j\"}', :at, "
        "'claimed', 'ana', :at)"
    ],
    "signal_delivery": [
        "INSERT INTO signal_delivery (flow_name, signal_name, delivery_id, instance_id, "
        "received_at) VALUES ('document.process', 'ocr.completed', 'msg_1', :id, :at)"
    ],
    "console_session": [
        "INSERT INTO console_session (id, token_fingerprint, created_at, last_seen_at) VALUES "
        "('s-1', 'fp', :at, :at)"
    ],
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    """A fresh, unmigrated database of each kind."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def engine(empty_url: str) -> Iterator[Engine]:
    made = create_engine(sync_url(empty_url))
    try:
        yield made
    finally:
        made.dispose()


def _at_0024_with_rows(url: str, engine: Engine) -> None:
    """The database as a release at 0024 left it, with a row or two in each renamed table."""
    upgrade(url, "0024")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO flow_instance (id, flow_name, flow_version, state, created_at, "
                "updated_at, fencing_token, cancel_requested) VALUES (:id, 'document.process', "
                "'1.0.0', 'completed', :at, :at, 1, false)"
            ),
            {"id": INSTANCE, "at": AT},
        )
        for statements in ROWS.values():
            for sql in statements:
                conn.execute(text(sql), {"id": INSTANCE, "at": AT})


def _rows(engine: Engine, tables: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of each table (by the earlier name), all columns, in key order."""
    found = {}
    with engine.connect() as conn:
        for table in tables:
            rows = conn.execute(text(f"SELECT * FROM {table} ORDER BY 1, 2, 3")).all()
            found[table.removeprefix("flow_")] = [tuple(r) for r in rows]
    return found


def test_a_database_migrated_before_0025_upgrades_in_place_and_back(
    empty_url: str, engine: Engine
) -> None:
    _at_0024_with_rows(empty_url, engine)
    # the layout a release before 0025 leaves: its revision in alembic_version
    assert versions(engine) == {"alembic_version": ["0024"]}
    assert set(RENAMED) <= table_names(engine)
    assert current_revision(empty_url) == migrations.current_revision(empty_url) == "0024"
    before = _rows(engine, RENAMED)
    assert all(before.values())

    upgrade(empty_url)

    head = head_revision()
    assert versions(engine) == {VERSION_TABLE: [head]}  # alembic_version is gone
    assert table_names(engine) == set(metadata.tables) | {VERSION_TABLE}
    assert _rows(engine, tuple(f"flow_{t}" for t in RENAMED)) == before
    assert diff_from_models(engine) == []
    names = object_names(engine)
    assert len(names) >= 20
    assert [(table, name) for table, name in names if table not in name] == []

    downgrade(empty_url, "0024")
    assert versions(engine) == {"alembic_version": ["0024"]}
    assert not {f"flow_{t}" for t in RENAMED} & table_names(engine)
    assert _rows(engine, RENAMED) == before

    upgrade(empty_url)
    assert versions(engine) == {VERSION_TABLE: [head]}
    assert _rows(engine, tuple(f"flow_{t}" for t in RENAMED)) == before
    assert diff_from_models(engine) == []


def test_new_rows_follow_the_rows_kept(empty_url: str, engine: Engine) -> None:
    """The sequences behind ``sequence`` came along with their tables."""
    _at_0024_with_rows(empty_url, engine)
    upgrade(empty_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO flow_outbox_event (id, instance_id, name, created_at) "
                "VALUES ('e-3', :id, 'document.more', :at)"
            ),
            {"id": INSTANCE, "at": AT},
        )
        sequences = conn.execute(
            text("SELECT id, sequence FROM flow_outbox_event ORDER BY sequence")
        ).all()
    assert [id_ for id_, _ in sequences] == ["e-1", "e-2", "e-3"]
    assert sequences[2][1] > sequences[1][1]


def test_an_application_row_of_alembic_version_is_never_touched(
    empty_url: str, engine: Engine
) -> None:
    _at_0024_with_rows(empty_url, engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO alembic_version (version_num) VALUES ('a1b2c3d4')"))
    upgrade(empty_url)
    assert versions(engine) == {"alembic_version": ["a1b2c3d4"], VERSION_TABLE: [head_revision()]}
    downgrade(empty_url, "0024")  # not back beside the other history's row
    assert versions(engine) == {"alembic_version": ["a1b2c3d4"], VERSION_TABLE: ["0024"]}
    assert current_revision(empty_url) == "0024"
    upgrade(empty_url)
    assert versions(engine) == {"alembic_version": ["a1b2c3d4"], VERSION_TABLE: [head_revision()]}


def test_a_failed_upgrade_keeps_nothing(empty_url: str, engine: Engine) -> None:
    """The move of the revision and the renames are one transaction with the rest."""
    _at_0024_with_rows(empty_url, engine)
    with engine.begin() as conn:  # takes a name 0025 gives an index (one namespace)
        conn.execute(text("CREATE INDEX ix_flow_outbox_event_instance ON flow_node (role)"))
    before = _rows(engine, RENAMED)
    with pytest.raises(DBAPIError):
        upgrade(empty_url)
    assert versions(engine) == {"alembic_version": ["0024"]}
    assert not {f"flow_{t}" for t in RENAMED} & table_names(engine)
    assert _rows(engine, RENAMED) == before


async def test_a_node_refuses_a_database_whose_revision_is_still_in_alembic_version(
    empty_url: str, engine: Engine
) -> None:
    _at_0024_with_rows(empty_url, engine)
    node = make_async_engine(empty_url)
    try:
        for check in (startup_check, alembic_check):
            with pytest.raises(SchemaBehindHead) as refused:
                await check(node)
            assert refused.value.fields == {"current": "0024", "head": head_revision()}
            assert "alembic_version" in refused.value.message
            assert "run `flowpark db upgrade`" in refused.value.message
        upgrade(empty_url)
        await startup_check(node)
        await alembic_check(node)
    finally:
        await node.dispose()
