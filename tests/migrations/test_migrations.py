"""Migrations: upgrade an empty database to head, match the models, go down and up again."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Index, MetaData, create_engine, inspect, text
from sqlalchemy.engine import Engine

from flowpark.engine.decide.deadlines import RETRY_TOTAL, deadline_row
from flowpark.engine.ports import Commit
from flowpark.engine.records import Outcome, StepKind, StepRow
from flowpark.errors import SchemaBehindHead
from flowpark.store.db import make_async_engine, sync_url
from flowpark.store.migrate import (
    check_schema_at_head,
    current_revision,
    downgrade,
    head_revision,
    upgrade,
)
from flowpark.store.schema import check_schema_at_head as startup_check
from flowpark.store.schema import script_head
from flowpark.store.sql_store import SqlStore
from flowpark.store.tables import IDEMPOTENCY_DIGEST_SQL, include_in_compare, metadata
from flowpark.store.version_table import VERSION_TABLE

TABLES = {
    "flow_instance",
    "flow_step",
    "flow_signal",
    "flow_outbox_event",
    "flow_review_item",
    "flow_heartbeat",
    "flow_stream",
    "flow_action",
    "flow_event_delivery",
    "flow_node",
    "flow_signal_delivery",
    "flow_console_session",
    "flow_correlation",
    "flow_provider",
    "flow_provider_minute",
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
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_object": include_in_compare(engine.dialect.name),
                "version_table": VERSION_TABLE,
            },
        )
        return list(compare_metadata(context, target))


def _user_tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {VERSION_TABLE, "alembic_version"}


def test_upgrade_head_on_an_empty_database_matches_the_models(
    empty_url: str, sync_engine: Engine
) -> None:
    assert current_revision(empty_url) is None
    upgrade(empty_url)
    assert current_revision(empty_url) == head_revision()
    assert _user_tables(sync_engine) == TABLES
    assert _diff(sync_engine, metadata) == []


def _layout(engine: Engine) -> dict[str, Any]:
    """Every table's columns in order (type, nullability, default), primary key, unique
    constraints and indexes; on PostgreSQL the sequences too."""
    insp = inspect(engine)
    found: dict[str, Any] = {}
    for table in sorted(_user_tables(engine)):
        found[table] = {
            "columns": [
                (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                for c in insp.get_columns(table)
            ],
            "primary_key": insp.get_pk_constraint(table),
            "unique": sorted(
                (u["name"], tuple(u["column_names"])) for u in insp.get_unique_constraints(table)
            ),
            "indexes": sorted(
                (ix["name"], str(ix["column_names"]), str(ix.get("expressions")), ix["unique"])
                + tuple(sorted(f"{k}={v}" for k, v in ix.get("dialect_options", {}).items()))
                for ix in insp.get_indexes(table)
            ),
        }
    if engine.dialect.name == "postgresql":
        found["sequences"] = sorted(insp.get_sequence_names())
    return found


def test_the_migrations_one_by_one_make_what_the_models_make(
    empty_url: str, sync_engine: Engine
) -> None:
    """A new database is made from the models at once (``upgrade`` to head of an empty
    one); a database migrated revision by revision is the same, columns in the same order,
    and autogenerate finds no difference between the migrations and the models."""
    upgrade(empty_url, "0001")
    upgrade(empty_url)
    assert current_revision(empty_url) == head_revision()
    assert _user_tables(sync_engine) == TABLES
    assert _diff(sync_engine, metadata) == []
    one_by_one = _layout(sync_engine)
    downgrade(empty_url, "base")
    assert _user_tables(sync_engine) == set()
    upgrade(empty_url)
    assert _layout(sync_engine) == one_by_one


def _shape(index: Index) -> tuple[str | None, tuple[str, ...]]:
    return index.name, tuple(str(e) for e in index.expressions)


def test_compare_is_live(empty_url: str, sync_engine: Engine) -> None:
    """The no-difference check would notice a model the migration does not create."""
    upgrade(empty_url)
    changed = MetaData()
    for table in metadata.sorted_tables:
        copy = table.to_metadata(changed)
        # to_metadata does not copy an index's info (which dialect it is for)
        infos = {_shape(ix): ix.info for ix in table.indexes}
        for ix in copy.indexes:
            ix.info.update(infos[_shape(ix)])
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


def test_the_idempotency_index_is_a_digest_on_postgresql_and_the_texts_on_sqlite(
    empty_url: str,
    sync_engine: Engine,
) -> None:
    """The comparison leaves the expression index out (include_in_compare): its definition
    is checked here, and dropping it would be noticed."""
    upgrade(empty_url)
    with sync_engine.connect() as conn:
        if sync_engine.dialect.name == "sqlite":
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE name = 'uq_flow_instance_idempotency'"
            ).scalar_one()
            assert "(flow_name, idempotency_key)" in sql and "UNIQUE" in sql.upper()
        else:
            sql = conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'uq_flow_instance_idempotency'"
            ).scalar_one()
            assert sql.startswith("CREATE UNIQUE INDEX")
            assert "sha256" in sql and "::uuid" in sql and "idempotency_key IS NOT NULL" in sql
            # the digest SQL the store queries with is what the index holds
            row = conn.exec_driver_sql(
                f"SELECT {IDEMPOTENCY_DIGEST_SQL} FROM (SELECT 'f' AS flow_name, "
                "'a\\101' AS idempotency_key) AS t"
            ).scalar_one()
            assert str(row) == str(uuid.UUID(bytes=hashlib.sha256(b"f\na\\101").digest()[:16]))


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
        assert info.value.code == "schema_behind_head"
        assert "flowpark db upgrade" in info.value.message
        assert info.value.fields == {"current": None, "head": head_revision()}
        upgrade(empty_url)
        await check_schema_at_head(engine)
    finally:
        await engine.dispose()


async def test_start_up_check_reads_revisions_without_alembic(empty_url: str) -> None:
    """The node's check (flowpark.store.schema) refuses what Alembic's refuses, with the same
    fields, and at head it passes on its own reading of the scripts and the table."""
    assert script_head() == head_revision()
    engine = make_async_engine(empty_url)
    try:
        with pytest.raises(SchemaBehindHead) as info:
            await startup_check(engine)
        assert info.value.fields == {"current": None, "head": head_revision()}
        upgrade(empty_url)
        await startup_check(engine)
        previous = _previous_revision()
        downgrade(empty_url, previous)
        with pytest.raises(SchemaBehindHead) as info:
            await startup_check(engine)
        assert info.value.fields == {"current": previous, "head": head_revision()}
    finally:
        await engine.dispose()


def test_start_up_check_at_head_imports_no_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flowpark.db'}"
    upgrade(url)
    probe = (
        "import asyncio, sys\n"
        "from flowpark.store import check_schema_at_head, make_async_engine\n"
        "async def main():\n"
        f"    engine = make_async_engine({url!r})\n"
        "    await check_schema_at_head(engine)\n"
        "    await engine.dispose()\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('alembic', 'mako')))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def _previous_revision() -> str:
    from alembic.script import ScriptDirectory

    from flowpark.store.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config()).get_revision(head_revision())
    assert script is not None and isinstance(script.down_revision, str)
    return script.down_revision


def _request_hash(input_: Any, instance_key: str | None) -> str:
    """The request hash revision 0003's code stored (sha256 of the start's request)."""
    blob = json.dumps(
        {"input": input_, "instanceKey": instance_key},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


_KEYED: list[tuple[str, dict[str, Any], str | None, str | None]] = [
    # (id, input, instance_key, idempotency_key)
    ("01a22fac-b7c5-7d5a-b879-c2ae65cc796c", {"documentId": "d-1", "pages": 3}, None, "k-1"),
    ("01a22fac-b7b9-7a11-9f87-f954f4788071", {"b": [1, True], "a": "é"}, "doc-2", "k-2"),
    ("01a22fac-b7bb-7d24-9288-2510e28dc682", {"documentId": "d-3"}, "doc-3", None),
]


def _insert_0003_rows(engine: Engine, ids: list[str] | None = None) -> None:
    """Instances as the 0003 code wrote them (request hash on keyed starts), each with a
    row in every table that names its instance."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    keyed = [
        (ids[n] if ids else id_, input_, instance_key, key)
        for n, (id_, input_, instance_key, key) in enumerate(_KEYED)
    ]
    with engine.begin() as conn:
        for n, (id_, input_, instance_key, key) in enumerate(keyed):
            conn.execute(
                text(
                    "INSERT INTO flow_instance (id, flow_name, flow_version, state, input, "
                    "created_at, updated_at, fencing_token, cancel_requested, instance_key, "
                    "idempotency_key, request_hash) VALUES (:id, 'document.process', '1.0.0', "
                    "'suspended', :input, :at, :at, 1, false, :ik, :key, :hash)"
                ),
                {
                    "id": id_,
                    "input": json.dumps(input_),
                    "at": at,
                    "ik": instance_key,
                    "key": key,
                    "hash": _request_hash(input_, instance_key) if key else None,
                },
            )
            row = {"id": id_, "at": at, "n": str(n)}
            for sql in (
                "INSERT INTO flow_step (instance_id, step_id, scope, kind, capability_id, "
                "outcome, try_number, final, started_at, committed_at) VALUES "
                "(:id, 0, 0, 'step', 'ocr.upload', 'success', 1, false, :at, :at)",
                "INSERT INTO flow_signal (id, instance_id, name, received_at) "
                "VALUES (:n, :id, 'ocr.completed', :at)",
                "INSERT INTO flow_heartbeat (instance_id, step_id, scope, try_number, "
                "recorded_at) VALUES (:id, 1, 0, 1, :at)",
                "INSERT INTO flow_stream (instance_id, stream, size, created_at) "
                "VALUES (:id, 'progress', 1, :at)",
                "INSERT INTO outbox_event (id, instance_id, name, created_at) "
                "VALUES (:n, :id, 'document.processed', :at)",
                "INSERT INTO review_item (id, instance_id, subject, reason, created_at) "
                "VALUES (:n, :id, 's', 'r', :at)",
            ):
                conn.execute(text(sql), row)


