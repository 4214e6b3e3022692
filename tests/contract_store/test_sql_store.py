"""SqlStore on real stores (a migrated SQLite file and a PostgreSQL database)."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from flowpark.engine.ports import NewSignal, StreamWrite, TryMark, WakeClaim
from flowpark.engine.records import (
    Ack,
    CancelAck,
    EmittedEvent,
    InstanceState,
    Outcome,
    ReviewRequest,
    StepKind,
)
from flowpark.errors import (
    FlowFailure,
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceKeyInUse,
    InstanceNotFound,
    StaleFencingToken,
)
from flowpark.store import JournalConflict, SqlStore
from tests.support.journal import FLOW, LEASE, T0, at, new_instance, park_at, park_commit, step

RUNNABLE = [FLOW]


async def started(journal: SqlStore, **changes: Any) -> str:
    record, created = await journal.intake.create_instance(new_instance(**changes))
    assert created
    return record.id


async def parked(journal: SqlStore, wake_at: datetime, **changes: Any) -> str:
    instance_id = await started(journal, **changes)
    ack = await journal.runs.commit(park_commit(instance_id, 1, T0, park_at(wake_at, 3, 0)))
    assert ack == Ack(applied=True, cancel_requested=False)
    return instance_id


# ------------------------------------------------------------------------- create


async def test_create_instance_is_running_and_leased(sql_store: SqlStore) -> None:
    new = new_instance(instance_key="doc-1")
    record, created = await sql_store.intake.create_instance(new)
    assert created
    assert record.id == new.id
    assert record.state is InstanceState.RUNNING
    assert (record.lease_owner, record.lease_expires_at) == ("node-a", T0 + LEASE)
    assert record.fencing_token == 1
    assert record.input == {"document": "d-1"}
    assert (record.created_at, record.updated_at, record.deadline_at) == (T0, T0, at(3600))
    assert record.instance_key == "doc-1"
    assert not record.cancel_requested and record.failure is None
    assert await sql_store.reads.get_instance(new.id) == record
    snapshot = await sql_store.runs.load(new.id)
    assert (snapshot.instance, snapshot.steps, snapshot.signals) == (record, [], [])


async def test_unknown_instance_is_not_found(sql_store: SqlStore) -> None:
    with pytest.raises(InstanceNotFound) as info:
        await sql_store.runs.load("nope")
    assert info.value.code == "instance_not_found"
    with pytest.raises(InstanceNotFound):
        await sql_store.reads.get_instance("nope")


async def test_ids_are_canonical_uuid_strings(sql_store: SqlStore) -> None:
    """Only the canonical spelling names an instance, on both stores (PostgreSQL's uuid
    input would read the others as the same id); a start needs a canonical id."""
    instance_id = await started(sql_store)
    for spelling in (instance_id.upper(), instance_id.replace("-", ""), f"{{{instance_id}}}"):
        with pytest.raises(InstanceNotFound):
            await sql_store.runs.load(spelling)
        with pytest.raises(InstanceNotFound):
            await sql_store.intake.request_cancel(spelling, "api", at(1), at(31))
        assert await sql_store.runs.claim(spelling, "node-b", at(1), at(31)) is None
    for bad in ("i-1", str(uuid.uuid4()).upper()):
        with pytest.raises(ValueError, match="canonical UUID"):
            await sql_store.intake.create_instance(new_instance(id=bad))
    assert await sql_store.reads.count_instances() == 1
    assert (await sql_store.reads.get_instance(instance_id)).id == instance_id


async def test_idempotent_start_returns_the_first_instance(sql_store: SqlStore) -> None:
    first, created = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k-1", input={"document": "d-1"})
    )
    assert created
    again, created_again = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k-1", input={"document": "d-1"})
    )
    assert (again, created_again) == (first, False)
    with pytest.raises(IdempotencyKeyReused) as info:
        await sql_store.intake.create_instance(
            new_instance(idempotency_key="k-1", input={"document": "d-2"})
        )
    assert info.value.code == "idempotency_key_reused"
    assert info.value.fields["instance_id"] == first.id
    # keys are per flow
    _, other_flow = await sql_store.intake.create_instance(
        new_instance(flow_name="other.flow", idempotency_key="k-1", input={"document": "d-2"})
    )
    assert other_flow
    assert await sql_store.reads.count_instances() == 2


# keys a text-to-bytes cast would confuse ("\101" is bytea's escape of "A"), and non-ASCII
ODD_KEYS = ["a\\101", "aA", "\\x41", "A", "naïve ✓", "naive ✓", "k\\\\", "k\\", "\\"]


async def test_keys_that_differ_in_any_character_are_different_keys(
    sql_store: SqlStore,
) -> None:
    """On PostgreSQL the key is indexed by a digest of its text (migration 0006): every
    byte counts, backslashes included, and a repeat of each still finds its instance."""
    ids = {}
    for key in ODD_KEYS:
        record, created = await sql_store.intake.create_instance(
            new_instance(idempotency_key=key, input={"key": key})
        )
        assert created, key
        ids[key] = record.id
    for key in ODD_KEYS:
        again, created = await sql_store.intake.create_instance(
            new_instance(idempotency_key=key, input={"key": key})
        )
        assert (again.id, created) == (ids[key], False), key
        with pytest.raises(IdempotencyKeyReused):
            await sql_store.intake.create_instance(
                new_instance(idempotency_key=key, input={"key": key + "?"})
            )
    assert await sql_store.reads.count_instances() == len(ODD_KEYS)


async def test_a_repeat_is_the_same_input_and_instance_key(sql_store: SqlStore) -> None:
    """The stored row's input and instance key are the request a repeat is judged by: the
    input as canonical JSON (key order does not matter, ``1`` is not ``true``)."""
    request = {"document": "d-1", "pages": 1, "tags": {"a": 1, "b": [True, None]}}
    first, _ = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k", input=request, instance_key="doc")
    )
    reordered = {"tags": {"b": [True, None], "a": 1}, "pages": 1, "document": "d-1"}
    again, created = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k", input=reordered, instance_key="doc")
    )
    assert (again, created) == (first, False)
    for other in (
        {**request, "pages": True},
        {**request, "pages": 1.5},
        {"document": "d-1"},
        {**request, "extra": None},
    ):
        with pytest.raises(IdempotencyKeyReused):
            await sql_store.intake.create_instance(
                new_instance(idempotency_key="k", input=other, instance_key="doc")
            )
    for instance_key in (None, "doc-2"):
        with pytest.raises(IdempotencyKeyReused) as info:
            await sql_store.intake.create_instance(
                new_instance(idempotency_key="k", input=request, instance_key=instance_key)
            )
        assert info.value.fields["instance_id"] == first.id
    assert await sql_store.reads.count_instances() == 1


async def test_instance_key_is_held_while_the_instance_is_active(sql_store: SqlStore) -> None:
    holder, _ = await sql_store.intake.create_instance(
        new_instance(instance_key="doc-7", idempotency_key="k-7")
    )
    with pytest.raises(InstanceKeyInUse) as info:
        await sql_store.intake.create_instance(new_instance(instance_key="doc-7"))
    assert info.value.code == "instance_key_in_use"
    assert info.value.fields["instance_id"] == holder.id
    # the idempotent repeat of the holder's own start is not a conflict
    again, created = await sql_store.intake.create_instance(
        new_instance(instance_key="doc-7", idempotency_key="k-7")
    )
    assert (again.id, created) == (holder.id, False)
    # parked still holds it; another flow may use the same key
    await sql_store.runs.commit(park_commit(holder.id, 1, T0, park_at(at(60), 1, 0)))
    with pytest.raises(InstanceKeyInUse):
        await sql_store.intake.create_instance(new_instance(instance_key="doc-7"))
    await started(sql_store, flow_name="other.flow", instance_key="doc-7")
    # once ended, the key is free again
    claim = await sql_store.runs.claim(holder.id, "node-a", at(1), at(31))
    assert claim is not None
    await sql_store.runs.finish(holder.id, claim.fencing_token, at(2), InstanceState.COMPLETED, 1)
    await started(sql_store, instance_key="doc-7")


async def test_a_start_that_conflicts_gets_the_domain_error_or_the_first_instance(
    sql_store: SqlStore,
) -> None:
    """The start's one INSERT is the check: a conflicting start reads what holds the key
    and gets the domain error, or the first instance for a repeat; nothing is written."""
    winner, _ = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k", instance_key="doc")
    )
    with pytest.raises(IdempotencyKeyReused):
        await sql_store.intake.create_instance(
            new_instance(idempotency_key="k", input={"document": "other"})
        )
    with pytest.raises(InstanceKeyInUse):
        await sql_store.intake.create_instance(new_instance(instance_key="doc"))
    repeat, created = await sql_store.intake.create_instance(
        new_instance(idempotency_key="k", instance_key="doc")
    )
    assert (repeat.id, created) == (winner.id, False)
    with pytest.raises(JournalConflict):
        await sql_store.intake.create_instance(new_instance(id=winner.id))
    assert await sql_store.reads.count_instances() == 1


async def test_a_key_holder_that_ends_during_a_conflicting_start_lets_it_in(
    sql_store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The INSERT met a holder of the instance key that ended before the start could read
    it: the start tries its INSERT again instead of failing."""
    holder, _ = await sql_store.intake.create_instance(new_instance(instance_key="doc"))
    writes = sql_store.runs
    real = type(writes)._existing_start
    calls = {"n": 0}

    async def holder_ends_first(self: Any, conn: Any, new: Any, cause: Any = None) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            await self.finish(holder.id, 1, at(2), InstanceState.COMPLETED, 1)
            return None
        return await real(self, conn, new, cause)

    monkeypatch.setattr(type(writes), "_existing_start", holder_ends_first)
    record, created = await sql_store.intake.create_instance(new_instance(instance_key="doc"))
    assert created and record.id != holder.id and calls["n"] == 1
    assert await sql_store.reads.count_instances(InstanceState.RUNNING) == 1


