"""UtcDateTime: aware UTC in, aware UTC out, whatever the process time zone. InstanceId:
canonical UUID strings in and out, ``uuid`` on PostgreSQL, text on SQLite."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, insert, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import StatementError

from flowpark.errors import InstanceNotFound
from flowpark.store.db import make_async_engine
from flowpark.store.types import InstanceId, UtcDateTime, is_instance_id

TOKYO = timezone(timedelta(hours=9))
SQLITE = sqlite.dialect()
POSTGRESQL = postgresql.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it untyped
metadata = MetaData()
instants = Table(
    "instants",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", UtcDateTime(), nullable=True),
)


def _set_tz(name: str | None) -> None:
    if name is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = name
    time.tzset()


@pytest.fixture(params=["UTC", "Asia/Tokyo"])
def process_tz(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run the test with the process time zone set to each value (restored afterwards)."""
    before = os.environ.get("TZ")
    _set_tz(request.param)
    try:
        yield request.param
    finally:
        _set_tz(before)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def test_tokyo_fixture_really_changes_local_time(process_tz: str) -> None:
    local_offset = datetime.now().astimezone().utcoffset()
    assert local_offset == (timedelta(hours=9) if process_tz == "Asia/Tokyo" else timedelta(0))


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRESQL])
def test_bind_refuses_naive_datetimes(dialect: object) -> None:
    with pytest.raises(ValueError, match="aware"):
        UtcDateTime().process_bind_param(datetime(2026, 1, 1, 12, 0), dialect)  # type: ignore[arg-type]


def test_bind_converts_to_utc() -> None:
    tokyo_nine = datetime(2026, 1, 1, 9, 0, tzinfo=TOKYO)
    on_sqlite = UtcDateTime().process_bind_param(tokyo_nine, SQLITE)
    assert on_sqlite == datetime(2026, 1, 1, 0, 0)  # naive UTC wall time
    on_pg = UtcDateTime().process_bind_param(tokyo_nine, POSTGRESQL)
    assert on_pg == datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    assert on_pg is not None and on_pg.tzinfo is UTC


async def test_round_trip_keeps_the_instant(db_url: str, process_tz: str) -> None:
    engine = make_async_engine(db_url)
    written = [
        datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=TOKYO),  # 00:30:15.123456Z
        datetime(2026, 3, 1, 0, 30, 15, 123457, tzinfo=UTC),  # one microsecond later
        datetime(2026, 2, 28, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5))),  # latest
        datetime(2026, 3, 1, 0, 0, tzinfo=UTC),  # earliest
    ]
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(
                insert(instants), [{"id": i, "at": at} for i, at in enumerate(written)]
            )
            await conn.execute(insert(instants).values(id=99, at=None))
        async with engine.connect() as conn:
            rows = (await conn.execute(select(instants).order_by(instants.c.id))).all()
            ordered = (
                await conn.execute(
                    select(instants.c.id).where(instants.c.at.is_not(None)).order_by(instants.c.at)
                )
            ).scalars()
            later = (
                await conn.execute(
                    select(instants.c.id).where(
                        instants.c.at > datetime(2026, 3, 1, 9, 30, 15, 123456, tzinfo=TOKYO)
                    )
                )
            ).scalars()
            ordered_ids, later_ids = list(ordered), sorted(later)
    finally:
        await engine.dispose()
    read = {r.id: r.at for r in rows}
    assert read[99] is None
    for i, at in enumerate(written):
        assert read[i] == at  # the same instant...
        assert read[i].tzinfo is UTC  # ...always returned as aware UTC
    assert read[0] == datetime(2026, 3, 1, 0, 30, 15, 123456, tzinfo=UTC)
    assert ordered_ids == [3, 0, 1, 2]  # SQL ordering follows the instants
    assert later_ids == [1, 2]


