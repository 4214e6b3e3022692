"""flowpark's migrations beside an application's own Alembic history in one database.

The application here has its own ``alembic_version``, its own tables named ``outbox_event``
and ``review_item`` (names flowpark's tables had before 0025) and revision ids that are
flowpark's too (``0001``). Run in either order, or flowpark's from inside the application's
Alembic run (its ``env.py``, before, inside or after its own migrations, or one of its
migrations), each history sees only its own version row and tables, and both upgrade again
as no-ops. The application's Alembic context, ``op`` and logging are left as they were.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine

from flowpark import migrations
from flowpark.store.db import sync_url
from flowpark.store.tables import metadata
from tests.support.migrations import diff_from_models, table_names, versions

#: The application's env.py: flowpark's upgrade on its connection where ``flowpark`` says.
HOST_ENV = """
from alembic import context
from sqlalchemy import create_engine, pool

from flowpark import migrations as flowpark_migrations

config = context.config
where = config.attributes.get("flowpark")
schema = config.attributes.get("flowpark_schema")
engine = create_engine(config.attributes["url"], poolclass=pool.NullPool)
with engine.connect() as connection:
    if where == "before":
        flowpark_migrations.upgrade(connection, schema=schema)
    context.configure(
        connection=connection,
        target_metadata=None,
        include_name=flowpark_migrations.include_name,
    )
    with context.begin_transaction():
        context.run_migrations()
        if where == "inside":
            flowpark_migrations.upgrade(connection, schema=schema)
    if where == "after":
        flowpark_migrations.upgrade(connection, schema=schema)
engine.dispose()
"""

#: The application's first revision: an id flowpark's history has too.
HOST_0001 = """
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "outbox_event",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("topic", sa.String(50), nullable=False),
    )
    op.create_index("ix_outbox_event_instance", "outbox_event", ["topic"])
    op.create_table(
        "review_item",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("verdict", sa.String(50), nullable=True),
    )


def downgrade():
    op.drop_table("review_item")
    op.drop_table("outbox_event")
"""

#: Its second: runs flowpark's migrations from inside itself, then goes on with ``op``.
HOST_0002 = """
import sqlalchemy as sa
from alembic import context, op

from flowpark import migrations as flowpark_migrations

revision = "h002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    if context.config.attributes.get("flowpark") == "migration":
        flowpark_migrations.upgrade(
            op.get_bind(), schema=context.config.attributes.get("flowpark_schema")
        )
    op.create_table("invoice", sa.Column("id", sa.Integer(), primary_key=True))


def downgrade():
    op.drop_table("invoice")
"""

HOST_TABLES = {"outbox_event", "review_item", "invoice", "alembic_version"}
FLOWPARK_TABLES = set(migrations.TABLES)
#: where flowpark's upgrade runs: on its own before or after the application's, or from
#: the application's env.py or migration
ORDERS = ["flowpark first", "application first", "before", "inside", "after", "migration"]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    """A fresh, empty database of each kind."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def engine(empty_url: str) -> Iterator[Engine]:
    made = create_engine(sync_url(empty_url))
    try:
        yield made
    finally:
        made.dispose()


def _host_config(tmp_path: Path, url: str, where: str | None, schema: str | None) -> Config:
    """An Alembic config for the application's history, written into ``tmp_path``."""
    folder = tmp_path / "host_migrations"
    (folder / "versions").mkdir(parents=True, exist_ok=True)
    (folder / "env.py").write_text(HOST_ENV)
    (folder / "versions" / "0001_host_tables.py").write_text(HOST_0001)
    (folder / "versions" / "h002_invoices.py").write_text(HOST_0002)
    config = Config()
    config.set_main_option("script_location", str(folder))
    config.attributes["url"] = sync_url(url)
    config.attributes["flowpark"] = where
    config.attributes["flowpark_schema"] = schema
    return config