async def test_hundred_concurrent_starts(sql_store: SqlStore) -> None:
    results = await asyncio.gather(
        *(sql_store.intake.create_instance(new_instance()) for _ in range(100))
    )
    assert all(created for _, created in results)
    assert len({r.id for r, _ in results}) == 100
    assert await sql_store.reads.count_instances(InstanceState.RUNNING) == 100


async def test_hundred_concurrent_identical_starts_make_one_instance(
    sql_store: SqlStore,
) -> None:
    results = await asyncio.gather(
        *(
            sql_store.intake.create_instance(
                new_instance(idempotency_key="same", instance_key="doc")
            )
            for _ in range(100)
        )
    )
    assert sum(created for _, created in results) == 1
    assert len({r.id for r, _ in results}) == 1
    assert await sql_store.reads.count_instances() == 1


# ------------------------------------------------------------------------- claims


async def test_claim_due_takes_due_instances_oldest_wake_first(sql_store: SqlStore) -> None:
    late = await parked(sql_store, at(50))
    early = await parked(sql_store, at(10))
    middle = await parked(sql_store, at(30))
    await parked(sql_store, at(500))  # not due
    await parked(sql_store, at(5), flow_version="0.9.0")  # not runnable here
    claims = await sql_store.intake.claim_due("node-b", at(60), at(90), 2, RUNNABLE)
    assert [c.instance_id for c in claims] == [early, middle]
    assert all(c.fencing_token == 2 for c in claims)
    rest = await sql_store.intake.claim_due("node-b", at(60), at(90), 10, RUNNABLE)
    assert [c.instance_id for c in rest] == [late]
    assert await sql_store.intake.claim_due("node-c", at(61), at(91), 10, RUNNABLE) == []
    assert await sql_store.intake.claim_due("node-c", at(61), at(91), 10, []) == []
    assert await sql_store.intake.count_not_runnable(at(61), RUNNABLE) == 1
    assert await sql_store.intake.count_not_runnable(at(61), []) == 1
    record = await sql_store.reads.get_instance(early)
    assert record.state is InstanceState.RUNNING
    assert (record.lease_owner, record.lease_expires_at, record.updated_at) == (
        "node-b",
        at(90),
        at(60),
    )
    assert (record.wake_at, record.wake_step_id, record.wake_scope) == (at(10), 3, 0)


