"""Shared fixtures: fresh, migrated databases of each kind, and a SqlStore over them.

* ``sqlite_url``: a SQLite file in the test's tmp dir (not migrated).
* ``pg_url``: a freshly created, uniquely named PostgreSQL database (not migrated), dropped
  afterwards. The server is ``FLOWPARK_TEST_PG_URL`` (an admin URL, default
  ``postgresql://postgres@127.0.0.1:5432/postgres``); when it is unreachable the test FAILS.
* ``store_url``: parametrized ``sqlite`` / ``postgres`` (marked ``postgres``): a fresh
  database migrated to head with Alembic (copied from a template migrated once a session;
  a PostgreSQL clone is made while the test before it runs).
* ``sql_store_url``: the same, for the tests of the SQL stores (the engine tier overrides
  ``store_url`` with the memory store).
* ``sql_engine`` / ``sql_store``: an async engine and a :class:`SqlStore` on ``sql_store_url``.

Every test fails (at teardown) that leaves an aiosqlite connection open on an event loop it
closed: see :func:`pytest_runtest_teardown`.

Under pytest-xdist (``pytest -n auto``: ``--dist loadscope --no-loadscope-reorder``, see
pyproject.toml) each module runs whole on one worker, and the workers take modules in
collection order as they free up; :func:`pytest_collection_modifyitems` puts the costliest
modules first (by ``tests/durations.json``), so the long multi-process modules start at once
and the many short ones fill the workers' ends.
"""

from __future__ import annotations

import asyncio
import compileall
import json
import os
import shutil
import sys
import traceback
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiosqlite.core
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.db import make_async_engine, sync_url
from flowpark.store.migrate import upgrade
from flowpark.store.sql_store import SqlStore

DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
#: Seconds each test module took (sum of its tests' setup, call and teardown), measured by
#: ``python -m tests.support.durations``; only their order matters.
DURATIONS = Path(__file__).with_name("durations.json")
#: What a module missing from it is taken to cost, per test (slow-marked or not).
UNKNOWN_SLOW_SECONDS = 5.0
UNKNOWN_SECONDS = 0.1

# pytest-xdist gives its workers COLUMNS=80 and LINES=24; a worker then looks like a terminal of
# that size to what reads them (rich's console sizes itself once, when the CLI is imported),
# which a run without workers is not: drop them, so both runs see the same environment.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


#: aiosqlite connections made on an event loop: their loop and where they were made
_connections: dict[aiosqlite.core.Connection, tuple[weakref.ref[Any], traceback.StackSummary]] = {}
_connection_init = aiosqlite.core.Connection.__init__


def _tracked_init(self: aiosqlite.core.Connection, *args: Any, **kwargs: Any) -> None:
    _connection_init(self, *args, **kwargs)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    made = traceback.StackSummary.from_list(traceback.extract_stack(limit=25)[:-1])
    _connections[self] = (weakref.ref(loop), made)


aiosqlite.core.Connection.__init__ = _tracked_init  # type: ignore[method-assign]


def _fail_on_open_connections() -> None:
    """Fail if an aiosqlite connection is left open on an event loop now closed.

    Such a connection (an engine never disposed, a task still connecting when its loop
    closed) makes its worker thread raise "Event loop is closed" later, in whichever test
    runs then. Its worker thread is joined here, so that an error it raises is reported for
    this test; an open one is closed (on a loop of its own) and reported with where it was
    made.
    """
    leaks = []
    for conn, (loop_ref, made) in list(_connections.items()):
        loop = loop_ref()
        if loop is not None and not loop.is_closed():
            continue
        del _connections[conn]
        if conn._connection is not None:
            asyncio.run(conn.close())
            leaks.append("".join(traceback.format_list(made)))
        elif conn._thread.ident is not None:
            conn._thread.join(timeout=10)  # a closed connection's thread has ended already
            if conn._thread.is_alive():
                busy = "(its worker thread still busy)\n"
                leaks.append(busy + "".join(traceback.format_list(made)))
    if leaks:
        pytest.fail(
            f"{len(leaks)} aiosqlite connection(s) left open after the event loop closed, "
            "made at:\n" + "\n".join(leaks),
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def _no_open_aiosqlite_connection() -> Iterator[None]:
    """Fail the test that leaves an aiosqlite connection open on its event loop (torn down
    after the test's loop is closed: an error the worker thread raises is this test's)."""
    yield
    _fail_on_open_connections()


#: The packages whose bytecode the suite's processes share (see :func:`pytest_configure`).
COMPILED = ("flowpark", "samples")


def pytest_configure(config: pytest.Config) -> None:
    """Where bytecode is not written (``PYTHONDONTWRITEBYTECODE``), compile the product's
    modules once, before any worker starts: every process the suite starts (the xdist
    workers and some 170 ``flowpark`` nodes and commands) then reads them instead of each
    compiling the same 170 modules again (0.3 s of CPU per process). Nothing is written
    where bytecode is written anyway: the first process to import a module caches it."""
    if not sys.dont_write_bytecode or hasattr(config, "workerinput"):
        return
    root = Path(__file__).resolve().parents[1]
    for package in COMPILED:
        compileall.compile_dir(root / package, quiet=1)


#: ``pytest -n auto``'s workers per core: most of the suite's time is spent waiting (on the
#: ``flowpark serve`` / ``worker`` processes its tests start, their timers and the
#: databases), so one worker per core left a third of the CPU idle
WORKERS_PER_CORE = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: :data:`WORKERS_PER_CORE` workers per core this process may run on
    (``PYTEST_XDIST_AUTO_NUM_WORKERS`` still sets the count, as with pytest-xdist alone)."""
    given = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    affinity = getattr(os, "sched_getaffinity", None)  # not on macOS
    cores = len(affinity(0)) if affinity else (os.cpu_count() or 1)
    return WORKERS_PER_CORE * cores


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker, order the modules costliest first (longest processing time
    first: with the scheduler handing whole modules to whichever worker frees up, the run
    ends with short modules, not a long one started last); a module's tests keep their
    order. A plain run keeps the collection order."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    known: dict[str, float] = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def cost(module: str) -> float:
        if module in known:
            return known[module]
        return sum(
            UNKNOWN_SLOW_SECONDS if item.get_closest_marker("slow") else UNKNOWN_SECONDS
            for item in modules[module]
        )

    ordered = sorted(modules, key=cost, reverse=True)  # stable: ties keep collection order
    items[:] = [item for module in ordered for item in modules[module]]


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """The same after the wider fixtures' teardown (a module's server and its loop)."""
    _fail_on_open_connections()


def pg_admin_url() -> str:
    """The PostgreSQL server tests create their databases on."""
    return os.environ.get("FLOWPARK_TEST_PG_URL", DEFAULT_PG_ADMIN_URL)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """URL of a new SQLite file (no schema)."""
    return f"sqlite:///{tmp_path}/flowpark.db"


@contextmanager
def _pg_database(template: str | None = None) -> Iterator[str]:
    """Create a uniquely named database (optionally from ``template``); drop it afterwards."""
    admin_url = pg_admin_url()
    admin = create_engine(sync_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"flowpark_test_{uuid.uuid4().hex[:12]}"
    create = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    try:
        with admin.connect() as conn:
            conn.execute(text(create))
    except OperationalError as exc:
        admin.dispose()
        pytest.fail(
            f"PostgreSQL is unreachable at {make_url(admin_url).render_as_string()} "
            "(start the server, or install it: apt-get install -y postgresql; or set "
            f"FLOWPARK_TEST_PG_URL to a server that accepts connections): {exc.orig}",
            pytrace=False,
        )
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a new, empty PostgreSQL database, dropped after the test."""
    with _pg_database() as url:
        yield url


