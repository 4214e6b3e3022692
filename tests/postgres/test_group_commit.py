"""PostgreSQL group commit (flowpark.store.batched through flowpark.store.lanes): concurrent starts,
journal commits, parks and completions share one statement per batch, and every item keeps
its own answer: created / repeat / key conflicts, stale tokens, cancel flags, waiting
signals and journal conflicts reach only their own callers."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from flowpark.engine.ports import NewSignal, TryMark
from flowpark.engine.records import Ack, EmittedEvent, InstanceState, StepKind, StepRow
from flowpark.errors import (
    IdempotencyKeyReused,
    InstanceKeyInUse,
    StaleFencingToken,
)
from flowpark.store import JournalConflict, SqlStore
from flowpark.store import writes as store_writes
from flowpark.store.lanes import Lane, Lanes
from tests.support.journal import LEASE, T0, at, commit_of, new_instance, park_at, park_commit
from tests.support.journal import step as journal_step

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("sql_store_url", ["postgres"], indirect=True),
]


def step(instance_id: str, step_id: int = 0, scope: int = 0, **changes: Any) -> StepRow:
    """A journal row whose values name its instance (rows of one batch differ)."""
    values = {"job": {"id": f"j-{instance_id[:8]}", "step": step_id}}
    return journal_step(instance_id, step_id, scope, **{"values": values, **changes})


@pytest.fixture
def journal(sql_store: SqlStore) -> SqlStore:
    assert sql_store.is_postgresql and sql_store.lanes is not None
    return sql_store


async def started(journal: SqlStore, count: int = 1, **changes: Any) -> list[str]:
    results = await asyncio.gather(
        *(journal.intake.create_instance(new_instance(**changes)) for _ in range(count))
    )
    assert all(created for _, created in results)
    return [record.id for record, _ in results]


def lanes(journal: SqlStore) -> Lanes:
    assert journal.lanes is not None
    return journal.lanes


def counts(lane: Lane[Any, Any]) -> tuple[int, int]:
    return lane.batches, lane.items


async def row_version(journal: SqlStore, instance_id: str) -> tuple[str, str]:
    """The instance row's ``xmin`` and ``ctid``: both change with a new row version."""
    async with journal.engine.connect() as conn:
        row = (
            await conn.execute(
                text("SELECT xmin::text, ctid::text FROM flow_instance WHERE id = :id"),
                {"id": instance_id},
            )
        ).one()
    return row[0], row[1]


def journal_rows(rows: list[StepRow]) -> list[StepRow]:
    return [replace(r, sequence=None) for r in rows]


async def make_stale(journal: SqlStore, instance_id: str) -> None:
    """node-a (token 1) loses the instance: parked, then claimed by node-b (token 2)."""
    assert await journal.runs.commit(park_commit(instance_id, 1, T0, park_at(at(60), 1, 0))) == Ack(
        True, False
    )
    claim = await journal.runs.claim(instance_id, "node-b", at(1), at(31))
    assert claim is not None and claim.fencing_token == 2


# ------------------------------------------------------------------------- starts