async def test_claim_due_takes_over_expired_leases(sql_store: SqlStore) -> None:
    crashed = await started(sql_store)  # lease until T0+30s, never renewed
    assert await sql_store.intake.claim_due("node-b", at(30), at(60), 10, RUNNABLE) == []
    claims = await sql_store.intake.claim_due("node-b", at(31), at(61), 10, RUNNABLE)
    assert [(c.instance_id, c.fencing_token) for c in claims] == [(crashed, 2)]


async def test_concurrent_sweeps_never_claim_an_instance_twice(sql_store: SqlStore) -> None:
    ids = set()
    for i in range(30):
        ids.add(await parked(sql_store, at(i)))
    batches = await asyncio.gather(
        *(sql_store.intake.claim_due(f"node-{n}", at(100), at(130), 4, RUNNABLE) for n in range(12))
    )
    claimed = [c.instance_id for batch in batches for c in batch]
    assert len(claimed) == len(set(claimed))
    assert set(claimed) <= ids
    leftovers = await sql_store.intake.claim_due("node-z", at(100), at(130), 100, RUNNABLE)
    assert set(claimed) | {c.instance_id for c in leftovers} == ids
    assert not set(claimed) & {c.instance_id for c in leftovers}


async def test_claim_one_instance(sql_store: SqlStore) -> None:
    running = await started(sql_store)
    assert await sql_store.runs.claim(running, "node-b", at(1), at(31)) is None  # live lease
    sleeping = await parked(sql_store, at(3600))
    claim = await sql_store.runs.claim(sleeping, "node-b", at(1), at(31))  # whatever its wake
    assert claim is not None and (claim.instance_id, claim.fencing_token) == (sleeping, 2)
    assert await sql_store.runs.claim("nope", "node-b", at(1), at(31)) is None


# ------------------------------------------------------------------------- fencing


