"""flowpark in a PostgreSQL schema of its own (``FLOWPARK_DATABASE_SCHEMA``): ``flowpark db
upgrade`` makes every table there and nothing in ``public``, a node built by ``create_app``
runs a sample document to its end there, and an application's connection reaches the same
tables with :func:`flowpark.store.db.schema_translate_map`."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, func, insert, select, text
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from flowpark import migrations
from flowpark.cli.main import app as cli
from flowpark.errors import SchemaBehindHead
from flowpark.runtime.app import create_app
from flowpark.store.db import (
    make_async_engine,
    make_sync_engine,
    schema_translate_map,
    sync_url,
)
from flowpark.store.mapping import INSTANCE, STEP
from flowpark.store.schema import check_schema_at_head
from tests.support.api import start_document, wait_for_state
from tests.support.migrations import object_names, table_names, versions
from tests.support.server import live_server, server_settings

pytestmark = pytest.mark.postgres

SCHEMA = "flowpark"


@pytest.fixture
def engine(pg_url: str) -> Iterator[Engine]:
    """A plain engine on the database (the server's own search_path)."""
    made = create_engine(sync_url(pg_url))
    try:
        yield made
    finally:
        made.dispose()


def _schemas(engine: Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(text("SELECT nspname FROM pg_namespace")).scalars())


def test_db_upgrade_puts_every_table_in_the_schema(pg_url: str, engine: Engine) -> None:
    in_public = table_names(engine, "public")
    done = CliRunner().invoke(cli, ["db", "upgrade", "--url", pg_url, "--schema", SCHEMA])
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(f"(schema {SCHEMA})")
    assert SCHEMA in _schemas(engine)
    assert table_names(engine, SCHEMA) == set(migrations.TABLES)
    assert table_names(engine, "public") == in_public == set()  # nothing new in public
    assert versions(engine, SCHEMA) == {"flow_alembic_version": [migrations.head_revision()]}
    names = object_names(engine, SCHEMA)
    assert len(names) >= 20 and all(table in name for table, name in names)
    with engine.connect() as conn:  # every index and sequence is in the schema too
        outside = conn.execute(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 'S')"
            )
        ).all()
    assert outside == []
    # the setting does the same, and again is nothing to do
    again = CliRunner().invoke(
        cli,
        ["db", "upgrade"],
        env={"FLOWPARK_DATABASE_URL": pg_url, "FLOWPARK_DATABASE_SCHEMA": SCHEMA},
    )
    assert again.exit_code == 0, again.output
    assert migrations.current_revision(pg_url, schema=SCHEMA) == migrations.head_revision()
    assert migrations.current_revision(pg_url) is None


def test_an_existing_schema_is_used_as_it_is(pg_url: str, engine: Engine) -> None:
    """A schema made beforehand (by a database administrator, owned by another role) is
    not made again."""
    with engine.begin() as conn:
        conn.execute(text(f"CREATE SCHEMA {SCHEMA}"))
        conn.execute(text(f"CREATE TABLE {SCHEMA}.kept (n integer)"))
    migrations.upgrade(pg_url, schema=SCHEMA)
    assert table_names(engine, SCHEMA) == set(migrations.TABLES) | {"kept"}


async def test_a_node_in_its_schema_runs_a_document_to_its_end(pg_url: str, engine: Engine) -> None:
    migrations.upgrade(pg_url, schema=SCHEMA)
    with live_server(pg_url, database_schema=SCHEMA) as server:
        assert server.settings.database_schema == SCHEMA
        async with server.client() as client:
            started = await start_document(client, pages=2)
            assert started.status_code in (200, 202), started.text
            instance_id = started.json()["instanceId"]
            view = await wait_for_state(client, instance_id, ("completed",), timeout=30)
    assert view["result"] is not None
    assert table_names(engine, "public") == set()
    with engine.connect() as conn:
        stored = conn.execute(
            text(f"SELECT state FROM {SCHEMA}.flow_instance WHERE id = :id"), {"id": instance_id}
        ).scalar_one()
    assert stored == "completed"


def test_an_applications_connection_reaches_the_tables_by_schema_translate_map(
    pg_url: str, engine: Engine
) -> None:
    """What an application does to write in flowpark's tables on its own connection (whose
    search_path is its own): SQLAlchemy statements over flowpark's tables, translated."""
    migrations.upgrade(pg_url, schema=SCHEMA)
    assert schema_translate_map(None) is None
    translated = schema_translate_map(SCHEMA)
    assert translated == {None: SCHEMA}
    at = datetime(2026, 1, 1, tzinfo=UTC)
    row = {
        "id": "01a22fac-b7c5-7d5a-b879-c2ae65cc796c",
        "flow_name": "document.process",
        "flow_version": "1.0.0",
        "state": "suspended",
        "created_at": at,
        "updated_at": at,
    }
    with engine.begin() as conn:  # the application's transaction
        in_flowpark = conn.execution_options(schema_translate_map=translated)
        in_flowpark.execute(insert(INSTANCE).values(**row))
        counted = in_flowpark.execute(select(func.count()).select_from(STEP))
        assert counted.scalar_one() == 0
    with engine.connect() as conn:
        stored = conn.execute(text(f"SELECT id::text, state FROM {SCHEMA}.flow_instance")).all()
    assert [tuple(r) for r in stored] == [(row["id"], "suspended")]
    assert table_names(engine, "public") == set()


async def test_a_node_refuses_its_schema_when_only_public_is_migrated(pg_url: str) -> None:
    migrations.upgrade(pg_url)  # public, not the schema
    app = create_app(server_settings(pg_url, "http://127.0.0.1:9", database_schema=SCHEMA))
    with pytest.raises(SchemaBehindHead) as refused:
        async with app.router.lifespan_context(app):
            pytest.fail("the node started on a schema never migrated")
    assert refused.value.fields["current"] is None
    node = make_async_engine(pg_url, schema=SCHEMA)
    try:
        with pytest.raises(SchemaBehindHead):
            await check_schema_at_head(node, SCHEMA)
        migrations.upgrade(pg_url, schema=SCHEMA)
        await check_schema_at_head(node, SCHEMA)
    finally:
        await node.dispose()


async def test_the_connections_own_options_are_kept(pg_url: str) -> None:
    """A URL's own libpq options stay; the schema's search_path comes after them."""
    migrations.upgrade(pg_url, schema=SCHEMA)
    url = f"{pg_url}?options=-c%20statement_timeout%3D4321"
    made = make_sync_engine(url, schema=SCHEMA)
    try:
        with made.connect() as conn:
            shown = (
                conn.exec_driver_sql("SHOW statement_timeout").scalar_one(),
                conn.exec_driver_sql("SHOW search_path").scalar_one(),
            )
    finally:
        made.dispose()
    assert shown == ("4321ms", SCHEMA)
    node = make_async_engine(url, schema=SCHEMA)
    try:
        async with node.connect() as conn:
            timeout = (await conn.exec_driver_sql("SHOW statement_timeout")).scalar_one()
            path = (await conn.exec_driver_sql("SHOW search_path")).scalar_one()
    finally:
        await node.dispose()
    assert (timeout, path) == ("4321ms", SCHEMA)