_ID_COLUMNS = [("flow_instance", "id")] + [
    (t, "instance_id")
    for t in (
        "flow_step",
        "flow_signal",
        "flow_heartbeat",
        "flow_stream",
        "outbox_event",
        "review_item",
    )
]


def _ids_and_types(engine: Engine, *, at_head: bool = False) -> dict[str, tuple[list[str], str]]:
    """Per table (by its name before 0025): its instance ids (as text, sorted) and the
    column's type name; ``at_head`` reads the tables under their names from 0025 on."""
    found = {}
    with engine.connect() as conn:
        for name, column in _ID_COLUMNS:
            table = name if not at_head or name.startswith("flow_") else f"flow_{name}"
            ids = (
                conn.execute(text(f"SELECT CAST({column} AS VARCHAR) FROM {table} ORDER BY 1"))
                .scalars()
                .all()
            )
            kind = next(
                str(c["type"]) for c in inspect(conn).get_columns(table) if c["name"] == column
            )
            found[name] = (list(ids), kind)
    return found


def test_0004_makes_ids_uuid_on_postgresql_and_drops_the_request_hash(
    empty_url: str, sync_engine: Engine
) -> None:
    """Upgrade keeps every id (``uuid`` on PostgreSQL, text on SQLite) and drops the hash;
    downgrade turns the ids back into text and recomputes the hashes."""
    upgrade(empty_url, "0003")
    _insert_0003_rows(sync_engine)
    ids = sorted(id_ for id_, *_ in _KEYED)
    before = _ids_and_types(sync_engine)
    assert all(found == (ids, "VARCHAR") for found in before.values())
    upgrade(empty_url)
    postgres = sync_engine.dialect.name == "postgresql"
    after = _ids_and_types(sync_engine, at_head=True)
    assert all(found == (ids, "UUID" if postgres else "VARCHAR") for found in after.values())
    columns = {c["name"] for c in inspect(sync_engine).get_columns("flow_instance")}
    assert "request_hash" not in columns and "idempotency_key" in columns
    downgrade(empty_url, "0003")
    assert _ids_and_types(sync_engine) == before
    with sync_engine.connect() as conn:
        rows = conn.execute(text("SELECT id, request_hash FROM flow_instance ORDER BY id")).all()
    expected = {id_: _request_hash(input_, ik) if key else None for id_, input_, ik, key in _KEYED}
    assert dict(rows) == expected
    upgrade(empty_url)
    assert _diff(sync_engine, metadata) == []