async def test_stale_token_writes_nothing(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    # node-a's lease expires; node-b takes over with token 2
    claims = await sql_store.intake.claim_due("node-b", at(31), at(61), 10, RUNNABLE)
    assert claims[0].fencing_token == 2
    before = await sql_store.runs.load(instance_id)
    event = EmittedEvent("e-1", "document.read", {"n": 1})
    review = ReviewRequest("r-1", "document d-1", "low confidence")
    with pytest.raises(StaleFencingToken) as info:
        await sql_store.runs.commit_step(1, step(instance_id), at(99), [event], [review])
    assert info.value.code == "stale_fencing_token"
    assert info.value.fields["current_token"] == 2
    for write in (
        sql_store.runs.renew_lease(instance_id, 1, at(99)),
        sql_store.runs.commit(park_commit(instance_id, 1, at(40), park_at(at(99), 1, 0))),
        sql_store.runs.finish(instance_id, 1, at(40), InstanceState.COMPLETED, "r"),
        sql_store.runs.begin_ending(instance_id, 1, at(40), InstanceState.FAILED, None),
        sql_store.runs.start_try(instance_id, 1, TryMark(1, 0, 1, at(40)), at(99)),
        sql_store.runs.record_heartbeat(instance_id, 1, {"pct": 5}, at(40), at(99)),
        sql_store.runs.release(instance_id, 1, at(40)),
    ):
        with pytest.raises(StaleFencingToken):
            await write
    assert await sql_store.runs.load(instance_id) == before
    assert await sql_store.reads.list_events() == [] and await sql_store.reads.list_reviews() == []
    with pytest.raises(InstanceNotFound):
        await sql_store.runs.renew_lease("nope", 1, at(99))


async def test_writes_after_park_are_stale(sql_store: SqlStore) -> None:
    instance_id = await parked(sql_store, at(60))
    with pytest.raises(StaleFencingToken):
        await sql_store.runs.renew_lease(instance_id, 1, at(99))
    with pytest.raises(StaleFencingToken):
        await sql_store.runs.commit_step(1, step(instance_id), at(99))


# ------------------------------------------------------------------------- journal writes


async def test_journal_sequences_are_the_commit_order_across_instances(
    sql_store: SqlStore,
) -> None:
    """``sequence`` has no index of its own (the journal is keyed by execution): it is
    still unique and grows in commit order across instances, one at a time or batched."""
    first, second = await started(sql_store), await started(sql_store)
    order = [(first, 0), (second, 0), (first, 1), (second, 1), (second, 2), (first, 2)]
    for instance_id, step_id in order:
        await sql_store.runs.commit_step(1, step(instance_id, step_id), at(40))
    await asyncio.gather(
        *(sql_store.runs.commit_step(1, step(i, 3), at(40)) for i in (first, second))
    )
    rows = [r for i in (first, second) for r in (await sql_store.runs.load(i)).steps]
    by_sequence = sorted(rows, key=lambda r: r.sequence or 0)
    assert [(r.instance_id, r.step_id) for r in by_sequence][:6] == order
    assert len({r.sequence for r in rows}) == len(rows) == 8
    with pytest.raises(JournalConflict):
        await sql_store.runs.commit_step(1, step(first, 1), at(40))


async def test_commit_step_appends_row_events_and_reviews(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.start_try(instance_id, 1, TryMark(0, 0, 1, at(1)), at(20))
    row = step(instance_id, error_type=None)
    event = EmittedEvent("e-1", "document.read", {"pages": 3})
    review = ReviewRequest("r-1", "document d-1", "low confidence", {"score": 0.4})
    ack = await sql_store.runs.commit_step(1, row, at(40), [event], [review])
    assert ack == Ack(applied=True, cancel_requested=False)
    failed = step(
        instance_id,
        step_id=1,
        outcome=Outcome.FAILURE,
        values={},
        error_type="HTTPStatusError",
        error_detail="503",
        next_try_at=at(10),
    )
    await sql_store.runs.commit_step(1, failed, at(45))
    snapshot = await sql_store.runs.load(instance_id)
    assert [replace(s, sequence=None) for s in snapshot.steps] == [row, failed]
    assert snapshot.steps[0].sequence is not None and snapshot.steps[1].sequence is not None
    assert snapshot.steps[0].sequence < snapshot.steps[1].sequence
    instance = snapshot.instance
    # the first commit cleared the try in flight and renewed the lease; the second,
    # with no try in flight, only fenced: the row is as the first left it
    assert (instance.lease_expires_at, instance.updated_at) == (at(40), at(2))
    assert instance.try_step_id is None and instance.try_started_at is None
    events = await sql_store.reads.list_events()
    assert [(e["id"], e["name"], e["payload"], e["instance_id"]) for e in events] == [
        ("e-1", "document.read", {"pages": 3}, instance_id)
    ]
    assert events[0]["created_at"] == at(2) and events[0]["published_at"] is None
    assert await sql_store.reads.list_events(after_sequence=events[0]["sequence"]) == []
    reviews = await sql_store.reads.list_reviews()
    assert [(r["id"], r["subject"], r["reason"], r["details"]) for r in reviews] == [
        ("r-1", "document d-1", "low confidence", {"score": 0.4})
    ]


async def test_a_commit_carries_the_deferred_row_before_its_own(
    sql_store: SqlStore,
) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.start_try(instance_id, 1, TryMark(3, 0, 1, at(1)), at(20))
    extracted = step(instance_id, step_id=3, committed_at=at(2))
    emitted = step(
        instance_id,
        step_id=4,
        kind=StepKind.EMIT,
        capability_id="done",
        committed_at=at(3),
        values={"event_id": "e-1"},
    )
    event = EmittedEvent("e-1", "done", {"n": 1})
    ack = await sql_store.runs.commit_step(1, emitted, at(40), [event], deferred=extracted)
    assert ack == Ack(applied=True, cancel_requested=False)
    snapshot = await sql_store.runs.load(instance_id)
    assert [replace(r, sequence=None) for r in snapshot.steps] == [extracted, emitted]
    assert [e["id"] for e in await sql_store.reads.list_events()] == ["e-1"]
    # the try in flight is cleared as by the row's own commit
    assert (snapshot.instance.try_step_id, snapshot.instance.updated_at) == (None, at(3))
    # a deferred row that exists already: nothing of the write, event included
    again = replace(emitted, step_id=5, values={"event_id": "e-2"})
    with pytest.raises(JournalConflict):
        await sql_store.runs.commit_step(
            1, again, at(40), [EmittedEvent("e-2", "done", {})], deferred=extracted
        )
    with pytest.raises(StaleFencingToken):
        await sql_store.runs.commit_step(
            7,
            again,
            at(40),
            [EmittedEvent("e-2", "done", {})],
            deferred=replace(extracted, step_id=6),
        )
    assert len((await sql_store.runs.load(instance_id)).steps) == 2
    assert [e["id"] for e in await sql_store.reads.list_events()] == ["e-1"]
    with pytest.raises(ValueError):
        await sql_store.runs.commit_step(
            1, again, at(40), deferred=replace(extracted, instance_id="other")
        )


async def test_duplicate_step_row_is_a_conflict_and_writes_nothing(
    sql_store: SqlStore,
) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.commit_step(1, step(instance_id), at(40))
    with pytest.raises(JournalConflict) as info:
        await sql_store.runs.commit_step(
            1, step(instance_id), at(99), [EmittedEvent("e-9", "x", {})]
        )
    assert info.value.code == "journal_conflict"
    assert await sql_store.reads.list_events() == []
    record = await sql_store.reads.get_instance(instance_id)
    assert record.lease_expires_at == T0 + LEASE  # nothing of the refused commit


async def test_ack_reports_the_cancel_flag(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    cancel = await sql_store.intake.request_cancel(instance_id, "api", at(1), at(31))
    assert cancel == CancelAck(state=InstanceState.RUNNING, claim=None)  # node-a holds it
    assert await sql_store.runs.commit_step(1, step(instance_id), at(40)) == Ack(True, True)
    assert await sql_store.runs.renew_lease(instance_id, 1, at(50)) == Ack(True, True)


# ------------------------------------------------------------------------- lifecycle


async def test_park_suspends_and_releases_the_lease(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.start_try(instance_id, 1, TryMark(2, 0, 1, at(1)), at(20))
    assert await sql_store.runs.commit(
        park_commit(instance_id, 1, at(5), park_at(at(65), 2, 1))
    ) == Ack(True, False)
    record = await sql_store.reads.get_instance(instance_id)
    assert record.state is InstanceState.SUSPENDED
    assert (record.wake_at, record.wake_step_id, record.wake_scope) == (at(65), 2, 1)
    assert (record.lease_owner, record.lease_expires_at) == (None, None)
    assert record.try_step_id is None
    assert (record.fencing_token, record.updated_at) == (1, at(5))


async def test_park_is_refused_while_the_awaited_signal_waits(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {}, None, at(1), "s-1")
    )
    before = await sql_store.reads.get_instance(instance_id)
    ack = await sql_store.runs.commit(
        park_commit(instance_id, 1, at(2), park_at(None, 4, 0, "approved"))
    )
    assert ack == Ack(applied=False, cancel_requested=False, signal_pending=True)
    assert await sql_store.reads.get_instance(instance_id) == before
    # another signal name does not hold the park
    ack = await sql_store.runs.commit(
        park_commit(instance_id, 1, at(2), park_at(None, 4, 0, "rejected"))
    )
    assert ack == Ack(applied=True)
    assert (await sql_store.reads.get_instance(instance_id)).state is InstanceState.SUSPENDED


async def test_parked_without_a_wake_only_a_claim_or_cancel_wakes_it(
    sql_store: SqlStore,
) -> None:
    waiting = await started(sql_store)
    await sql_store.runs.commit(park_commit(waiting, 1, at(1), park_at(None, 2, 0, "approved")))
    record = await sql_store.reads.get_instance(waiting)
    assert (record.state, record.wake_at, record.wake_step_id) == (
        InstanceState.SUSPENDED,
        None,
        2,
    )
    far = at(10**8)
    assert await sql_store.intake.claim_due("node-b", far, far + LEASE, 10, RUNNABLE) == []
    assert await sql_store.intake.count_not_runnable(far, []) == 0
    # a signal's deliverer claims it directly
    await sql_store.mailbox.deliver_signal(NewSignal(waiting, "approved", {}, None, at(2), "s-1"))
    claim = await sql_store.runs.claim(waiting, "node-b", at(2), at(32))
    assert claim is not None and claim.fencing_token == 2


async def test_park_and_completion_are_refused_after_a_cancel(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.intake.request_cancel(instance_id, "api", at(1), at(31))
    before = await sql_store.reads.get_instance(instance_id)
    assert before.cancel_requested
    assert await sql_store.runs.commit(
        park_commit(instance_id, 1, at(2), park_at(at(60), 1, 0))
    ) == Ack(False, True)
    assert await sql_store.runs.finish(
        instance_id, 1, at(2), InstanceState.COMPLETED, {"ok": True}
    ) == Ack(False, True)
    assert await sql_store.reads.get_instance(instance_id) == before
    failure = FlowFailure("flow.cancelled", "the instance was cancelled", {"by": "api"})
    assert await sql_store.runs.begin_ending(
        instance_id, 1, at(3), InstanceState.CANCELLED, failure
    ) == Ack(True, True)
    ending = await sql_store.reads.get_instance(instance_id)
    assert (ending.ending, ending.failure, ending.state) == (
        InstanceState.CANCELLED,
        failure,
        InstanceState.RUNNING,
    )
    assert await sql_store.runs.finish(instance_id, 1, at(4), InstanceState.CANCELLED) == Ack(
        True, True
    )
    final = await sql_store.reads.get_instance(instance_id)
    assert final.state is InstanceState.CANCELLED
    assert final.failure == failure and final.ending is None
    assert (final.lease_owner, final.lease_expires_at, final.wake_at) == (None, None, None)


async def test_finish_writes_the_result_or_the_failure(sql_store: SqlStore) -> None:
    done = await started(sql_store)
    ack = await sql_store.runs.finish(done, 1, at(9), InstanceState.COMPLETED, {"pages": 3})
    assert ack == Ack(True, False)
    record = await sql_store.reads.get_instance(done)
    assert (record.state, record.result, record.failure) == (
        InstanceState.COMPLETED,
        {"pages": 3},
        None,
    )
    assert record.updated_at == at(9)
    failed = await started(sql_store)
    failure = FlowFailure("document.not_read_in_time", "no text after 1h", {"step_id": 4})
    await sql_store.runs.finish(failed, 1, at(9), InstanceState.FAILED, failure=failure)
    assert (await sql_store.reads.get_instance(failed)).failure == failure
    with pytest.raises(ValueError):
        await sql_store.runs.finish(failed, 1, at(9), InstanceState.RUNNING)
    assert await sql_store.reads.count_instances("completed") == 1
    assert await sql_store.reads.count_instances(InstanceState.FAILED) == 1


async def test_release_keeps_the_wake(sql_store: SqlStore) -> None:
    instance_id = await parked(sql_store, at(600))
    claim = await sql_store.runs.claim(instance_id, "node-b", at(1), at(31))
    assert claim is not None
    await sql_store.runs.release(instance_id, claim.fencing_token, at(2))
    record = await sql_store.reads.get_instance(instance_id)
    assert (record.state, record.wake_at, record.lease_owner) == (
        InstanceState.SUSPENDED,
        at(600),
        None,
    )
    # an instance released before it ever parked becomes due at once
    fresh = await started(sql_store)
    await sql_store.runs.release(fresh, 1, at(3))
    assert (await sql_store.reads.get_instance(fresh)).wake_at == at(3)


# ------------------------------------------------------------------------- heartbeats


async def test_heartbeats_keep_the_latest_checkpoint(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    with pytest.raises(JournalConflict):  # no try in flight
        await sql_store.runs.record_heartbeat(instance_id, 1, {"pct": 1}, at(1), at(20))
    assert await sql_store.runs.start_try(instance_id, 1, TryMark(4, 0, 1, at(1)), at(20)) == Ack()
    await sql_store.runs.record_heartbeat(instance_id, 1, {"pct": 10}, at(2), at(21))
    await sql_store.runs.record_heartbeat(instance_id, 1, {"pct": 40}, at(3), at(22))
    record = await sql_store.reads.get_instance(instance_id)
    assert (record.try_step_id, record.try_scope, record.try_number) == (4, 0, 1)
    assert (record.try_started_at, record.heartbeat_at) == (at(1), at(3))
    assert (record.heartbeat_value, record.lease_expires_at) == ({"pct": 40}, at(22))
    beat = await sql_store.runs.last_heartbeat(instance_id, 4, 0)
    assert beat is not None
    assert (beat.try_number, beat.value, beat.recorded_at) == (1, {"pct": 40}, at(3))
    # the node crashes; another node retries from the checkpoint
    claim = await sql_store.runs.claim(instance_id, "node-b", at(30), at(60))
    assert claim is not None
    await sql_store.runs.start_try(
        instance_id, claim.fencing_token, TryMark(4, 0, 2, at(30)), at(50)
    )
    assert (await sql_store.reads.get_instance(instance_id)).heartbeat_value is None
    await sql_store.runs.record_heartbeat(
        instance_id, claim.fencing_token, {"pct": 70}, at(31), at(51)
    )
    beat = await sql_store.runs.last_heartbeat(instance_id, 4, 0)
    assert beat is not None and (beat.try_number, beat.value) == (2, {"pct": 70})
    assert await sql_store.runs.last_heartbeat(instance_id, 4, 1) is None


# ------------------------------------------------------------------------- signals


async def test_deliver_signal_rules(sql_store: SqlStore) -> None:
    with pytest.raises(InstanceNotFound):
        await sql_store.mailbox.deliver_signal(
            NewSignal("nope", "approved", {}, None, at(1), "s-0")
        )
    instance_id = await started(sql_store)
    first, created = await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {"by": "ana"}, "idem-1", at(1), "s-1")
    )
    assert created
    assert (first.name, first.payload, first.received_at, first.taken_at) == (
        "approved",
        {"by": "ana"},
        at(1),
        None,
    )
    repeat, created = await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {"by": "bob"}, "idem-1", at(2), "s-2")
    )
    assert (repeat, created) == (first, False)
    second, _ = await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "note", {}, None, at(3), "s-3")
    )
    assert second.sequence > first.sequence
    assert [s.id for s in (await sql_store.runs.load(instance_id)).signals] == ["s-1", "s-3"]
    await sql_store.runs.finish(instance_id, 1, at(4), InstanceState.COMPLETED)
    with pytest.raises(InstanceEnded) as info:
        await sql_store.mailbox.deliver_signal(
            NewSignal(instance_id, "late", {}, "idem-2", at(5), "s-4")
        )
    assert info.value.code == "instance_ended"
    # a retried delivery still gets its first answer (discarded by the end: never taken)
    discarded = replace(first, discarded_at=at(4), discarded_reason="instance_completed")
    assert await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {}, "idem-1", at(6), "s-5")
    ) == (discarded, False)
    signals = await sql_store.reads.list_signals(instance_id)
    assert [(s.id, s.discarded_reason) for s in signals] == [
        ("s-1", "instance_completed"),
        ("s-3", "instance_completed"),
    ]