def _run(order: str, url: str, tmp_path: Path, schema: str | None = None) -> None:
    if order == "flowpark first":
        migrations.upgrade(url, schema=schema)
    embedded = None if order.endswith("first") else order
    command.upgrade(_host_config(tmp_path, url, embedded, schema), "head")
    if order == "application first":
        migrations.upgrade(url, schema=schema)


def _the_applications(difference: Any) -> bool:
    """Whether an autogenerate difference is a table or index of the application's (not
    in flowpark's models: "remove")."""
    if not isinstance(difference, tuple) or difference[0] not in ("remove_table", "remove_index"):
        return False
    table = getattr(difference[1], "table", difference[1])
    return getattr(table, "name", None) in HOST_TABLES


def _host_columns(engine: Engine, table: str) -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


@pytest.mark.parametrize("order", ORDERS)
def test_each_history_keeps_to_its_own_version_row_and_tables(
    order: str, empty_url: str, engine: Engine, tmp_path: Path
) -> None:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    host_logger = logging.getLogger("host.app")

    _run(order, empty_url, tmp_path)

    head = migrations.head_revision()
    assert versions(engine) == {"alembic_version": ["h002"], "flow_alembic_version": [head]}
    assert table_names(engine) == HOST_TABLES | FLOWPARK_TABLES
    assert _host_columns(engine, "outbox_event") == {"id", "topic"}
    assert _host_columns(engine, "review_item") == {"id", "verdict"}
    assert migrations.current_revision(empty_url) == head
    with engine.connect() as conn:  # flowpark's tables are whole: the models' indexes too
        assert [d for d in diff_from_models(engine) if not _the_applications(d)] == []
        assert conn.execute(text("SELECT count(*) FROM flow_outbox_event")).scalar_one() == 0
    # the application's logging as it was: nothing configured behind its back
    assert (root.handlers, root.level, host_logger.disabled) == (handlers, level, False)

    # both again: nothing to do, nothing moved
    migrations.upgrade(empty_url)
    command.upgrade(_host_config(tmp_path, empty_url, None, None), "head")
    assert versions(engine) == {"alembic_version": ["h002"], "flow_alembic_version": [head]}
    assert table_names(engine) == HOST_TABLES | FLOWPARK_TABLES


def test_the_applications_autogenerate_leaves_flowparks_tables_out(
    empty_url: str, engine: Engine, tmp_path: Path
) -> None:
    """With ``include_name``, autogenerate over the application's models does not propose
    to drop flowpark's tables (it still sees the application's own)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import MetaData

    _run("flowpark first", empty_url, tmp_path)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": migrations.include_name})
        proposed = compare_metadata(context, MetaData())
    dropped = {d[1].name for d in proposed if d[0] == "remove_table"}
    assert dropped == {"outbox_event", "review_item", "invoice"}
    assert set(metadata.tables) | {migrations.VERSION_TABLE} == migrations.TABLES


@pytest.mark.postgres
@pytest.mark.parametrize("order", ["flowpark first", "application first", "inside"])
def test_in_a_schema_of_its_own_beside_the_applications_tables(
    order: str, pg_url: str, tmp_path: Path
) -> None:
    engine = create_engine(sync_url(pg_url))
    try:
        with engine.connect() as conn:
            path = conn.exec_driver_sql("SHOW search_path").scalar_one()
        _run(order, pg_url, tmp_path, schema="flowpark")
        head = migrations.head_revision()
        assert table_names(engine) == HOST_TABLES
        assert table_names(engine, "flowpark") == FLOWPARK_TABLES
        assert versions(engine) == {"alembic_version": ["h002"]}
        assert versions(engine, "flowpark") == {"flow_alembic_version": [head]}
        assert migrations.current_revision(pg_url, schema="flowpark") == head
        assert migrations.current_revision(pg_url) is None
        with engine.connect() as conn:  # a new connection: the server's own search_path
            assert conn.exec_driver_sql("SHOW search_path").scalar_one() == path
    finally:
        engine.dispose()