@pytest.mark.parametrize("bad", ["i-1", _KEYED[0][0].upper()])
def test_0004_refuses_ids_that_are_not_canonical_uuids(
    empty_url: str, sync_engine: Engine, bad: str
) -> None:
    upgrade(empty_url, "0003")
    _insert_0003_rows(sync_engine, [_KEYED[0][0], bad, _KEYED[2][0]])
    with pytest.raises(RuntimeError, match="not a canonical UUID string"):
        upgrade(empty_url)
    assert current_revision(empty_url) == "0003"


def _insert_steps(engine: Engine, instance_id: str, steps: list[tuple[int | None, int]]) -> None:
    """Journal rows ``(sequence or None for the store's default, step_id)``."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        for sequence, step_id in steps:
            conn.execute(
                text(
                    "INSERT INTO flow_step ("
                    + ("sequence, " if sequence else "")
                    + "instance_id, step_id, scope, kind, capability_id, outcome, try_number, "
                    "final, started_at, committed_at) VALUES ("
                    + (":seq, " if sequence else "")
                    + ":id, :step, 0, 'step', 'c', 'success', 1, false, :at, :at)"
                ),
                {"seq": sequence, "id": instance_id, "step": step_id, "at": at},
            )


def _steps(engine: Engine) -> list[tuple[int, int]]:
    """``(sequence, step_id)`` of every journal row; on SQLite also checks rowid."""
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            rows = conn.execute(
                text("SELECT rowid, sequence, step_id FROM flow_step ORDER BY sequence")
            ).all()
            assert all(r[0] == r[1] for r in rows), rows  # the rowid is the sequence
            return [(r[1], r[2]) for r in rows]
        return [
            tuple(r)
            for r in conn.execute(
                text("SELECT sequence, step_id FROM flow_step ORDER BY sequence")
            ).all()
        ]


async def test_0005_keeps_every_sequence_and_continues_after_the_highest(
    empty_url: str, sync_engine: Engine
) -> None:
    """The journal keyed by execution keeps each row's sequence (SQLite: as its rowid),
    and new rows continue after the highest, before and after a downgrade."""
    upgrade(empty_url, "0003")
    instance_id = _KEYED[0][0]
    _insert_0003_rows(sync_engine)
    upgrade(empty_url, "0004")
    _insert_steps(sync_engine, instance_id, [(5, 10), (9, 11), (7, 12)])  # gaps, any order
    before = _steps(sync_engine)
    upgrade(empty_url)
    assert _steps(sync_engine) == before
    keys = inspect(sync_engine).get_pk_constraint("flow_step")
    assert keys["constrained_columns"] == ["instance_id", "step_id", "scope", "kind", "try_number"]
    engine = make_async_engine(empty_url)
    try:
        journal = SqlStore(engine)
        row = StepRow(
            instance_id=instance_id,
            step_id=13,
            scope=0,
            kind=StepKind.STEP,
            capability_id="c",
            outcome=Outcome.SUCCESS,
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
            committed_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        await journal.runs.claim(
            instance_id, "node-a", row.started_at, datetime(2026, 1, 2, tzinfo=UTC)
        )
        await journal.runs.commit_step(2, row, datetime(2026, 1, 2, tzinfo=UTC))
    finally:
        await engine.dispose()
    assert _steps(sync_engine)[-1] == (10, 13)
    downgrade(empty_url, "0004")
    _insert_steps(sync_engine, instance_id, [(None, 14)])
    assert _steps(sync_engine) == [*before, (10, 13), (11, 14)]
    upgrade(empty_url)
    assert _steps(sync_engine) == [*before, (10, 13), (11, 14)]
    assert _diff(sync_engine, metadata) == []


_ENDS = "2026-01-01T04:00:00.123456+00:00"


def _insert_0018_deadlines(engine: Engine, instance_id: str) -> None:
    """Journal rows as the 0018 code wrote them: a deadline's end in ``values``, a row
    that puts nothing with ``{}``, a step's values."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        (0, 0, "deadline", "retry.total", 1, {"endsAt": "2026-01-01T00:03:00+00:00"}),
        (1, 0, "deadline", "poll.budget", 1, {"endsAt": _ENDS}),
        (1, 0, "deadline", "poll.budget", 2, {"endsAt": "2026-01-01T05:00:00.000001+00:00"}),
        (0, 0, "step", "ocr.upload", 1, {"ocr.job": {"jobId": "j-1"}}),
        (2, 0, "step", "ocr.status", 1, {}),
    ]
    with engine.begin() as conn:
        for n, (step_id, scope, kind, capability, try_number, values) in enumerate(rows):
            conn.execute(
                text(
                    "INSERT INTO flow_step (sequence, instance_id, step_id, scope, kind, "
                    'capability_id, outcome, try_number, "values", final, started_at, '
                    "committed_at) VALUES (:seq, :id, :step, :scope, :kind, :cap, 'success', "
                    ":try, :values, false, :at, :at)"
                ),
                {
                    "seq": n + 1,
                    "id": instance_id,
                    "step": step_id,
                    "scope": scope,
                    "kind": kind,
                    "cap": capability,
                    "try": try_number,
                    "values": json.dumps(values),
                    "at": at,
                },
            )


