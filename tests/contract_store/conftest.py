"""The store under contract: one fixture, ``store``, parametrized over every store — in
memory, SQLite and PostgreSQL (marked ``postgres``; it FAILS when the server at
``FLOWPARK_TEST_PG_URL`` is unreachable, as every PostgreSQL test does). Each SQL store is
a fresh database migrated to head (a copy of the session's template, see
``tests/conftest.py``)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from flowpark.engine.ports import Store
from flowpark.store import SqlStore, make_async_engine
from flowpark.store.memory import MemoryStore
from tests.conftest import pg_admin_url


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """Every port of one store (the same test body runs on each)."""
    if request.param == "memory":
        yield MemoryStore()
        return
    if request.param == "sqlite":
        path = tmp_path / "flowpark.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
        url = f"sqlite:///{path}"
        name = None
    else:
        clones = request.getfixturevalue("_pg_clones")
        name = clones.take()
        url = make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    engine = make_async_engine(url)
    try:
        yield SqlStore(engine)
    finally:
        await engine.dispose()
        if name is not None:
            clones.drop(name)
