"""A migrated database of the kind a module-scoped fixture's parameter names, for tests
that run one server per module and store (``sqlite`` or ``postgres``)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

__all__ = ["module_store"]


@contextmanager
def module_store(request: pytest.FixtureRequest, folder: Path) -> Iterator[str]:
    """A fresh database migrated to head, of the kind ``request.param`` names.

    Args:
        request: the fixture's request; its ``param`` is ``"sqlite"`` or ``"postgres"``.
        folder: where a SQLite file goes.

    Yields:
        The database URL (a copy of the session's SQLite template, or a clone of the
        PostgreSQL template, dropped afterwards).
    """
    from tests.conftest import pg_admin_url

    if request.param == "sqlite":
        path = folder / "flowpark.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
        yield f"sqlite:///{path}"
        return
    clones = request.getfixturevalue("_pg_clones")
    name = clones.take()
    try:
        yield make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        clones.drop(name)