def _stored_steps(engine: Engine, *, ends: bool) -> list[tuple[Any, ...]]:
    """``(capability, try, values, ends_at as text or None)`` by sequence."""
    column = ", CAST(ends_at AS VARCHAR)" if ends else ""
    with engine.connect() as conn:
        rows = conn.execute(
            text(  # noqa: S608
                f'SELECT capability_id, try_number, "values"{column} FROM flow_step '
                "ORDER BY sequence"
            )
        ).all()
    return [(r[0], r[1], json.loads(r[2]) if isinstance(r[2], str) else r[2], *r[3:]) for r in rows]


async def test_0019_moves_each_deadline_end_into_ends_at_and_back(
    empty_url: str, sync_engine: Engine
) -> None:
    """Upgrade moves every deadline row's ``endsAt`` into ``ends_at`` (its values NULL) and
    the store reads the same values back; downgrade writes them back into ``values``."""
    upgrade(empty_url, "0018")
    instance_id = _KEYED[0][0]
    _insert_0003_rows_at_head_shape(sync_engine, instance_id)
    _insert_0018_deadlines(sync_engine, instance_id)
    before = _stored_steps(sync_engine, ends=False)
    upgrade(empty_url)
    after = _stored_steps(sync_engine, ends=True)
    assert [(r[0], r[1], r[2]) for r in after] == [
        ("retry.total", 1, None),
        ("poll.budget", 1, None),
        ("poll.budget", 2, None),
        ("ocr.upload", 1, {"ocr.job": {"jobId": "j-1"}}),
        ("ocr.status", 1, {}),
    ]
    assert all(r[3] is not None for r in after[:3]) and all(r[3] is None for r in after[3:])
    engine = make_async_engine(empty_url)
    try:
        journal = SqlStore(engine)
        steps = (await journal.runs.load(instance_id)).steps
        read = await journal.operator.poll_budget_ends([(instance_id, 1)])
    finally:
        await engine.dispose()
    assert [dict(s.values) for s in steps] == [r[2] for r in before]
    assert read == {(instance_id, 1): datetime(2026, 1, 1, 5, 0, 0, 1, tzinfo=UTC)}
    downgrade(empty_url, "0018")
    assert _stored_steps(sync_engine, ends=False) == before
    upgrade(empty_url)
    assert _diff(sync_engine, metadata) == []


