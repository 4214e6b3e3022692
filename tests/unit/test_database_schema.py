"""The setting ``database_schema`` (``FLOWPARK_DATABASE_SCHEMA``): a plain SQL identifier,
for PostgreSQL only; every way to a database refuses a bad one with a message that names
what is wrong (the setting, or the option)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from flowpark.cli.main import app
from flowpark.settings import Settings
from flowpark.store.db import (
    check_schema_name,
    make_async_engine,
    make_sync_engine,
    schema_connect_args,
    schema_translate_map,
)
from flowpark.store.migrate import upgrade

PG = "postgresql://flowpark@db.internal:5432/flowpark"
BAD = ["Flowpark", "1flow", "flow-park", "flow park", "flow;drop", "a" * 64, "pg_flow", "ä"]
GOOD = ["flowpark", "_flow", "flow_2", "a" * 63]


@pytest.mark.parametrize("name", BAD)
def test_a_schema_name_that_is_no_plain_identifier_is_refused(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings(database_url=PG, database_schema=name)
    [error] = refused.value.errors()
    assert error["loc"] == ("database_schema",)
    assert "schema name" in error["msg"]
    with pytest.raises(ValueError, match="schema name"):
        check_schema_name(name)
    with pytest.raises(ValueError, match="schema name"):
        schema_translate_map(name)


@pytest.mark.parametrize("name", GOOD)
def test_a_plain_identifier_is_taken(name: str) -> None:
    assert Settings(database_url=PG, database_schema=name).database_schema == name
    assert schema_connect_args(PG, name) == {"options": f"-c search_path={name}"}
    assert schema_translate_map(name) == {None: name}


def test_unset_or_empty_is_the_connections_default_schema() -> None:
    assert Settings(database_url=PG).database_schema is None
    assert Settings(database_url=PG, database_schema=" ").database_schema is None
    assert schema_connect_args(PG, None) == {}
    assert schema_translate_map(None) is None


def test_sqlite_refuses_a_schema_everywhere(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'flowpark.db'}"
    with pytest.raises(ValidationError, match="SQLite has no schemas") as refused:
        Settings(database_url=url, database_schema="flowpark")
    assert refused.value.errors()[0]["loc"] == ("database_schema",)
    for make in (make_async_engine, make_sync_engine):
        with pytest.raises(ValueError, match="SQLite has no schemas"):
            make(url, schema="flowpark")
    with pytest.raises(ValueError, match="SQLite has no schemas"):
        upgrade(url, schema="flowpark")
    assert not (tmp_path / "flowpark.db").exists()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--url", PG, "--schema", "Flow-Park"], "schema name is a plain SQL identifier"),
        (["--url", "sqlite:///{tmp}/f.db", "--schema", "flowpark"], "SQLite has no schemas"),
    ],
)
def test_db_upgrade_refuses_a_bad_schema_option(args: list[str], why: str, tmp_path: Path) -> None:
    given = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = CliRunner().invoke(app, ["db", "upgrade", *given], env={"FLOWPARK_DATABASE_SCHEMA": ""})
    assert done.exit_code == 2, done.output
    assert "--schema" in done.output and why in " ".join(done.output.split())
    assert not (tmp_path / "f.db").exists()