async def test_fifty_concurrent_starts_in_one_batch_each_get_their_own_answer(
    journal: SqlStore,
) -> None:
    plain = [new_instance() for _ in range(30)]
    # one idempotency key: 8 repeats of one request, 2 other requests
    idem = [new_instance(idempotency_key="k-idem", input={"document": "d-1"}) for _ in range(8)]
    idem += [new_instance(idempotency_key="k-idem", input={"document": "d-2"}) for _ in range(2)]
    # one instance key, no idempotency key: one holder, the others refused
    keyed = [new_instance(instance_key="doc-shared") for _ in range(8)]
    # an instance key with an idempotency key: the repeat is the holder's own start
    both = [new_instance(instance_key="doc-both", idempotency_key="k-both") for _ in range(2)]
    news = plain + idem + keyed + both
    random.Random(20260101).shuffle(news)
    assert len(news) == 50
    before = counts(lanes(journal).create)

    results = await asyncio.gather(
        *(journal.intake.create_instance(n) for n in news), return_exceptions=True
    )

    assert counts(lanes(journal).create) == (before[0] + 1, before[1] + 50)  # one batch
    answer: dict[str, Any] = {n.id: r for n, r in zip(news, results, strict=True)}
    for n in plain:
        record, created = answer[n.id]
        assert created and record.id == n.id and record.fencing_token == 1
    # within the batch the first row of a key wins (rows go in the order submitted)
    first_idem = next(n for n in news if n in idem)
    holder = await journal.reads.get_instance(first_idem.id)
    assert answer[first_idem.id] == (holder, True)
    for n in idem:
        if n is first_idem:
            continue
        if n.input == first_idem.input:
            assert answer[n.id] == (holder, False)
        else:
            error = answer[n.id]
            assert isinstance(error, IdempotencyKeyReused), error
            assert error.fields["instance_id"] == first_idem.id
    first_keyed = next(n for n in news if n in keyed)
    assert answer[first_keyed.id][1] is True
    for n in keyed:
        if n is not first_keyed:
            error = answer[n.id]
            assert isinstance(error, InstanceKeyInUse), error
            assert error.fields["instance_id"] == first_keyed.id
    first_both = next(n for n in news if n in both)
    (other_both,) = [n for n in both if n is not first_both]
    assert answer[first_both.id][1] is True
    assert answer[other_both.id] == (await journal.reads.get_instance(first_both.id), False)

    assert await journal.reads.count_instances() == 30 + 1 + 1 + 1
    for n in news:
        result = answer[n.id]
        if isinstance(result, tuple) and result[1]:
            # a created record is built from the request: it is what the row holds
            assert result[0] == await journal.reads.get_instance(n.id)


async def test_two_concurrent_starts_with_one_id_are_one_start_and_one_conflict(
    journal: SqlStore,
) -> None:
    """One at a time, a second start with an id that exists (and no keys) raises
    JournalConflict. In one batch, both rows carry the same id: one is inserted, and
    each caller must still be told whether its own row went in."""
    new = new_instance()
    results = await asyncio.gather(
        journal.intake.create_instance(new),
        journal.intake.create_instance(new),
        return_exceptions=True,
    )
    assert lanes(journal).create.batches == 1
    created = [r for r in results if isinstance(r, tuple) and r[1]]
    conflicts = [r for r in results if isinstance(r, JournalConflict)]
    assert (len(created), len(conflicts)) == (1, 1), results
    assert await journal.reads.count_instances() == 1


async def test_a_start_batched_with_a_refused_one_is_still_created(journal: SqlStore) -> None:
    """One item the database refuses (a NUL in a text key) fails the batch statement
    (DataError): every start of the batch goes alone; the good one must be created."""
    good, bad = new_instance(), new_instance(instance_key="doc\x00bad")
    results = await asyncio.gather(
        journal.intake.create_instance(good),
        journal.intake.create_instance(bad),
        return_exceptions=True,
    )
    assert lanes(journal).create.batches == 1
    assert isinstance(results[1], Exception) and not isinstance(results[1], JournalConflict)
    assert await journal.reads.count_instances() == 1  # the good one's row is in
    assert results[0] == (await journal.reads.get_instance(good.id), True), results[0]


async def test_a_keyed_start_batched_with_a_refused_one_reports_created(
    journal: SqlStore,
) -> None:
    good = new_instance(idempotency_key="k-good")
    bad = new_instance(instance_key="doc\x00bad")
    results = await asyncio.gather(
        journal.intake.create_instance(good),
        journal.intake.create_instance(bad),
        return_exceptions=True,
    )
    assert lanes(journal).create.batches == 1
    assert await journal.reads.count_instances() == 1
    assert results[0] == (await journal.reads.get_instance(good.id), True), results[0]


# ------------------------------------------------------------------------- parks