async def test_concurrent_repeats_of_a_signal_store_it_once(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    results = await asyncio.gather(
        *(
            sql_store.mailbox.deliver_signal(
                NewSignal(instance_id, "approved", {}, "idem", at(1), f"s-{n}")
            )
            for n in range(20)
        )
    )
    assert sum(created for _, created in results) == 1
    assert len({record.id for record, _ in results}) == 1
    assert len(await sql_store.reads.list_signals(instance_id)) == 1


async def test_take_signal_marks_it_and_journals_it(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {"by": "ana"}, None, at(1), "s-1")
    )
    row = step(
        instance_id,
        step_id=5,
        kind=StepKind.SIGNAL,
        capability_id="approved",
        values={"Approved": {"by": "ana"}},
    )
    assert await sql_store.mailbox.take_signal(1, "s-1", row) == Ack(True, False)
    snapshot = await sql_store.runs.load(instance_id)
    assert snapshot.signals == []
    assert [replace(s, sequence=None) for s in snapshot.steps] == [row]
    (taken,) = await sql_store.reads.list_signals(instance_id)
    assert (taken.taken_at, taken.taken_step_id) == (row.committed_at, 5)
    with pytest.raises(JournalConflict):
        await sql_store.mailbox.take_signal(1, "s-1", replace(row, step_id=6))
    with pytest.raises(StaleFencingToken):
        await sql_store.mailbox.take_signal(7, "s-1", replace(row, step_id=6))
    assert len((await sql_store.runs.load(instance_id)).steps) == 1


