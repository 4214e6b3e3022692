"""URL normalisation, SQLite connection setup, and the store package's exports."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url

import flowpark.store
from flowpark.errors import StoreUnavailable
from flowpark.store import SqlStore
from flowpark.store.db import (
    CONNECT_ARGS,
    READ_ONLY,
    STORE_WAIT_SECONDS,
    async_url,
    make_async_engine,
    parse_url,
    sync_url,
)


@pytest.mark.parametrize(
    ("given", "expected_async", "expected_sync"),
    [
        ("sqlite:///flowpark.db", "sqlite+aiosqlite:///flowpark.db", "sqlite:///flowpark.db"),
        ("sqlite+aiosqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
        (
            "postgresql://u:p@db:5432/fp",
            "postgresql+psycopg://u:p@db:5432/fp",
            "postgresql+psycopg://u:p@db:5432/fp",
        ),
        (
            "postgres://u@db/fp",
            "postgresql+psycopg://u@db/fp",
            "postgresql+psycopg://u@db/fp",
        ),
        (
            "postgresql+asyncpg://u@db/fp",
            "postgresql+psycopg://u@db/fp",
            "postgresql+psycopg://u@db/fp",
        ),
    ],
)
def test_urls_get_flowparks_drivers(given: str, expected_async: str, expected_sync: str) -> None:
    assert async_url(given) == expected_async
    assert sync_url(given) == expected_sync


@pytest.mark.parametrize(
    "given",
    [
        "postgresql://u:p@h1:5433,h2:5434/fp",  # libpq's form
        "postgresql://u:p@/fp?host=h1:5433&host=h2:5434",  # SQLAlchemy's two forms
        "postgresql://u:p@/fp?host=h1,h2&port=5433,5434",
    ],
)
def test_several_hosts_reach_the_writable_one(given: str) -> None:
    """Each spelling gives psycopg one host list, one port list and read-write sessions."""
    url = make_url(async_url(given))
    args = create_engine(sync_url(given)).dialect.create_connect_args(url)[1]
    assert (args["host"], args["port"]) == ("h1,h2", "5433,5434")
    assert args["target_session_attrs"] == "read-write"
    assert (args["user"], args["password"], args["dbname"]) == ("u", "p", "fp")


def test_a_host_list_keeps_its_own_session_attrs_query_and_ipv6_hosts() -> None:
    url = parse_url(
        "postgresql://u@db-a,[::1]:6432/fp?target_session_attrs=primary&sslmode=require"
    )
    assert dict(url.query) == {
        "host": "db-a,::1",
        "port": ",6432",
        "target_session_attrs": "primary",
        "sslmode": "require",
    }
    assert parse_url("postgresql://u@db:5432/fp").query == {}  # one host: nothing added
    with pytest.raises(ValueError, match="host list"):
        parse_url("postgresql://u@h1:5432,h2:x/fp")
    with pytest.raises(ValueError, match="both"):
        parse_url("postgresql://u@h1,h2/fp?host=h3")


def test_other_databases_are_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        sync_url("mysql://u@db/fp")
    with pytest.raises(ValueError, match="in-memory"):
        make_async_engine("sqlite://")


async def test_sqlite_connections_use_wal_and_a_busy_timeout(sqlite_url: str) -> None:
    engine = make_async_engine(sqlite_url)
    try:
        async with engine.connect() as conn:
            mode = (await conn.execute(text("PRAGMA journal_mode"))).scalar_one()
            busy = (await conn.execute(text("PRAGMA busy_timeout"))).scalar_one()
            sync = (await conn.execute(text("PRAGMA synchronous"))).scalar_one()
    finally:
        await engine.dispose()
    assert (mode, busy, sync) == ("wal", STORE_WAIT_SECONDS * 1000, 1)  # 1 = NORMAL


def _try_write_lock(path: str) -> bool:
    """Whether another connection can take SQLite's write lock right now (no waiting)."""
    probe = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    finally:
        probe.close()


async def test_sqlite_write_transactions_begin_immediate(sqlite_url: str) -> None:
    """A write transaction holds the write lock from its BEGIN, even before it writes; a
    read-only transaction (``READ_ONLY``) takes no write lock."""
    path = sqlite_url.removeprefix("sqlite:///")
    engine = make_async_engine(sqlite_url)
    try:
        async with engine.connect() as reader_conn:
            reader = await reader_conn.execution_options(**READ_ONLY)
            await reader.execute(text("SELECT 1"))
            assert reader.in_transaction()
            assert _try_write_lock(path)
            await reader.rollback()
        async with engine.connect() as writer:
            await writer.execute(text("SELECT 1"))
            assert writer.in_transaction()
            assert not _try_write_lock(path)
            await writer.rollback()
        assert _try_write_lock(path)
    finally:
        await engine.dispose()


async def test_connections_opened_for_a_burst_stay_open(sqlite_url: str) -> None:
    """Up to ``pool_size`` connections, and none closed at check-in: a node whose load
    hovers around its pool must not open and close connections all the time."""
    engine = make_async_engine(sqlite_url, pool_size=6)
    pool = engine.sync_engine.pool
    opened = 0

    def count(*_: object) -> None:
        nonlocal opened
        opened += 1

    event.listen(engine.sync_engine, "connect", count)
    try:
        for _ in range(3):  # three bursts of 6 connections at once
            conns = [await engine.connect() for _ in range(6)]
            for conn in conns:
                await conn.close()
        assert opened == 6
        assert pool.checkedin() == 6  # type: ignore[attr-defined]
        held = [await engine.connect() for _ in range(6)]
        with pytest.raises(TimeoutError):  # a seventh waits: the cap is pool_size
            await asyncio.wait_for(engine.connect(), timeout=0.2)
        for conn in held:
            await conn.close()
    finally:
        await engine.dispose()