async def test_fifty_concurrent_commit_and_park_in_one_batch(journal: SqlStore) -> None:
    ids = await started(journal, 50)
    stale, cancelled, signalled, other_signal, busy = ids[:5]
    await make_stale(journal, stale)
    await journal.intake.request_cancel(cancelled, "api", at(1), at(31))  # node-a holds it: flag
    await journal.mailbox.deliver_signal(
        NewSignal(signalled, "approved", {"ok": True}, None, at(1), "s-1")
    )
    await journal.mailbox.deliver_signal(
        NewSignal(other_signal, "rejected", {}, None, at(1), "s-2")
    )
    await journal.runs.start_try(busy, 1, TryMark(0, 0, 1, at(1)), at(20))
    stale_before = await journal.runs.load(stale)
    cancelled_before = await journal.reads.get_instance(cancelled)
    park_before, commit_before = counts(lanes(journal).park), counts(lanes(journal).commit)

    def call(n: int, instance_id: str) -> Any:
        accept = "approved" if n % 2 == 0 else None
        wake = None if n % 3 == 0 else at(100 + n)
        return journal.runs.commit(
            commit_of(
                1,
                step(instance_id),
                lease_until=at(40),
                park=park_at(wake, n, n % 4, accept, owner="node-a"),
            )
        )

    results = await asyncio.gather(*(call(n, i) for n, i in enumerate(ids)), return_exceptions=True)

    # one park batch for the fifty; only the stale one went on alone (its commit first)
    assert counts(lanes(journal).park) == (park_before[0] + 1, park_before[1] + 50)
    assert counts(lanes(journal).commit) == (commit_before[0] + 1, commit_before[1] + 1)
    by_id = dict(zip(ids, results, strict=True))

    error = by_id[stale]
    assert isinstance(error, StaleFencingToken), error
    assert error.fields["current_token"] == 2
    assert await journal.runs.load(stale) == stale_before  # nothing written for it

    assert by_id[cancelled] == Ack(applied=False, cancel_requested=True, signal_pending=False)
    snap = await journal.runs.load(cancelled)
    assert journal_rows(snap.steps) == [step(cancelled)]
    assert snap.instance.state is InstanceState.RUNNING and snap.instance.cancel_requested
    assert (snap.instance.lease_owner, snap.instance.fencing_token) == ("node-a", 1)
    assert (snap.instance.wake_at, snap.instance.wake_step_id) == (
        cancelled_before.wake_at,
        cancelled_before.wake_step_id,
    )

    assert by_id[signalled] == Ack(applied=False, cancel_requested=False, signal_pending=True)
    snap = await journal.runs.load(signalled)
    assert journal_rows(snap.steps) == [step(signalled)]
    inst = snap.instance
    assert inst.state is InstanceState.RUNNING  # leased to its owner again
    assert (inst.lease_owner, inst.lease_expires_at, inst.fencing_token) == ("node-a", at(40), 1)
    assert [(s.id, s.taken_at) for s in snap.signals] == [("s-1", None)]
    # the run goes on under its lease: it takes the signal
    take = step(
        signalled, step_id=3, kind=StepKind.SIGNAL, capability_id="approved", committed_at=at(3)
    )
    assert await journal.mailbox.take_signal(1, "s-1", take) == Ack(True, False)

    for n, instance_id in enumerate(ids):
        if instance_id in (stale, cancelled, signalled):
            continue
        assert by_id[instance_id] == Ack(applied=True, cancel_requested=False), instance_id
        snap = await journal.runs.load(instance_id)
        assert journal_rows(snap.steps) == [step(instance_id)]
        inst = snap.instance
        assert inst.state is InstanceState.SUSPENDED
        assert (inst.wake_at, inst.wake_step_id, inst.wake_scope) == (
            None if n % 3 == 0 else at(100 + n),
            n,
            n % 4,
        )
        assert (inst.lease_owner, inst.lease_expires_at) == (None, None)
        assert (inst.updated_at, inst.fencing_token) == (at(2), 1)
        assert inst.try_step_id is None and inst.try_started_at is None
    # the busy one had its attempt cleared by the same write
    assert (await journal.reads.get_instance(busy)).try_number is None


async def test_a_waiting_signal_leaves_the_instance_as_before_but_for_the_row(
    journal: SqlStore,
) -> None:
    """commit_and_park's contract for a waiting accepted signal: the row is committed, the
    instance stays running, leased to the owner until lease_until, with the refused park's
    wake fields (where it would have waited); token and state as before."""
    (instance_id,) = await started(journal)
    await journal.mailbox.deliver_signal(NewSignal(instance_id, "approved", {}, None, at(1), "s-1"))
    before = await journal.reads.get_instance(instance_id)
    ack = await journal.runs.commit(
        commit_of(
            1,
            step(instance_id),
            lease_until=T0 + LEASE,
            park=park_at(at(500), 4, 0, "approved", owner="node-a"),
        )
    )
    assert ack == Ack(applied=False, cancel_requested=False, signal_pending=True)
    assert lanes(journal).park.batches == 1
    after = await journal.reads.get_instance(instance_id)
    assert (after.state, after.fencing_token) == (before.state, before.fencing_token)
    assert (after.lease_owner, after.lease_expires_at) == ("node-a", T0 + LEASE)
    assert (after.wake_at, after.wake_step_id, after.wake_scope) == (at(500), 4, 0)
    assert [s.step_id for s in (await journal.runs.load(instance_id)).steps] == [0]