async def test_a_refused_take_writes_nothing(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {}, None, at(1), "s-1")
    )
    row = step(instance_id, step_id=5, kind=StepKind.SIGNAL, capability_id="approved")
    await sql_store.runs.commit_step(1, row, at(40))
    before = await sql_store.reads.get_instance(instance_id)
    with pytest.raises(JournalConflict):  # not this instance's signal
        await sql_store.mailbox.take_signal(1, "s-unknown", replace(row, step_id=6))
    with pytest.raises(JournalConflict):  # the journal row exists: the signal stays untaken
        await sql_store.mailbox.take_signal(1, "s-1", replace(row, committed_at=at(3)))
    assert await sql_store.reads.get_instance(instance_id) == before
    assert len((await sql_store.runs.load(instance_id)).steps) == 1
    assert [s.id for s in await sql_store.mailbox.pending_signals(instance_id)] == ["s-1"]
    with pytest.raises(InstanceNotFound):
        await sql_store.mailbox.take_signal(1, "s-1", replace(row, instance_id="nope"))


async def test_a_delivery_claims_an_instance_parked_on_a_wait_that_accepts_it(
    sql_store: SqlStore,
) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.commit_step(1, step(instance_id), at(40))
    await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "note", {"n": 1}, None, at(2), "s-0")
    )
    await sql_store.runs.commit(park_commit(instance_id, 1, at(3), park_at(None, 4, 0)))
    delivery = await sql_store.mailbox.deliver_and_claim(
        NewSignal(instance_id, "approved", {"by": "ana"}, "hook-1", at(5), "s-1"),
        WakeClaim("node-b", at(35), tuple((2, 4))),
    )
    assert (delivery.created, delivery.state) == (True, InstanceState.SUSPENDED)
    assert (delivery.signal.id, delivery.signal.payload, delivery.signal.taken_at) == (
        "s-1",
        {"by": "ana"},
        None,
    )
    claim = delivery.claim
    assert claim is not None and (claim.instance_id, claim.fencing_token) == (instance_id, 2)
    record = await sql_store.reads.get_instance(instance_id)
    assert (record.state, record.lease_owner, record.lease_expires_at) == (
        InstanceState.RUNNING,
        "node-b",
        at(35),
    )
    assert (record.fencing_token, record.updated_at, record.wake_step_id) == (2, at(5), 4)
    # the claim's snapshot (when the store read one) is what a load reads now
    if claim.snapshot is not None:
        assert claim.snapshot == await sql_store.runs.load(instance_id)
        assert [s.id for s in claim.snapshot.signals] == ["s-0", "s-1"]
    # a repeat claims nothing and answers the first signal
    repeat = await sql_store.mailbox.deliver_and_claim(
        NewSignal(instance_id, "approved", {"by": "bob"}, "hook-1", at(6), "s-2"),
        WakeClaim("node-c", at(36), tuple((2, 4))),
    )
    assert (repeat.signal, repeat.created, repeat.state, repeat.claim) == (
        delivery.signal,
        False,
        InstanceState.RUNNING,
        None,
    )
    assert (await sql_store.reads.get_instance(instance_id)).fencing_token == 2


