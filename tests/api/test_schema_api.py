"""The server refuses to start on a schema behind head and says which command to run."""

from __future__ import annotations

import logging

import pytest

from flowpark.errors import SchemaBehindHead
from flowpark.runtime.app import create_app
from flowpark.store.migrate import downgrade, upgrade
from tests.support.db import query
from tests.support.server import ServerStartFailed, live_server, server_settings


def _tables(url: str) -> set[str]:
    return {r[0] for r in query(url, "SELECT name FROM sqlite_master WHERE type = 'table'")}


async def test_lifespan_raises_schema_behind_head_on_an_empty_database(sqlite_url: str) -> None:
    app = create_app(server_settings(sqlite_url, "http://127.0.0.1:9"))

    with pytest.raises(SchemaBehindHead) as raised:
        async with app.router.lifespan_context(app):
            pytest.fail("the app started on an unmigrated database")

    assert raised.value.code == "schema_behind_head"
    assert "flowpark db upgrade" in str(raised.value)
    assert raised.value.fields["current"] is None
    # it refused; it did not quietly create the schema itself
    assert "flow_instance" not in _tables(sqlite_url)


async def test_lifespan_refuses_a_database_migrated_down(sqlite_url: str) -> None:
    upgrade(sqlite_url)
    downgrade(sqlite_url, "base")
    app = create_app(server_settings(sqlite_url, "http://127.0.0.1:9"))

    with pytest.raises(SchemaBehindHead, match="flowpark db upgrade"):
        async with app.router.lifespan_context(app):
            pytest.fail("the app started on a database behind head")


def test_uvicorn_does_not_serve_on_an_unmigrated_database(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)

    with pytest.raises(ServerStartFailed), live_server(sqlite_url):
        pytest.fail("the server started on an unmigrated database")

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "flowpark db upgrade" in logged


async def test_after_upgrade_the_same_database_starts(sqlite_url: str) -> None:
    upgrade(sqlite_url)
    app = create_app(server_settings(sqlite_url, "http://127.0.0.1:9", run_sweeper=False))

    async with app.router.lifespan_context(app):
        assert app.state.engine is not None