async def test_hundred_overlapping_read_then_write_transactions(sqlite_url: str) -> None:
    """The pattern that fails with "database is locked" under deferred BEGIN (two readers
    both upgrading to writers) succeeds: every write transaction holds the lock from BEGIN.

    Five connections: under deferred BEGIN about 75 of the 100 fail, as about 94 do with
    twenty; twenty queued on SQLite's busy handler (each asleep up to 100 ms between its
    looks at the lock) took 1-2 s, five take 0.3 s."""
    engine = make_async_engine(sqlite_url, pool_size=5)

    async def bump(n: int) -> None:
        async with engine.begin() as conn:
            seen = (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one()
            await asyncio.sleep(0)  # let the other writers interleave
            await conn.execute(
                text("INSERT INTO t (n, seen) VALUES (:n, :seen)"), {"n": n, "seen": seen}
            )

    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (n INTEGER PRIMARY KEY, seen INTEGER)"))
        await asyncio.gather(*(bump(n) for n in range(100)))
        async with engine.connect() as conn:
            seen = (await conn.execute(text("SELECT seen FROM t ORDER BY seen"))).scalars().all()
    finally:
        await engine.dispose()
    assert seen == list(range(100))  # serialised: each saw all the writes before it


def test_store_exports_are_pinned() -> None:
    assert flowpark.store.__all__ == sorted(flowpark.store.__all__)
    assert flowpark.store.__all__ == [
        "JournalConflict",
        "SqlStore",
        "UtcDateTime",
        "check_schema_at_head",
        "current_revision",
        "downgrade",
        "head_revision",
        "make_async_engine",
        "sync_url",
        "upgrade",
    ]


async def test_unreachable_database_is_store_unavailable() -> None:
    engine = make_async_engine("postgresql://postgres@127.0.0.1:1/nowhere")
    try:
        with pytest.raises(StoreUnavailable) as info:
            await SqlStore(engine).reads.ping()
        assert info.value.code == "store_unavailable"
    finally:
        await engine.dispose()


async def test_a_write_behind_another_process_lock_is_refused_in_bounded_time(
    _sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flowpark.store.db as db_module
    from flowpark.store import SqlStore

    monkeypatch.setattr(db_module, "SQLITE_BUSY_TIMEOUT_MS", 300)
    path = tmp_path / "locked.db"
    shutil.copyfile(_sqlite_template, path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    engine = make_async_engine(f"sqlite:///{path}")
    try:
        journal = SqlStore(engine)
        began = time.monotonic()
        with pytest.raises(StoreUnavailable):
            async with journal.runs._write() as conn:
                await conn.execute(text("SELECT 1"))
        assert time.monotonic() - began < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await engine.dispose()


async def test_a_writer_queued_past_the_bound_in_this_process_is_refused(
    _sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import flowpark.store.base as base_module
    from flowpark.store import SqlStore

    monkeypatch.setattr(base_module, "STORE_WAIT_SECONDS", 0.2)
    path = tmp_path / "queued.db"
    shutil.copyfile(_sqlite_template, path)
    engine = make_async_engine(f"sqlite:///{path}")
    try:
        journal = SqlStore(engine)
        holding = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            async with journal.runs._write():
                holding.set()
                await release.wait()

        holder = asyncio.create_task(hold())
        await holding.wait()
        with pytest.raises(StoreUnavailable):
            async with journal.runs._write():
                pass
        release.set()
        await holder
        async with journal.runs._write() as conn:  # free again: it writes
            await conn.execute(text("SELECT 1"))
    finally:
        await engine.dispose()


def test_the_password_of_a_host_list_is_a_secret_to_mask() -> None:
    from flowpark.settings import Settings

    settings = Settings(database_url="postgresql://app:not-for-logs@h1:5433,h2:5434/fp")
    assert "not-for-logs" in settings.secret_values()


async def test_a_vanished_server_is_noticed_in_seconds_unless_the_url_says_otherwise() -> None:
    """Each new connection asks libpq for a connect timeout and TCP keepalives; a parameter
    the URL's query sets is the URL's."""
    seen: list[dict[str, object]] = []
    engine = make_async_engine(
        "postgresql://postgres@127.0.0.1:1,127.0.0.1:2/nowhere?connect_timeout=2"
    )

    @event.listens_for(engine.sync_engine, "do_connect")
    def capture(
        _dialect: object, _record: object, _args: object, params: dict[str, object]
    ) -> None:
        seen.append(dict(params))

    try:
        with pytest.raises(StoreUnavailable):
            await SqlStore(engine).reads.ping()
    finally:
        await engine.dispose()
    assert seen, "no connection was attempted"
    assert {k: seen[0][k] for k in CONNECT_ARGS} == {**CONNECT_ARGS, "connect_timeout": "2"}
    assert (seen[0]["host"], seen[0]["port"]) == ("127.0.0.1,127.0.0.1", "1,2")
