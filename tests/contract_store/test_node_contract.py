"""What every store promises for a node's own records (:mod:`flowpark.engine.ports.nodes`):
liveness rows, console sessions and the schema check, one body per promise, run on each
store: in memory, SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

from datetime import timedelta

from flowpark.engine.ports import Commit, Store
from flowpark.engine.ports.nodes import ConsoleSessions, NodeRecord, Nodes, Schema
from flowpark.store import SqlStore
from flowpark.store.console_sessions import SqlConsoleSessions
from flowpark.store.memory import MemoryStore
from flowpark.store.nodes import SqlNodes
from flowpark.store.schema import SqlSchema
from tests.contract_store.test_store_contract import park, started
from tests.support.journal import at

MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)


def nodes_of(store: Store) -> Nodes:
    if isinstance(store, MemoryStore):
        return store.nodes
    assert isinstance(store, SqlStore)
    return SqlNodes(store.engine)


def sessions_of(store: Store) -> ConsoleSessions:
    if isinstance(store, MemoryStore):
        return store.console_sessions
    assert isinstance(store, SqlStore)
    return SqlConsoleSessions(store.engine)


def schema_of(store: Store) -> Schema:
    if isinstance(store, MemoryStore):
        return store.schema
    assert isinstance(store, SqlStore)
    return SqlSchema(store.engine)


def record(node_id: str, seen: int, **changes: object) -> NodeRecord:
    values: dict[str, object] = {
        "id": node_id,
        "role": "serve",
        "version": "0.1.0",
        "flows": ("t.flow@1.0.0",),
        "sweeps": True,
        "beat_seconds": 10.0,
        "started_at": at(0),
        "seen_at": at(seen),
        **changes,
    }
    return NodeRecord(**values)  # type: ignore[arg-type]


async def test_a_beat_writes_or_replaces_the_nodes_row(store: Store) -> None:
    nodes = nodes_of(store)
    await nodes.beat(record("a", 10))
    await nodes.beat(record("b", 20, role="worker", last_sweep_at=at(19), last_claimed=3))
    await nodes.beat(record("a", 30, stopped_at=at(30)))
    listed = await nodes.list_nodes()
    assert [(n.id, n.seen_at) for n in listed] == [("a", at(30)), ("b", at(20))]
    assert listed[0].stopped_at == at(30) and not listed[0].live(at(31))
    assert (listed[1].role, listed[1].last_claimed, listed[1].flows) == (
        "worker",
        3,
        ("t.flow@1.0.0",),
    )
    assert listed[1].sweeping(at(25)) and not listed[1].sweeping(at(60))


async def test_a_beat_forgets_nodes_unseen_for_a_day(store: Store) -> None:
    nodes = nodes_of(store)
    await nodes.beat(record("old", 0))
    await nodes.beat(record("new", int(DAY.total_seconds()) + 60))
    assert [n.id for n in await nodes.list_nodes()] == ["new"]


async def test_the_report_counts_parked_instances_due_before_the_threshold(
    store: Store,
) -> None:
    nodes = nodes_of(store)
    await nodes.beat(record("a", 10))
    for wake in (60, 120, 600):
        instance_id = await started(store)
        await store.runs.commit(Commit(instance_id, 1, at(2), at(32), park=park(at(wake))))
    await started(store)  # running: not overdue
    report = await nodes.report(at(700), overdue_before=at(300))
    assert (report.overdue, [n.id for n in report.nodes], report.now) == (2, ["a"], at(700))
    assert report.notice is not None and "2 overdue instances" in report.notice


async def test_a_session_is_open_until_idle_old_or_ended(store: Store) -> None:
    sessions = sessions_of(store)
    idle, lifetime = 10 * MINUTE, 60 * MINUTE
    await sessions.open("s1", "fp-1", at(0))
    assert await sessions.seen("s1", at(60), idle, lifetime) == "fp-1"  # marked seen at 60 s
    assert await sessions.seen("s1", at(60 + 590), idle, lifetime) == "fp-1"  # idle from 60 s
    assert await sessions.seen("s1", at(60 + 590 + 601), idle, lifetime) is None  # idle
    await sessions.open("s2", "fp-2", at(0))
    for minute in range(1, 60, 5):  # seen often: never idle, but not past its lifetime
        assert await sessions.seen("s2", at(minute * 60), idle, lifetime) == "fp-2"
    assert await sessions.seen("s2", at(3601), idle, lifetime) is None
    await sessions.open("s3", "fp-3", at(0))
    await sessions.end("s3", at(5))
    assert await sessions.seen("s3", at(6), idle, lifetime) is None
    assert await sessions.seen("nope", at(6), idle, lifetime) is None


async def test_the_schema_of_a_migrated_store_is_at_head(store: Store) -> None:
    await schema_of(store).check_at_head()  # raises when it is not