async def test_a_delivery_claims_nothing_that_does_not_wait_for_it(
    sql_store: SqlStore,
) -> None:
    running = await started(sql_store)
    delivery = await sql_store.mailbox.deliver_and_claim(
        NewSignal(running, "approved", {}, None, at(1), "s-1"),
        WakeClaim("node-b", at(31), tuple((4,))),
    )
    assert (delivery.created, delivery.state, delivery.claim) == (True, InstanceState.RUNNING, None)
    elsewhere = await parked(sql_store, at(3600))  # parked at step 3
    delivery = await sql_store.mailbox.deliver_and_claim(
        NewSignal(elsewhere, "approved", {}, None, at(1), "s-2"),
        WakeClaim("node-b", at(31), tuple((4,))),
    )
    assert (delivery.created, delivery.state, delivery.claim) == (
        True,
        InstanceState.SUSPENDED,
        None,
    )
    record = await sql_store.reads.get_instance(elsewhere)
    assert (record.state, record.fencing_token) == (InstanceState.SUSPENDED, 1)
    await sql_store.runs.finish(running, 1, at(2), InstanceState.COMPLETED)
    with pytest.raises(InstanceEnded):
        await sql_store.mailbox.deliver_and_claim(
            NewSignal(running, "approved", {}, None, at(3), "s-3"),
            WakeClaim("node-b", at(33), tuple((4,))),
        )
    assert [s.id for s in await sql_store.reads.list_signals(running)] == ["s-1"]
    with pytest.raises(InstanceNotFound):
        await sql_store.mailbox.deliver_and_claim(
            NewSignal("nope", "approved", {}, None, at(1), "s-4"),
            WakeClaim("node-b", at(31), tuple((3,))),
        )