async def test_0024_an_instance_parked_with_deadline_rows_resumes_with_the_same_budget(
    empty_url: str, sync_engine: Engine
) -> None:
    """An instance parked mid-poll before 0024 (each deadline a row of its own) reads the
    same journal and budget end after it; a new write then carries its deadline inside its
    row, and the downgrade refuses while such a row exists."""
    upgrade(empty_url, "0023")
    instance_id = _KEYED[0][0]
    _insert_0003_rows_at_head_shape(sync_engine, instance_id)
    _insert_0018_deadlines(sync_engine, instance_id)
    before = _stored_steps(sync_engine, ends=False)
    upgrade(empty_url)
    if sync_engine.dialect.name == "postgresql":  # the rows above were given sequences
        with sync_engine.begin() as conn:
            conn.execute(text("ALTER TABLE flow_step ALTER COLUMN sequence RESTART WITH 100"))
    engine = make_async_engine(empty_url)
    try:
        store = SqlStore(engine)
        after = (await store.runs.load(instance_id)).steps
        ends = await store.operator.poll_budget_ends([(instance_id, 1)])
        claim = await store.runs.claim(instance_id, "node-a", _T, _T + timedelta(seconds=30))
        assert claim is not None
        attempt = StepRow(instance_id, 2, 1, StepKind.STEP, "ocr.status", Outcome.SUCCESS, _T, _T)
        window = deadline_row(instance_id, 2, 2, RETRY_TOTAL, _T, _T + timedelta(minutes=3))
        await store.runs.commit(
            Commit(
                instance_id, claim.fencing_token, _T, _T + timedelta(seconds=30), (attempt, window)
            )
        )
        resumed = (await store.runs.load(instance_id)).steps
    finally:
        await engine.dispose()
    assert [(r.capability_id, r.try_number, dict(r.values)) for r in after] == before
    assert ends == {(instance_id, 1): datetime(2026, 1, 1, 5, 0, 0, 1, tzinfo=UTC)}
    assert resumed[: len(before)] == after
    assert [(r.kind, r.scope) for r in resumed[len(before) :]] == [
        (StepKind.STEP, 1),
        (StepKind.DEADLINE, 2),
    ]
    with sync_engine.connect() as conn:
        stored = conn.execute(text("SELECT count(*) FROM flow_step")).scalar_one()
    assert stored == len(before) + 1  # the window went inside the attempt's row
    with pytest.raises(RuntimeError, match="carry deadlines"):
        downgrade(empty_url, "0023")
    with sync_engine.begin() as conn:
        conn.execute(text("DELETE FROM flow_step WHERE carried IS NOT NULL"))
    downgrade(empty_url, "0023")
    upgrade(empty_url)
    assert _diff(sync_engine, metadata) == []