async def test_a_journal_row_that_exists_fails_only_its_own_commit(journal: SqlStore) -> None:
    ids = await started(journal, 12)
    duplicate = ids[0]
    assert await journal.runs.commit_step(1, step(duplicate), at(40)) == Ack(True, False)
    before = await journal.runs.load(duplicate)
    commit_before = counts(lanes(journal).commit)

    results = await asyncio.gather(
        *(journal.runs.commit_step(1, step(i, committed_at=at(5)), at(40)) for i in ids),
        return_exceptions=True,
    )

    assert counts(lanes(journal).commit) == (commit_before[0] + 1, commit_before[1] + 12)
    error = results[0]
    assert isinstance(error, JournalConflict), error
    assert error.fields["instance_id"] == duplicate
    assert results[1:] == [Ack(True, False)] * 11
    assert await journal.runs.load(duplicate) == before
    for instance_id in ids[1:]:
        assert journal_rows((await journal.runs.load(instance_id)).steps) == [
            step(instance_id, committed_at=at(5))
        ]


async def test_a_journal_row_that_exists_fails_only_its_own_park(journal: SqlStore) -> None:
    ids = await started(journal, 10)
    duplicate = ids[0]
    await journal.runs.commit_step(1, step(duplicate), at(40))
    before = await journal.runs.load(duplicate)

    results = await asyncio.gather(
        *(
            journal.runs.commit(
                commit_of(
                    1,
                    step(i),
                    lease_until=at(40),
                    park=park_at(at(90), 1, 0, "approved", owner="node-a"),
                )
            )
            for i in ids
        ),
        return_exceptions=True,
    )

    assert lanes(journal).park.batches == 1
    assert isinstance(results[0], JournalConflict), results[0]
    assert results[1:] == [Ack(True, False)] * 9
    assert await journal.runs.load(duplicate) == before  # not parked, nothing written
    for instance_id in ids[1:]:
        snap = await journal.runs.load(instance_id)
        assert snap.instance.state is InstanceState.SUSPENDED
        assert (snap.instance.wake_at, snap.instance.wake_step_id) == (at(90), 1)
        assert journal_rows(snap.steps) == [step(instance_id)]


async def test_a_value_json_cannot_encode_as_utf8_fails_no_other_item_of_its_batch(
    journal: SqlStore,
) -> None:
    """A lone surrogate (text a capability decoded with ``surrogateescape``) cannot be
    encoded by pydantic-core: the batch's JSON is not made, and each item goes alone (as
    a row the database refuses does). The others' starts, commits and finishes are in; the
    odd item fares as it does alone."""
    odd_start = new_instance(input={"name": "scan\udcff.pdf"})
    created = await asyncio.gather(
        journal.intake.create_instance(new_instance()),
        journal.intake.create_instance(odd_start),
        return_exceptions=True,
    )
    assert [r[1] for r in created if isinstance(r, tuple)] == [True, True], created
    ids = [r[0].id for r in created if isinstance(r, tuple)]

    results = await asyncio.gather(
        journal.runs.commit_step(1, step(ids[0]), at(40)),
        journal.runs.commit_step(1, step(ids[1], values={"name": "scan\udcff.pdf"}), at(40)),
        return_exceptions=True,
    )
    assert list(results) == [Ack(True, False)] * 2, results
    assert journal_rows((await journal.runs.load(ids[0])).steps) == [step(ids[0])]

    results = await asyncio.gather(
        journal.runs.finish(ids[0], 1, at(9), InstanceState.COMPLETED, {"ok": True}),
        journal.runs.finish(ids[1], 1, at(9), InstanceState.COMPLETED, {"name": "\udcff"}),
        return_exceptions=True,
    )
    assert list(results) == [Ack(True, False)] * 2, results
    assert (await journal.reads.get_instance(ids[0])).result == {"ok": True}

    ids = await started(journal, 2)
    parked = await asyncio.gather(
        *(
            journal.runs.commit(
                commit_of(
                    1,
                    step(i, values=v),
                    lease_until=at(40),
                    park=park_at(at(90), 1, 0, owner="node-a"),
                )
            )
            for i, v in zip(ids, [{"ok": True}, {"name": "\udcff"}], strict=True)
        ),
        return_exceptions=True,
    )
    assert list(parked) == [Ack(True, False)] * 2, parked
    assert (await journal.reads.get_instance(ids[0])).state is InstanceState.SUSPENDED