@pytest.fixture(scope="session")
def _pg_template() -> Iterator[str]:
    """A PostgreSQL database migrated to head once per session, cloned by ``store_url``."""
    with _pg_database() as url:
        upgrade(url)
        yield str(make_url(url).database)


class _PgClones:
    """Clones of the template database, each made while the test before it runs (CREATE
    DATABASE waits on the disk: ~0.1-0.7 s, no longer in every PostgreSQL test's setup)."""

    def __init__(self, template: str) -> None:
        self.template = template
        self.admin = create_engine(sync_url(pg_admin_url()), isolation_level="AUTOCOMMIT")
        self._creating = ThreadPoolExecutor(1, thread_name_prefix="pg-create")
        self._next: Future[str] | None = None

    def _create(self) -> str:
        name = f"flowpark_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"'))
        return name

    def drop(self, name: str) -> None:
        """Drop ``name`` (a clone this made)."""
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def take(self) -> str:
        """A fresh clone (ready, or made now); the next one is started."""
        ready = self._next or self._creating.submit(self._create)
        self._next = self._creating.submit(self._create)
        return ready.result()

    def close(self) -> None:
        """Drop the clone made ahead."""
        try:
            if self._next is not None:
                self.drop(self._next.result())
        finally:
            self._creating.shutdown()
            self.admin.dispose()


@pytest.fixture(scope="session")
def _pg_clones(_pg_template: str) -> Iterator[_PgClones]:
    clones = _PgClones(_pg_template)
    try:
        yield clones
    finally:
        clones.close()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to head once per session, copied by ``store_url`` and
    ``module_store_url``."""
    path = tmp_path_factory.mktemp("template") / "flowpark.db"
    upgrade(f"sqlite:///{path}")
    return path


@contextmanager
def _fresh_store(request: pytest.FixtureRequest, directory: Path) -> Iterator[str]:
    """A fresh database of the kind ``request.param`` names, migrated to head (a SQLite
    file in ``directory`` copied from the session's template, or a PostgreSQL clone)."""
    if request.param == "sqlite":
        path = directory / "flowpark.db"
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), path)
        yield f"sqlite:///{path}"
    else:
        clones: _PgClones = request.getfixturevalue("_pg_clones")
        name = clones.take()
        try:
            yield make_url(pg_admin_url()).set(database=name).render_as_string(hide_password=False)
        finally:
            clones.drop(name)


#: the stores :func:`store_url` and :func:`module_store_url` give each test, in turn
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database of each kind, migrated to head (a copy of a per-session template)."""
    with _fresh_store(request, tmp_path) as url:
        yield url


@pytest.fixture(scope="module", params=STORES)
def module_store_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """As :func:`store_url`, one database of each kind for a whole module (for a module's
    server its tests share: one start instead of one per test)."""
    with _fresh_store(request, tmp_path_factory.mktemp("module-store")) as url:
        yield url


@pytest.fixture(params=STORES)
def sql_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """As :func:`store_url`, for the tests of the SQL stores themselves: the engine tier
    overrides ``store_url`` with the memory store (``tests/engine/conftest.py``), never this."""
    with _fresh_store(request, tmp_path) as url:
        yield url


@pytest.fixture
async def sql_engine(sql_store_url: str) -> AsyncIterator[AsyncEngine]:
    """The service's async engine on ``sql_store_url``; disposed after the test."""
    engine = make_async_engine(sql_store_url)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.fixture
def sql_store(sql_engine: AsyncEngine) -> SqlStore:
    """A :class:`SqlStore` on a fresh migrated database (SQLite and PostgreSQL)."""
    return SqlStore(sql_engine)