async def test_get_signal_reads_one_signal_as_stored(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    first, _ = await sql_store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {"x": 1}, "k", at(1), "s-1")
    )
    assert await sql_store.mailbox.get_signal(instance_id, "s-1") == first
    assert await sql_store.mailbox.get_signal(instance_id, "s-2") is None
    assert await sql_store.mailbox.get_signal("other", "s-1") is None
    row = step(instance_id, step_id=5, kind=StepKind.SIGNAL, capability_id="approved")
    await sql_store.mailbox.take_signal(1, "s-1", row)
    taken = await sql_store.mailbox.get_signal(instance_id, "s-1")
    assert taken is not None and (taken.taken_at, taken.taken_step_id) == (at(2), 5)


# ------------------------------------------------------------------------- cancel


async def test_request_cancel_claims_unleased_instances(sql_store: SqlStore) -> None:
    with pytest.raises(InstanceNotFound):
        await sql_store.intake.request_cancel("nope", "api", at(1), at(31))
    sleeping = await parked(sql_store, at(3600))
    ack = await sql_store.intake.request_cancel(sleeping, "node-b", at(1), at(31))
    assert ack.state is InstanceState.RUNNING
    assert ack.claim is not None and ack.claim.fencing_token == 2
    record = await sql_store.reads.get_instance(sleeping)
    assert record.cancel_requested and record.lease_owner == "node-b"
    crashed = await started(sql_store)
    ack = await sql_store.intake.request_cancel(crashed, "node-b", at(31), at(61))
    assert ack.claim is not None and ack.claim.instance_id == crashed
    await sql_store.runs.finish(crashed, 2, at(32), InstanceState.CANCELLED)
    with pytest.raises(InstanceEnded):
        await sql_store.intake.request_cancel(crashed, "node-b", at(33), at(63))


# ------------------------------------------------------------------------- streams


async def test_streams_are_ordered_and_bounded(sql_store: SqlStore) -> None:
    instance_id = await started(sql_store)
    assert await sql_store.streams.write_stream(
        StreamWrite(instance_id, "progress", {"pct": 10}, 40, at(1)), 100
    )
    assert await sql_store.streams.write_stream(
        StreamWrite(instance_id, "progress", {"pct": 50}, 60, at(2)), 100
    )
    assert not await sql_store.streams.write_stream(
        StreamWrite(instance_id, "progress", {"pct": 90}, 1, at(3)), 100
    )
    assert await sql_store.streams.write_stream(
        StreamWrite(instance_id, "log", "other stream", 100, at(3)), 100
    )
    messages = await sql_store.streams.read_stream(instance_id, "progress")
    assert [(m.payload, m.created_at) for m in messages] == [
        ({"pct": 10}, at(1)),
        ({"pct": 50}, at(2)),
    ]
    after = await sql_store.streams.read_stream(instance_id, "progress", after=messages[0].sequence)
    assert [m.payload for m in after] == [{"pct": 50}]
    with pytest.raises(InstanceNotFound):
        await sql_store.streams.write_stream(StreamWrite("nope", "progress", {}, 1, at(1)), 100)


async def test_naive_instants_are_refused(sql_store: SqlStore) -> None:
    naive = datetime(2026, 1, 1)
    with pytest.raises(ValueError, match="aware"):
        await sql_store.intake.claim_due("node-a", naive, at(30), 10, RUNNABLE)
    with pytest.raises(ValueError, match="aware"):
        await sql_store.intake.create_instance(new_instance(created_at=naive))
    assert await sql_store.reads.count_instances() == 0


async def test_ping(sql_store: SqlStore) -> None:
    await sql_store.reads.ping()