async def test_two_commits_of_one_instance_in_one_batch_land_once_each(
    journal: SqlStore,
) -> None:
    (instance_id,) = await started(journal)
    rows = [step(instance_id, step_id=n, committed_at=at(2 + n)) for n in range(3)]
    results = await asyncio.gather(*(journal.runs.commit_step(1, r, at(40)) for r in rows))
    assert results == [Ack(True, False)] * 3
    assert lanes(journal).commit.batches == 1
    assert (
        sorted(journal_rows((await journal.runs.load(instance_id)).steps), key=lambda r: r.step_id)
        == rows
    )


# ------------------------------------------------------------------------- commits


async def test_a_plain_commit_makes_no_new_instance_row_version(journal: SqlStore) -> None:
    (instance_id,) = await started(journal)
    version = await row_version(journal, instance_id)
    before = await journal.reads.get_instance(instance_id)
    assert await journal.runs.commit_step(1, step(instance_id), at(40)) == Ack(True, False)
    assert lanes(journal).commit.batches == 1
    assert await row_version(journal, instance_id) == version  # xmin and ctid unchanged
    assert await journal.reads.get_instance(instance_id) == before
    assert journal_rows((await journal.runs.load(instance_id)).steps) == [step(instance_id)]


async def test_a_commit_that_clears_an_attempt_writes_the_instance_row(
    journal: SqlStore,
) -> None:
    (instance_id,) = await started(journal)
    await journal.runs.start_try(instance_id, 1, TryMark(0, 0, 1, at(1)), at(20))
    await journal.runs.record_heartbeat(instance_id, 1, {"pct": 50}, at(1.5), at(21))
    xmin, _ = await row_version(journal, instance_id)
    assert await journal.runs.commit_step(1, step(instance_id), at(40)) == Ack(True, False)
    assert lanes(journal).commit.batches == 1
    assert (await row_version(journal, instance_id))[0] != xmin
    inst = await journal.reads.get_instance(instance_id)
    assert (inst.try_step_id, inst.try_number, inst.heartbeat_at) == (None, None, None)
    assert (inst.lease_expires_at, inst.updated_at) == (at(40), at(2))


async def test_a_batch_of_plain_and_busy_commits(journal: SqlStore) -> None:
    ids = await started(journal, 10)
    busy = set(ids[::2])
    for instance_id in busy:
        await journal.runs.start_try(instance_id, 1, TryMark(0, 0, 1, at(1)), at(20))
    versions = {i: await row_version(journal, i) for i in ids}
    cancelled = ids[1]
    await journal.intake.request_cancel(cancelled, "api", at(1), at(31))
    versions[cancelled] = await row_version(journal, cancelled)
    before = {i: await journal.reads.get_instance(i) for i in ids}

    results = await asyncio.gather(*(journal.runs.commit_step(1, step(i), at(40)) for i in ids))

    assert lanes(journal).commit.batches == 1
    for instance_id, ack in zip(ids, results, strict=True):
        assert ack == Ack(True, instance_id == cancelled)
        inst = await journal.reads.get_instance(instance_id)
        if instance_id in busy:
            assert (await row_version(journal, instance_id))[0] != versions[instance_id][0]
            assert inst.try_step_id is None
            assert (inst.lease_expires_at, inst.updated_at) == (at(40), at(2))
        else:
            assert await row_version(journal, instance_id) == versions[instance_id]
            assert inst == before[instance_id]
        assert journal_rows((await journal.runs.load(instance_id)).steps) == [step(instance_id)]


async def test_a_stale_token_in_a_commit_batch_fails_only_its_caller(
    journal: SqlStore,
) -> None:
    ids = await started(journal, 8)
    stale = ids[3]
    await make_stale(journal, stale)
    before = await journal.runs.load(stale)
    results = await asyncio.gather(
        *(journal.runs.commit_step(1, step(i), at(40)) for i in ids), return_exceptions=True
    )
    # one batch; the stale one then goes alone on the one-statement path (no lane)
    assert counts(lanes(journal).commit) == (1, 8)
    assert isinstance(results[3], StaleFencingToken)
    assert [r for n, r in enumerate(results) if n != 3] == [Ack(True, False)] * 7
    assert await journal.runs.load(stale) == before


