"""Migration 0022: review items written before it are ``open`` after it, with no claimant
or closer, and the store reads them; downgrade drops the columns and upgrade adds them again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, create_engine, inspect, text

from flowpark.engine.ports import ReviewAct, ReviewFilter, ReviewState, ReviewVerb
from flowpark.store.db import make_async_engine, sync_url
from flowpark.store.migrate import downgrade, upgrade
from flowpark.store.sql_store import SqlStore

_COLUMNS = {"state", "claimed_by", "claimed_at", "closed_by", "closed_at", "note"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    """A fresh, unmigrated database of each kind."""
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


@pytest.fixture
def engine(empty_url: str) -> Iterator[Engine]:
    made = create_engine(sync_url(empty_url))
    try:
        yield made
    finally:
        made.dispose()


def _columns(engine: Engine, table: str = "flow_review_item") -> set[str]:
    return {c["name"] for c in inspect(engine).get_columns(table)}


async def test_0022_opens_the_items_written_before_it(empty_url: str, engine: Engine) -> None:
    upgrade(empty_url, "0019")
    instance_id, at = str(uuid.uuid4()), datetime(2026, 1, 1, tzinfo=UTC)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO flow_instance (id, flow_name, flow_version, state, created_at, "
                "updated_at, fencing_token, cancel_requested) VALUES (:id, 'f', '1', "
                "'failed', :at, :at, 1, false)"
            ),
            {"id": instance_id, "at": at},
        )
        conn.execute(
            text(
                "INSERT INTO review_item (id, instance_id, subject, reason, details, "
                "created_at) VALUES ('r-1', :id, 'doc-1', 'late', NULL, :at)"
            ),
            {"id": instance_id, "at": at},
        )
    assert not _COLUMNS & _columns(engine, "review_item")
    upgrade(empty_url)
    assert _columns(engine) >= _COLUMNS
    store = make_async_engine(empty_url)
    try:
        reviews = SqlStore(store).reviews
        [item] = await reviews.find_reviews(ReviewFilter(states=(ReviewState.OPEN,)))
        assert (item.id, item.flow, item.claimed_by, item.closed_by) == ("r-1", "f", None, None)
        done = await reviews.act_on_review(ReviewAct("r-1", ReviewVerb.RESOLVE, "ana", at))
        assert done.state is ReviewState.RESOLVED
    finally:
        await store.dispose()
    downgrade(empty_url, "0019")
    assert not _COLUMNS & _columns(engine, "review_item")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM review_item")).scalars().all() == ["r-1"]
    upgrade(empty_url)
    assert _columns(engine) >= _COLUMNS