_T = datetime(2026, 1, 1, 1, tzinfo=UTC)


def _insert_0003_rows_at_head_shape(engine: Engine, instance_id: str) -> None:
    """One suspended ``document.process`` instance as the 0018 schema holds it."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO flow_instance (id, flow_name, flow_version, state, input, "
                "created_at, updated_at, fencing_token, cancel_requested) VALUES (:id, "
                "'document.process', '1.0.0', 'suspended', :input, :at, :at, 1, false)"
            ),
            {"id": instance_id, "input": json.dumps({"documentId": "d-1"}), "at": at},
        )


def test_0018_marks_the_instances_whose_compensation_failed_for_good(
    empty_url: str, sync_engine: Engine
) -> None:
    """Instances that ended before 0018 with a compensation whose last row is a final
    failure (and none of its rows a success) are marked; a retried one that succeeded, or
    a running one, is not."""
    upgrade(empty_url, "0017")
    at = datetime(2026, 1, 1, tzinfo=UTC)
    failed, retried, running = (str(uuid.uuid4()) for _ in range(3))
    with sync_engine.begin() as conn:
        for instance_id, state in (
            (failed, "cancelled"),
            (retried, "failed"),
            (running, "running"),
        ):
            conn.execute(
                text(
                    "INSERT INTO flow_instance (id, flow_name, flow_version, state, created_at, "
                    "updated_at, fencing_token, cancel_requested) VALUES (:id, 'f', '1', "
                    ":state, :at, :at, 1, false)"
                ),
                {"id": instance_id, "state": state, "at": at},
            )
        rows = [
            (failed, 1, "failure", True),
            (retried, 1, "failure", True),
            (retried, 2, "success", False),
            (running, 1, "failure", True),
        ]
        sqlite = sync_engine.dialect.name == "sqlite"  # the store numbers SQLite's rows
        for n, (instance_id, try_number, outcome, final) in enumerate(rows, start=1):
            conn.execute(
                text(
                    "INSERT INTO flow_step ("
                    + ("sequence, " if sqlite else "")
                    + "instance_id, step_id, scope, kind, capability_id, outcome, try_number, "
                    "final, started_at, committed_at) VALUES ("
                    + (":seq, " if sqlite else "")
                    + ":id, 0, 0, 'compensation', 'undo', :outcome, :try, :final, :at, :at)"
                ),
                {
                    "seq": n,
                    "id": instance_id,
                    "outcome": outcome,
                    "try": try_number,
                    "final": final,
                    "at": at,
                },
            )
    upgrade(empty_url)
    with sync_engine.connect() as conn:
        found = conn.execute(text("SELECT id, compensation_failed FROM flow_instance")).all()
        marked: dict[Any, Any] = {row[0]: row[1] for row in found}
    assert {str(k): bool(v) for k, v in marked.items()} == {
        failed: True,
        retried: False,
        running: False,
    }
    downgrade(empty_url, "0017")
    columns = {c["name"] for c in inspect(sync_engine).get_columns("flow_instance")}
    assert "compensation_failed" not in columns
    upgrade(empty_url)
    assert _diff(sync_engine, metadata) == []