async def outbox(journal: SqlStore) -> dict[str, tuple[str, str, Any]]:
    """Outbox events by id: (instance id, name, payload)."""
    return {
        e["id"]: (e["instance_id"], e["name"], e["payload"])
        for e in await journal.reads.list_events(limit=1000)
    }


def emitted(instance_id: str) -> EmittedEvent:
    return EmittedEvent(f"ev-{instance_id}", "document.processed", {"doc": instance_id[:8]})


def emit_row(instance_id: str) -> StepRow:
    return step(
        instance_id,
        step_id=4,
        kind=StepKind.EMIT,
        capability_id="document.processed",
        values={"event_id": f"ev-{instance_id}"},
    )


async def test_emit_commits_share_a_batch_with_plain_ones_and_a_stale_one_writes_no_event(
    journal: SqlStore,
) -> None:
    ids = await started(journal, 10)
    stale = ids[0]
    await make_stale(journal, stale)
    emits, plain = ids[:6], ids[6:]
    results = await asyncio.gather(
        *(journal.runs.commit_step(1, emit_row(i), at(40), events=[emitted(i)]) for i in emits),
        *(journal.runs.commit_step(1, step(i), at(40)) for i in plain),
        return_exceptions=True,
    )

    assert counts(lanes(journal).commit) == (1, 10)
    assert isinstance(results[0], StaleFencingToken)
    assert results[1:] == [Ack(True, False)] * 9
    assert await outbox(journal) == {
        f"ev-{i}": (i, "document.processed", {"doc": i[:8]}) for i in emits[1:]
    }
    for i in emits[1:]:
        assert journal_rows((await journal.runs.load(i)).steps) == [emit_row(i)]
    assert (await journal.runs.load(stale)).steps == []


async def test_emit_commits_carrying_deferred_rows_share_a_batch(
    journal: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = await started(journal, 8)
    busy = ids[0]
    await journal.runs.start_try(busy, 1, TryMark(3, 0, 1, at(1)), at(20))
    stale = ids[1]
    await make_stale(journal, stale)
    carrying, plain = ids[:5], ids[5:]
    extracted = {i: step(i, step_id=3, committed_at=at(1.5)) for i in carrying}
    alone: list[str] = []  # rows written on the one-at-a-time path (a refused batch)
    insert_step = store_writes.insert_step  # type: ignore[attr-defined]  # patched below

    async def spied(conn: Any, row: StepRow, *args: Any, **kwargs: Any) -> None:
        alone.append(row.instance_id)
        await insert_step(conn, row, *args, **kwargs)

    monkeypatch.setattr(store_writes, "insert_step", spied)
    results = await asyncio.gather(
        *(
            journal.runs.commit_step(
                1, emit_row(i), at(40), events=[emitted(i)], deferred=extracted[i]
            )
            for i in carrying
        ),
        *(journal.runs.commit_step(1, step(i), at(40)) for i in plain),
        return_exceptions=True,
    )

    assert counts(lanes(journal).commit) == (1, 8)
    assert isinstance(results[1], StaleFencingToken)
    assert [r for n, r in enumerate(results) if n != 1] == [Ack(True, False)] * 7
    assert alone == []  # the batch took them all (the stale one fails its fence alone)
    for i in carrying:
        steps = (await journal.runs.load(i)).steps
        if i == stale:
            assert steps == []
            continue
        # the deferred row first (commit order), then the emit's own row, once each
        assert journal_rows(steps) == [extracted[i], emit_row(i)]
        assert steps[0].sequence < steps[1].sequence  # type: ignore[operator]
    for i in plain:
        assert journal_rows((await journal.runs.load(i)).steps) == [step(i)]
    assert set(await outbox(journal)) == {f"ev-{i}" for i in carrying if i != stale}
    inst = await journal.reads.get_instance(busy)  # its attempt cleared at the emit's instant
    assert (inst.try_step_id, inst.lease_expires_at, inst.updated_at) == (None, at(40), at(2))


async def test_an_event_id_that_exists_fails_only_its_own_commit(journal: SqlStore) -> None:
    ids = await started(journal, 6)
    first, twin = ids[0], ids[1]
    taken = emitted(first)
    assert await journal.runs.commit_step(1, emit_row(first), at(40), events=[taken]) == Ack(
        True, False
    )
    results = await asyncio.gather(
        journal.runs.commit_step(1, emit_row(twin), at(40), events=[taken]),
        *(journal.runs.commit_step(1, emit_row(i), at(40), events=[emitted(i)]) for i in ids[2:]),
        return_exceptions=True,
    )

    assert isinstance(results[0], JournalConflict), results[0]
    assert results[1:] == [Ack(True, False)] * 4
    assert (await journal.runs.load(twin)).steps == []
    assert set(await outbox(journal)) == {f"ev-{i}" for i in [first, *ids[2:]]}


async def test_a_commit_waits_for_a_claim_in_flight_and_is_refused_once_it_commits(
    journal: SqlStore,
) -> None:
    """The FOR SHARE fence: a claim that commits while the batch waits for the row makes
    the token stale; nothing is written."""
    (instance_id,) = await started(journal)
    async with journal.engine.connect() as claimer, journal.engine.connect() as watcher:
        await claimer.execute(
            text(
                "UPDATE flow_instance SET fencing_token = fencing_token + 1, "
                "lease_owner = 'node-b' WHERE id = :id"
            ),
            {"id": instance_id},
        )
        commit = asyncio.ensure_future(journal.runs.commit_step(1, step(instance_id), at(40)))
        for _ in range(2000):  # until the batch's statement waits for the claimer's lock
            waiting = (
                await watcher.execute(
                    text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"
                    )
                )
            ).scalar_one()
            if waiting:
                break
            await watcher.rollback()
        else:
            raise AssertionError("the commit never waited for the claim's row lock")
        assert not commit.done()
        await claimer.commit()
        with pytest.raises(StaleFencingToken) as info:
            await commit
    assert info.value.fields["current_token"] == 2
    assert (await journal.runs.load(instance_id)).steps == []