async def test_sqlite_stores_fixed_width_utc_text(sqlite_url: str, process_tz: str) -> None:
    engine = make_async_engine(sqlite_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(
                insert(instants).values(id=1, at=datetime(2026, 1, 1, 9, 0, tzinfo=TOKYO))
            )
            raw = (await conn.execute(text("SELECT at FROM instants"))).scalar_one()
    finally:
        await engine.dispose()
    assert raw == "2026-01-01 00:00:00.000000"


async def test_written_in_tokyo_read_in_utc_is_identical(sqlite_url: str) -> None:
    before = os.environ.get("TZ")
    at = datetime(2026, 7, 1, 18, 0, tzinfo=TOKYO)
    try:
        _set_tz("Asia/Tokyo")
        engine = make_async_engine(sqlite_url)
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(insert(instants).values(id=1, at=at))
        await engine.dispose()
        _set_tz("UTC")
        engine = make_async_engine(sqlite_url)
        async with engine.connect() as conn:
            read = (await conn.execute(select(instants.c.at))).scalar_one()
        await engine.dispose()
    finally:
        _set_tz(before)
    assert read == at
    assert read == datetime(2026, 7, 1, 9, 0, tzinfo=UTC)


async def test_naive_instant_is_refused_by_the_engine(sqlite_url: str) -> None:
    engine = make_async_engine(sqlite_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
        with pytest.raises(StatementError) as info:
            async with engine.begin() as conn:
                await conn.execute(insert(instants).values(id=1, at=datetime(2026, 1, 1)))
        assert isinstance(info.value.orig, ValueError)
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_postgres_sessions_use_utc(pg_url: str) -> None:
    engine = make_async_engine(pg_url)
    try:
        async with engine.connect() as conn:
            zone = (await conn.execute(text("SHOW TIME ZONE"))).scalar_one()
    finally:
        await engine.dispose()
    assert zone == "UTC"


# -- InstanceId ---------------------------------------------------------------------------
ids_table = Table("instance_ids", metadata, Column("id", InstanceId(), primary_key=True))
AN_ID = "01a22fac-b7c5-7d5a-b879-c2ae65cc796c"


@pytest.mark.parametrize(
    "value", [AN_ID, "4bc87131-646a-45c9-a425-0d5017ecf8e0", str(uuid.UUID(int=0))]
)
def test_canonical_uuid_strings_are_instance_ids(value: str) -> None:
    assert is_instance_id(value)
    for dialect in (SQLITE, POSTGRESQL):
        assert InstanceId().process_bind_param(value, dialect) == value


@pytest.mark.parametrize(
    "value",
    [
        AN_ID.upper(),
        uuid.UUID(AN_ID).hex,
        f"{{{AN_ID}}}",
        f"urn:uuid:{AN_ID}",
        f" {AN_ID}",
        f"{AN_ID}\n",
        AN_ID[:-1],
        AN_ID[:-1] + "g",
        "nope",
        "",
        "\x00",
        uuid.UUID(AN_ID),
        7,
    ],
)
def test_anything_else_names_no_instance(value: object) -> None:
    assert not is_instance_id(value)
    for dialect in (SQLITE, POSTGRESQL):
        with pytest.raises(InstanceNotFound) as info:
            InstanceId().process_bind_param(value, dialect)
        assert info.value.code == "instance_not_found"


def test_a_long_refused_id_is_shortened_in_the_error() -> None:
    with pytest.raises(InstanceNotFound) as info:
        InstanceId().process_bind_param("x" * 5000, SQLITE)
    assert len(info.value.fields["instance_id"]) == 103


async def test_instance_ids_round_trip_as_canonical_strings(db_url: str) -> None:
    engine = make_async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(metadata.create_all)
            await conn.execute(insert(ids_table), [{"id": AN_ID}, {"id": str(uuid.UUID(int=1))}])
        async with engine.connect() as conn:
            read = (
                (await conn.execute(select(ids_table.c.id).order_by(ids_table.c.id)))
                .scalars()
                .all()
            )
            found = (
                await conn.execute(select(ids_table.c.id).where(ids_table.c.id == AN_ID))
            ).scalar_one()
            kind = (
                await conn.execute(
                    text(
                        "SELECT data_type FROM information_schema.columns "
                        "WHERE table_name = 'instance_ids'"
                    )
                    if engine.dialect.name == "postgresql"
                    else text("SELECT type FROM pragma_table_info('instance_ids')")
                )
            ).scalar_one()
            with pytest.raises(StatementError) as info:
                await conn.execute(select(ids_table.c.id).where(ids_table.c.id == AN_ID.upper()))
            assert isinstance(info.value.orig, InstanceNotFound)
    finally:
        await engine.dispose()
    assert read == [str(uuid.UUID(int=1)), AN_ID]
    assert all(type(v) is str for v in read) and found == AN_ID
    assert kind == ("uuid" if db_url.startswith("postgresql") else "VARCHAR")
