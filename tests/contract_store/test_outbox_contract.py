"""What every store promises through its outbox ports (:class:`~flowpark.engine.ports.Deliveries`
and :class:`~flowpark.engine.ports.Retention`), one body per promise, run on each store: in
memory, SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import pytest

from flowpark.engine.ports import Commit, Deliveries, Retention, Store
from flowpark.engine.records import EmittedEvent, InstanceState, StepKind
from flowpark.errors import InstanceNotFound
from flowpark.store import SqlStore
from flowpark.store.deliveries import SqlDeliveries
from flowpark.store.memory import MemoryStore
from flowpark.store.retention import SqlRetention
from tests.contract_store.test_store_contract import started
from tests.support.journal import at, step


def deliveries_of(store: Store) -> Deliveries:
    """The store's deliveries: the memory store's twin, or the SQL part over its engine."""
    if isinstance(store, MemoryStore):
        return store.deliveries
    assert isinstance(store, SqlStore)
    return SqlDeliveries(store.engine)


def retention_of(store: Store) -> Retention:
    if isinstance(store, MemoryStore):
        return store.retention
    assert isinstance(store, SqlStore)
    return SqlRetention(store.engine)


async def emitted(store: Store, *names: str) -> str:
    """An instance whose emit row carries one outbox event per name (ids ``<name>-<i>``)."""
    instance_id = await started(store)
    row = step(instance_id, step_id=1, kind=StepKind.EMIT, committed_at=at(2))
    events = tuple(EmittedEvent(f"{instance_id}-{n}", n, {"n": n}) for n in names)
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(row,), events=events))
    return instance_id


async def test_relay_writes_one_delivery_per_event_and_subscriber_once(store: Store) -> None:
    deliveries = deliveries_of(store)
    instance_id = await emitted(store, "a.done", "b.done")
    assert await deliveries.relay([], at(3)) == 0  # no subscriber: nothing relayed
    assert await deliveries.list_deliveries() == []
    assert await deliveries.relay(["hook-1", "hook-2"], at(3)) == 2
    assert await deliveries.relay(["hook-1", "hook-2"], at(4)) == 0  # each event once
    listed = await deliveries.list_deliveries()
    assert [(d["event_name"], d["subscriber"], d["state"], d["tries"]) for d in listed] == [
        ("a.done", "hook-1", "pending", 0),
        ("a.done", "hook-2", "pending", 0),
        ("b.done", "hook-1", "pending", 0),
        ("b.done", "hook-2", "pending", 0),
    ]
    assert {d["instance_id"] for d in listed} == {instance_id}
    assert await deliveries.count_by_state() == {"pending": 4}


async def test_relay_takes_at_most_limit_events_oldest_first(store: Store) -> None:
    deliveries = deliveries_of(store)
    await emitted(store, "e1", "e2", "e3")
    assert await deliveries.relay(["hook"], at(3), limit=2) == 2
    assert [d["event_name"] for d in await deliveries.list_deliveries()] == ["e1", "e2"]
    assert await deliveries.relay(["hook"], at(3), limit=2) == 1


async def test_claim_leases_due_deliveries_in_each_instances_event_order(
    store: Store,
) -> None:
    deliveries = deliveries_of(store)
    instance_id = await emitted(store, "first", "second")
    await deliveries.relay(["hook"], at(3))
    claimed = await deliveries.claim("node-a", at(4), at(34), limit=10)
    # the second event waits while the first is pending for the same subscriber
    assert [(c.event_name, c.subscriber, c.tries, c.instance_id) for c in claimed] == [
        ("first", "hook", 0, instance_id)
    ]
    assert claimed[0].payload == {"n": "first"}
    assert claimed[0].claimed_until == at(34)
    assert await deliveries.claim("node-b", at(5), at(35), limit=10) == []  # held by node-a
    again = await deliveries.claim("node-b", at(40), at(70), limit=10)  # node-a's lease lapsed
    assert [c.event_name for c in again] == ["first"]
    assert not await deliveries.finish(claimed[0], "node-a", delivered_at=at(41))  # lost claim
    assert await deliveries.finish(again[0], "node-b", delivered_at=at(41))
    after = await deliveries.claim("node-b", at(42), at(72), limit=10)
    assert [c.event_name for c in after] == ["second"]


async def test_finish_records_delivered_due_again_or_failed(store: Store) -> None:
    deliveries = deliveries_of(store)
    await emitted(store, "x")
    await deliveries.relay(["ok", "later", "broken"], at(3))
    claimed = {c.subscriber: c for c in await deliveries.claim("node-a", at(4), at(34), 10)}
    assert await deliveries.finish(claimed["ok"], "node-a", delivered_at=at(5), status=204)
    assert await deliveries.finish(
        claimed["later"], "node-a", next_try_at=at(60), error="503 from hook", status=503
    )
    assert await deliveries.finish(claimed["broken"], "node-a", error="x" * 3000, status=410)
    listed = {d["subscriber"]: d for d in await deliveries.list_deliveries()}
    assert (listed["ok"]["state"], listed["ok"]["tries"], listed["ok"]["last_status"]) == (
        "delivered",
        1,
        204,
    )
    assert listed["ok"]["delivered_at"] == at(5)
    assert (listed["later"]["state"], listed["later"]["last_error"]) == ("pending", "503 from hook")
    assert listed["later"]["next_try_at"] == at(60)
    assert listed["broken"]["state"] == "failed"
    assert len(listed["broken"]["last_error"]) == 2000  # kept bounded
    assert all(d["claimed_by"] is None for d in listed.values())
    assert await deliveries.claim("node-a", at(59), at(89), 10) == []  # not due before 60 s
    assert [c.subscriber for c in await deliveries.claim("node-a", at(60), at(90), 10)] == ["later"]
    assert await deliveries.count_by_state() == {"delivered": 1, "pending": 1, "failed": 1}


async def test_retry_makes_a_failed_delivery_pending_and_due_now(store: Store) -> None:
    deliveries = deliveries_of(store)
    await emitted(store, "x")
    await deliveries.relay(["hook"], at(3))
    (claimed,) = await deliveries.claim("node-a", at(4), at(34), 10)
    sequence = claimed.sequence
    assert await deliveries.retry(sequence + 1000, at(5)) is None  # no such delivery
    with pytest.raises(ValueError, match="not failed"):
        await deliveries.retry(sequence, at(5))  # pending: nothing changed
    await deliveries.finish(claimed, "node-a", error="gone", status=410)
    retried = await deliveries.retry(sequence, at(100))
    assert retried is not None
    assert (retried["state"], retried["tries"], retried["next_try_at"]) == ("pending", 0, at(100))
    assert [c.sequence for c in await deliveries.claim("node-a", at(100), at(130), 10)] == [
        sequence
    ]


async def test_list_deliveries_filters_and_pages(store: Store) -> None:
    deliveries = deliveries_of(store)
    one = await emitted(store, "a", "b")
    two = await emitted(store, "c")
    await deliveries.relay(["h1", "h2"], at(3))
    everything = await deliveries.list_deliveries()
    assert len(everything) == 6
    by_two = await deliveries.list_deliveries(instance_id=two)
    assert [(d["event_name"], d["subscriber"]) for d in by_two] == [("c", "h1"), ("c", "h2")]
    by_h2 = await deliveries.list_deliveries(subscriber="h2", instance_id=one)
    assert [d["event_name"] for d in by_h2] == ["a", "b"]
    after = await deliveries.list_deliveries(after=everything[3]["sequence"], limit=1)
    assert [d["sequence"] for d in after] == [everything[4]["sequence"]]
    assert await deliveries.list_deliveries(state="failed") == []


async def test_purge_deletes_ended_instances_before_the_cutoff_with_their_rows(
    store: Store,
) -> None:
    retention = retention_of(store)
    old = await emitted(store, "old.done")
    await store.runs.finish(old, 1, at(5), InstanceState.COMPLETED)
    recent = await started(store)
    await store.runs.finish(recent, 1, at(50), InstanceState.FAILED)
    running = await started(store)
    assert await retention.purge_batch(at(5)) == 0  # ended at 5 s: not before the cutoff
    assert await retention.purge(at(10)) == 1
    with pytest.raises(InstanceNotFound):
        await store.reads.get_instance(old)
    assert [e["instance_id"] for e in await store.reads.list_events()] == []
    assert (await store.reads.get_instance(recent)).state is InstanceState.FAILED
    assert (await store.reads.get_instance(running)).state is InstanceState.RUNNING
    assert await retention.purge(at(3600)) == 1  # the failed one; the running one stays
    assert await store.reads.count_instances() == 1


async def test_purge_keeps_an_instance_whose_delivery_is_pending(store: Store) -> None:
    retention = retention_of(store)
    deliveries = deliveries_of(store)
    instance_id = await emitted(store, "done")
    await store.runs.finish(instance_id, 1, at(5), InstanceState.COMPLETED)
    await deliveries.relay(["hook"], at(6))
    assert await retention.purge(at(100)) == 0  # its event is not delivered yet
    (claimed,) = await deliveries.claim("node-a", at(7), at(37), 10)
    await deliveries.finish(claimed, "node-a", delivered_at=at(8))
    assert await retention.purge(at(100)) == 1
    assert await deliveries.list_deliveries() == []  # its deliveries went with it


async def test_purge_runs_batches_until_one_is_short_or_most_were_deleted(
    store: Store,
) -> None:
    retention = retention_of(store)
    for _ in range(3):
        instance_id = await started(store)
        await store.runs.finish(instance_id, 1, at(5), InstanceState.CANCELLED)
    assert await retention.purge(at(10), limit=1, most=2) == 2
    assert await retention.purge(at(10), limit=1) == 1
    assert await store.reads.count_instances() == 0