async def test_a_cancelled_caller_does_not_cut_the_batch_statement(journal: SqlStore) -> None:
    ids = await started(journal, 3)
    lane = lanes(journal).commit
    callers = [asyncio.ensure_future(journal.runs.commit_step(1, step(i), at(40))) for i in ids]
    for _ in range(200):  # until the batch is taken (its statement is then in flight)
        if lane.batches:
            break
        await asyncio.sleep(0)
    assert lane.batches == 1 and lane.items == 3
    callers[0].cancel()
    assert await asyncio.gather(*callers[1:]) == [Ack(True, False)] * 2
    assert callers[0].cancelled()
    for instance_id in ids:  # the cancelled caller's row went in with the statement
        assert journal_rows((await journal.runs.load(instance_id)).steps) == [step(instance_id)]


# ------------------------------------------------------------------------- finish


async def test_many_completions_at_once(journal: SqlStore) -> None:
    ids = await started(journal, 20)
    cancelled, stale = ids[4], ids[9]
    await journal.intake.request_cancel(cancelled, "api", at(1), at(31))
    await make_stale(journal, stale)
    cancelled_before = await journal.reads.get_instance(cancelled)
    stale_before = await journal.reads.get_instance(stale)
    finish_before = counts(lanes(journal).finish)

    results = await asyncio.gather(
        *(
            journal.runs.finish(i, 1, at(9), InstanceState.COMPLETED, {"n": n, "id": i})
            for n, i in enumerate(ids)
        ),
        return_exceptions=True,
    )

    assert counts(lanes(journal).finish) == (finish_before[0] + 1, finish_before[1] + 20)
    by_id = dict(zip(ids, results, strict=True))
    assert by_id[cancelled] == Ack(applied=False, cancel_requested=True)
    assert await journal.reads.get_instance(cancelled) == cancelled_before
    assert isinstance(by_id[stale], StaleFencingToken), by_id[stale]
    assert await journal.reads.get_instance(stale) == stale_before
    for n, instance_id in enumerate(ids):
        if instance_id in (cancelled, stale):
            continue
        assert by_id[instance_id] == Ack(True, False)
        inst = await journal.reads.get_instance(instance_id)
        assert inst.state is InstanceState.COMPLETED
        assert inst.result == {"n": n, "id": instance_id}
        assert (inst.lease_owner, inst.lease_expires_at, inst.updated_at) == (None, None, at(9))
    # the cancelled one still unwinds under its lease
    assert await journal.runs.finish(cancelled, 1, at(10), InstanceState.CANCELLED) == Ack(
        True, True
    )
