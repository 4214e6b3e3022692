"""What every store promises through its ports (:mod:`flowpark.engine.ports`), one body per
promise, run on each store: in memory, SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from flowpark.engine.decide.deadlines import POLL_BUDGET, RETRY_TOTAL, deadline_row, ends_at
from flowpark.engine.ports import Commit, NewSignal, Park, Store, StreamWrite, TryMark, WakeClaim
from flowpark.engine.records import (
    Ack,
    EmittedEvent,
    InstanceState,
    ReviewRequest,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.errors import (
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceKeyInUse,
    InstanceNotFound,
    JournalConflict,
    StaleFencingToken,
)
from tests.support.journal import FLOW, LEASE, T0, at, new_instance, step

RUNNABLE = [FLOW]


def park(wake_at: object, step_id: int = 3, **changes: object) -> Park:
    return Park(wake_at, step_id, 0, "node-a", **changes)  # type: ignore[arg-type]


async def started(store: Store, **changes: object) -> str:
    record, created = await store.intake.create_instance(new_instance(**changes))
    assert created
    return record.id


async def parked(store: Store, wake_at: object = None, step_id: int = 3) -> str:
    """An instance started by node-a (token 1) and parked at ``step_id`` until ``wake_at``."""
    instance_id = await started(store)
    ack = await store.runs.commit(
        Commit(instance_id, 1, at(2), at(32), park=park(wake_at, step_id))
    )
    assert ack == Ack(applied=True, cancel_requested=False)
    return instance_id


def signal(
    instance_id: str, signal_id: str, key: str | None = None, seconds: float = 5
) -> NewSignal:
    return NewSignal(instance_id, "approved", {"by": "ana"}, key, at(seconds), signal_id)


# ------------------------------------------------------------------------- starts


async def test_a_start_is_running_leased_with_token_one(store: Store) -> None:
    new = new_instance(instance_key="doc-1")
    record, created = await store.intake.create_instance(new)
    assert created and record.id == new.id
    stored = await store.reads.get_instance(new.id)
    assert (stored.state, stored.fencing_token, stored.lease_owner) == (
        InstanceState.RUNNING,
        1,
        "node-a",
    )
    assert stored.lease_expires_at == T0 + LEASE and stored.instance_key == "doc-1"
    assert (await store.runs.load(new.id)).steps == []


async def test_a_repeated_idempotency_key_returns_the_first_instance(store: Store) -> None:
    first, _ = await store.intake.create_instance(new_instance(idempotency_key="k"))
    again, created = await store.intake.create_instance(new_instance(idempotency_key="k"))
    assert not created and again.id == first.id
    with pytest.raises(IdempotencyKeyReused):
        await store.intake.create_instance(
            new_instance(idempotency_key="k", input={"document": "other"})
        )
    assert await store.reads.count_instances() == 1


async def test_an_instance_key_is_held_while_its_instance_is_active(store: Store) -> None:
    holder = await started(store, instance_key="doc")
    with pytest.raises(InstanceKeyInUse):
        await store.intake.create_instance(new_instance(instance_key="doc"))
    await store.runs.finish(holder, 1, at(3), InstanceState.COMPLETED, {"ok": True})
    _, created = await store.intake.create_instance(new_instance(instance_key="doc"))
    assert created


async def test_an_unknown_instance_is_not_found(store: Store) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(InstanceNotFound):
        await store.runs.load(missing)
    with pytest.raises(InstanceNotFound):
        await store.reads.get_instance(missing)
    assert await store.runs.claim(missing, "node-b", at(1), at(31)) is None


# ------------------------------------------------------------------ claims, fencing


async def test_a_claim_leases_a_parked_instance_and_moves_the_token(store: Store) -> None:
    instance_id = await parked(store, at(60))
    claim = await store.runs.claim(instance_id, "node-b", at(10), at(40))
    assert claim is not None and claim.fencing_token == 2
    record = await store.reads.get_instance(instance_id)
    assert (record.state, record.lease_owner, record.lease_expires_at) == (
        InstanceState.RUNNING,
        "node-b",
        at(40),
    )
    # a live lease is not taken; an expired one is
    assert await store.runs.claim(instance_id, "node-c", at(39), at(70)) is None
    later = await store.runs.claim(instance_id, "node-c", at(41), at(71))
    assert later is not None and later.fencing_token == 3


async def test_a_stale_token_writes_nothing(store: Store) -> None:
    instance_id = await parked(store, at(60))
    assert await store.runs.claim(instance_id, "node-b", at(10), at(40)) is not None
    before = await store.runs.load(instance_id)
    row = step(instance_id, step_id=4, committed_at=at(11))
    with pytest.raises(StaleFencingToken) as info:
        await store.runs.commit(Commit(instance_id, 1, at(11), at(41), rows=(row,)))
    assert info.value.code == "stale_fencing_token"
    for write in (
        store.runs.renew_lease(instance_id, 1, at(90)),
        store.runs.release(instance_id, 1, at(12)),
        store.runs.finish(instance_id, 1, at(12), InstanceState.COMPLETED),
        store.runs.start_try(instance_id, 1, TryMark(4, 0, 1, at(12)), at(42)),
        store.runs.commit(Commit(instance_id, 1, at(12), at(42), park=park(at(99)))),
    ):
        with pytest.raises(StaleFencingToken):
            await write
    assert await store.runs.load(instance_id) == before


async def test_renew_extends_the_lease_and_release_gives_it_back(store: Store) -> None:
    instance_id = await started(store)
    assert await store.runs.renew_lease(instance_id, 1, at(90)) == Ack()
    assert (await store.reads.get_instance(instance_id)).lease_expires_at == at(90)
    await store.runs.release(instance_id, 1, at(5))
    record = await store.reads.get_instance(instance_id)
    # no wake of its own: made due at the release, so the sweep takes it again
    assert (record.state, record.wake_at, record.lease_owner) == (
        InstanceState.SUSPENDED,
        at(5),
        None,
    )
    claims = await store.intake.claim_due("node-b", at(6), at(36), 10, RUNNABLE)
    assert [c.instance_id for c in claims] == [instance_id]
    assert claims[0].fencing_token == 2
    await store.runs.release(instance_id, 2, at(7))  # the wake it had stays
    assert (await store.reads.get_instance(instance_id)).wake_at == at(5)


async def test_claim_due_takes_expired_leases_then_the_earliest_wake(store: Store) -> None:
    late = await parked(store, at(30))
    early = await parked(store, at(20))
    not_due = await parked(store, at(500))
    unsignalled = await parked(store, None)
    lost = await started(store)  # node-a's lease ran out at T0 + LEASE
    other = await started(store, flow_name="other.flow")
    await store.runs.commit(Commit(other, 1, at(2), at(32), park=park(at(1))))
    now = at(100)
    assert await store.intake.count_not_runnable(now, RUNNABLE) == 1
    first = await store.intake.claim_due("node-b", now, now + LEASE, 2, RUNNABLE)
    assert [c.instance_id for c in first] == [lost, early]
    assert [c.taken_over for c in first] == [True, False]
    rest = await store.intake.claim_due("node-b", now, now + LEASE, 10, RUNNABLE)
    assert [c.instance_id for c in rest] == [late]
    assert await store.intake.claim_due("node-c", now, now + LEASE, 10, RUNNABLE) == []
    assert await store.intake.claim_due("node-c", now, now + LEASE, 10, []) == []
    for waiting in (not_due, unsignalled):
        state = (await store.reads.get_instance(waiting)).state
        assert state is InstanceState.SUSPENDED
    assert await store.reads.next_wake() == at(1)
    assert await store.reads.next_wake(after=at(1)) == at(500)  # the next wake ahead
    assert await store.reads.next_wake(after=at(500)) is None


# -------------------------------------------------------------------------- commits


async def test_a_commit_appends_its_rows_events_and_reviews(store: Store) -> None:
    instance_id = await started(store)
    first = step(instance_id, step_id=1, committed_at=at(2))
    second = step(instance_id, step_id=2, kind=StepKind.EMIT, committed_at=at(3))
    event = EmittedEvent("e-1", "document.done", {"id": "d-1"})
    review = ReviewRequest("r-1", "document d-1", "low confidence", {"score": 0.2})
    ack = await store.runs.commit(
        Commit(
            instance_id,
            1,
            at(3),
            at(33),
            rows=(first, second),
            events=(event,),
            reviews=(review,),
        )
    )
    assert ack == Ack(applied=True, cancel_requested=False)
    snapshot = await store.runs.load(instance_id)
    assert [(r.step_id, r.kind) for r in snapshot.steps] == [(1, StepKind.STEP), (2, "emit")]
    assert snapshot.steps[0].sequence is not None and snapshot.steps[1].sequence is not None
    assert snapshot.steps[0].sequence < snapshot.steps[1].sequence
    assert snapshot.steps[0].values == first.values
    events = await store.reads.list_events()
    assert [(e["id"], e["instance_id"], e["payload"]) for e in events] == [
        ("e-1", instance_id, {"id": "d-1"})
    ]
    reviews = await store.reads.list_reviews()
    assert [(r["id"], r["details"]) for r in reviews] == [("r-1", {"score": 0.2})]


async def test_a_commit_that_conflicts_writes_none_of_its_parts(store: Store) -> None:
    instance_id = await started(store)
    row = step(instance_id, step_id=1)
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(row,)))
    fresh = step(instance_id, step_id=2)
    event = EmittedEvent("e-2", "document.done", {})
    with pytest.raises(JournalConflict):
        await store.runs.commit(
            Commit(instance_id, 1, at(3), at(33), rows=(fresh, row), events=(event,))
        )
    snapshot = await store.runs.load(instance_id)
    assert [r.step_id for r in snapshot.steps] == [1]
    assert await store.reads.list_events() == []


async def test_deadline_rows_and_rows_without_values_read_back_as_written(
    store: Store,
) -> None:
    """A deadline row (SQL stores keep its end in ``flow_step.ends_at``) and a row that put
    no values come back with the values written, in commit order, through every read: a
    start's rows, a commit's deferred row, a park's row, the claim's snapshot, the
    operator's journal and budget reads. An end not in the engine's own form (another
    offset) comes back as written too."""
    instance_id = str(uuid.uuid4())
    window = deadline_row(instance_id, 0, 0, RETRY_TOTAL, at(0), at(180))
    await store.intake.create_instance(new_instance(id=instance_id, steps=(window,)))
    upload = step(instance_id, step_id=0, committed_at=at(2))
    budget = deadline_row(instance_id, 1, 0, POLL_BUDGET, at(2), at(4 * 3600 + 0.5))
    offset = replace(
        deadline_row(instance_id, 2, 0, RETRY_TOTAL, at(2), at(182)),
        values={"endsAt": "2026-01-01T02:03:02+02:00"},
    )
    empty = step(instance_id, step_id=2, values={}, committed_at=at(3))
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(upload, budget)))
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(offset,)))
    wait = park(at(60), 1, kind=WakeKind.POLL)
    await store.runs.commit(Commit(instance_id, 1, at(3), at(33), rows=(empty,), park=wait))
    written = [window, upload, budget, offset, empty]

    def shape(rows: Sequence[StepRow]) -> list[tuple[Any, ...]]:
        return [(r.step_id, r.kind, r.capability_id, dict(r.values)) for r in rows]

    assert shape((await store.runs.load(instance_id)).steps) == shape(written)
    assert shape(await store.operator.journal_of(instance_id)) == shape(written)
    claims = await store.intake.claim_due("node-b", at(100), at(130), 10, RUNNABLE)
    assert [c.instance_id for c in claims] == [instance_id]
    snapshot = claims[0].snapshot or await store.runs.load(instance_id)
    assert shape(snapshot.steps) == shape(written)
    assert [ends_at(r) for r in snapshot.steps if r.kind is StepKind.DEADLINE] == [
        at(180),
        at(4 * 3600 + 0.5),
        at(182),
    ]
    ends = await store.operator.poll_budget_ends([(instance_id, 1)])
    assert ends == {(instance_id, 1): at(4 * 3600 + 0.5)}


async def test_a_deferred_try_row_reads_back_its_deferral(store: Store) -> None:
    """A try its provider deferred says so on its row (when the last deferral woke it and
    why), through a commit, a park's row and every read; other rows say nothing."""
    instance_id = await started(store)
    deferred = step(
        instance_id, step_id=1, deferred_until=at(1.5), deferred_by="budget", committed_at=at(2)
    )
    pushed = step(
        instance_id, step_id=2, deferred_until=at(2.5), deferred_by="pushback", committed_at=at(3)
    )
    plain = step(instance_id, step_id=3, committed_at=at(4))
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(deferred,)))
    await store.runs.commit(Commit(instance_id, 1, at(3), at(33), rows=(pushed, plain)))
    wait = park(at(60), 3, kind=WakeKind.POLL)
    later = step(instance_id, step_id=4, deferred_until=at(4), deferred_by="budget")
    await store.runs.commit(
        Commit(instance_id, 1, at(4), at(34), rows=(replace(later, committed_at=at(5)),), park=wait)
    )

    def shape(rows: Sequence[StepRow]) -> list[tuple[Any, ...]]:
        return [(r.step_id, r.deferred_until, r.deferred_by) for r in rows]

    expected = [(1, at(1.5), "budget"), (2, at(2.5), "pushback"), (3, None, None)]
    expected.append((4, at(4), "budget"))
    assert shape((await store.runs.load(instance_id)).steps) == expected
    assert shape(await store.operator.journal_of(instance_id)) == expected
    claims = await store.intake.claim_due("node-b", at(100), at(130), 10, RUNNABLE)
    snapshot = claims[0].snapshot or await store.runs.load(instance_id)
    assert shape(snapshot.steps) == expected


def _uncarriable(row: StepRow) -> StepRow:
    """``row`` with an end the compact form cannot give back (stored as a row of its own)."""
    return replace(row, values={"endsAt": ends_at(row).isoformat().replace("+00:00", "Z")})


async def test_deadlines_a_start_stores_as_rows_read_back_in_the_order_written(
    store: Store,
) -> None:
    """A start's deadlines that its instance row cannot carry are journal rows, in the
    order given (the decider reads the journal's order: the last row of a wait is the one
    in force)."""
    new = new_instance()
    rows = tuple(
        _uncarriable(deadline_row(new.id, n, 0, RETRY_TOTAL, T0, at(60 * (n + 1))))
        for n in (3, 1, 2, 0)
    )
    await store.intake.create_instance(replace(new, steps=rows))
    back = [replace(r, sequence=None) for r in (await store.runs.load(new.id)).steps]
    assert back == list(rows)


async def test_a_deadline_stored_as_a_row_keeps_its_place_among_carried_ones(
    store: Store,
) -> None:
    """A write whose deadlines are partly carried, partly rows of their own reads back in
    the write's order."""
    instance_id = await started(store)
    budget = deadline_row(instance_id, 1, 0, POLL_BUDGET, at(2), at(3600))
    odd = _uncarriable(deadline_row(instance_id, 2, 0, RETRY_TOTAL, at(2), at(182)))
    upload = step(instance_id, step_id=0, committed_at=at(2))
    window = deadline_row(instance_id, 4, 0, RETRY_TOTAL, at(2), at(182))
    odd_after = _uncarriable(deadline_row(instance_id, 5, 0, RETRY_TOTAL, at(2), at(182)))
    last = deadline_row(instance_id, 6, 0, RETRY_TOTAL, at(2), at(182))
    rows = (budget, odd, upload, window, odd_after, last)
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=rows))
    back = [replace(r, sequence=None) for r in (await store.runs.load(instance_id)).steps]
    assert back == list(rows)
    journal = [replace(r, sequence=None) for r in await store.operator.journal_of(instance_id)]
    assert journal == list(rows)


async def test_a_carried_poll_budget_is_the_one_in_force_for_the_next_attempt(
    store: Store,
) -> None:
    """The poll's budget written with the upload (carried inside its row on SQL stores)
    is what the overview reads for the next attempt; an extension written after that
    attempt was asked for does not move it, and the list reads the extended end."""
    instance_id = await started(store)
    upload = step(instance_id, step_id=0, committed_at=at(2))
    budget = deadline_row(instance_id, 1, 0, POLL_BUDGET, at(2), at(3600))
    window = deadline_row(instance_id, 2, 0, RETRY_TOTAL, at(2), at(182))
    await store.runs.commit(Commit(instance_id, 1, at(2), at(32), rows=(upload, budget, window)))
    attempt0 = step(instance_id, step_id=2, scope=0, started_at=at(2), committed_at=at(3))
    wait = park(at(10), 1, kind=WakeKind.POLL)
    await store.runs.commit(Commit(instance_id, 1, at(3), at(33), rows=(attempt0,), park=wait))
    claim = await store.runs.claim(instance_id, "node-b", at(4), at(34))
    assert claim is not None
    extended = deadline_row(
        instance_id, 1, 0, POLL_BUDGET, at(2), at(7200), committed_at=at(4), try_number=2
    )
    attempt1 = step(instance_id, step_id=2, scope=1, started_at=at(10), committed_at=at(11))
    await store.runs.commit(
        Commit(instance_id, claim.fencing_token, at(4), at(34), rows=(extended,))
    )
    await store.runs.commit(Commit(instance_id, claim.fencing_token, at(11), at(41), (attempt1,)))
    starts = await store.overview.attempt_starts(at(5))
    assert [(s.step_id, s.scope, s.budget_ends_at) for s in starts] == [(2, 1, at(3600))]
    ends = await store.operator.poll_budget_ends([(instance_id, 1)])
    assert ends == {(instance_id, 1): at(7200)}
    kinds = [(r.kind, r.step_id, r.try_number) for r in (await store.runs.load(instance_id)).steps]
    assert kinds == [
        (StepKind.STEP, 0, 1),
        (StepKind.DEADLINE, 1, 1),
        (StepKind.DEADLINE, 2, 1),
        (StepKind.STEP, 2, 1),
        (StepKind.DEADLINE, 1, 2),
        (StepKind.STEP, 2, 1),
    ]


async def test_a_commit_with_its_park_suspends_the_instance(store: Store) -> None:
    instance_id = await started(store)
    row = step(instance_id, step_id=2, committed_at=at(4))
    wait = park(at(60), 2, kind=WakeKind.POLL)
    ack = await store.runs.commit(Commit(instance_id, 1, at(4), at(34), rows=(row,), park=wait))
    assert ack == Ack(applied=True, cancel_requested=False)
    record = await store.reads.get_instance(instance_id)
    assert (record.state, record.wake_at, record.wake_step_id, record.wake_kind) == (
        InstanceState.SUSPENDED,
        at(60),
        2,
        WakeKind.POLL,
    )
    assert (record.lease_owner, record.lease_expires_at, record.updated_at) == (None, None, at(4))
    assert [r.step_id for r in (await store.runs.load(instance_id)).steps] == [2]


async def test_a_park_is_refused_when_a_cancel_was_requested(store: Store) -> None:
    instance_id = await started(store)
    requested = await store.intake.request_cancel(instance_id, "node-b", at(3), at(33))
    assert requested.claim is None  # node-a's lease is live: it will see the flag
    row = step(instance_id, step_id=2, committed_at=at(4))
    ack = await store.runs.commit(
        Commit(instance_id, 1, at(4), at(34), rows=(row,), park=park(at(60), 2))
    )
    assert ack == Ack(applied=False, cancel_requested=True)
    record = await store.reads.get_instance(instance_id)
    assert record.state is InstanceState.RUNNING and record.cancel_requested
    assert [r.step_id for r in (await store.runs.load(instance_id)).steps] == [2]
    # a compensation waiting for its next try parks whatever it unwinds for
    unwinding = park(at(70), 2, unwinding=True)
    ack = await store.runs.commit(Commit(instance_id, 1, at(5), at(35), park=unwinding))
    assert ack.applied
    assert (await store.reads.get_instance(instance_id)).state is InstanceState.SUSPENDED


async def test_a_park_is_refused_while_an_accepted_signal_waits(store: Store) -> None:
    instance_id = await started(store)
    await store.mailbox.deliver_signal(signal(instance_id, "s-1", seconds=3))
    row = step(instance_id, step_id=4, committed_at=at(4))
    wait = park(None, 4, accept_signal="approved", kind=WakeKind.SIGNAL)
    ack = await store.runs.commit(Commit(instance_id, 1, at(4), at(34), rows=(row,), park=wait))
    assert ack == Ack(applied=False, cancel_requested=False, signal_pending=True)
    record = await store.reads.get_instance(instance_id)
    assert (record.state, record.lease_owner, record.fencing_token) == (
        InstanceState.RUNNING,
        "node-a",
        1,
    )
    assert [r.step_id for r in (await store.runs.load(instance_id)).steps] == [4]
    # a signal of another name does not hold the park back
    other = park(None, 4, accept_signal="rejected", kind=WakeKind.SIGNAL)
    assert (await store.runs.commit(Commit(instance_id, 1, at(5), at(35), park=other))).applied


# -------------------------------------------------------------------------- mailbox


async def test_signals_are_stored_in_arrival_order_and_a_key_repeats_the_first(
    store: Store,
) -> None:
    instance_id = await started(store)
    first, created = await store.mailbox.deliver_signal(signal(instance_id, "s-1", "k-1"))
    assert created and first.payload == {"by": "ana"} and first.taken_at is None
    repeat, created = await store.mailbox.deliver_signal(
        NewSignal(instance_id, "approved", {"by": "bob"}, "k-1", at(6), "s-2")
    )
    assert (repeat, created) == (first, False)
    second, _ = await store.mailbox.deliver_signal(signal(instance_id, "s-3", seconds=7))
    assert second.sequence > first.sequence
    assert [s.id for s in await store.mailbox.pending_signals(instance_id)] == ["s-1", "s-3"]
    assert await store.mailbox.get_signal(instance_id, "s-3") == second
    assert await store.mailbox.get_signal(instance_id, "s-9") is None


async def test_a_signal_for_an_ended_instance_is_refused_but_a_repeat_answers(
    store: Store,
) -> None:
    instance_id = await started(store)
    first, _ = await store.mailbox.deliver_signal(signal(instance_id, "s-1", "k-1"))
    await store.runs.finish(instance_id, 1, at(8), InstanceState.COMPLETED, 1)
    with pytest.raises(InstanceEnded):
        await store.mailbox.deliver_signal(signal(instance_id, "s-2", seconds=9))
    repeat, created = await store.mailbox.deliver_signal(signal(instance_id, "s-3", "k-1"))
    assert not created and repeat.id == first.id
    # the end discarded what waited untaken: it will never be taken
    assert (repeat.discarded_at, repeat.discarded_reason) == (at(8), "instance_completed")
    assert await store.mailbox.pending_signals(instance_id) == [repeat]
    with pytest.raises(InstanceNotFound):
        await store.mailbox.deliver_signal(signal("00000000-0000-4000-8000-000000000000", "s-4"))


async def test_a_delivery_claims_an_instance_parked_on_a_wait_that_accepts_it(
    store: Store,
) -> None:
    waiting = await parked(store, None, step_id=4)
    elsewhere = await parked(store, None, step_id=7)
    claim = WakeClaim("node-b", at(40), (4,))
    delivered = await store.mailbox.deliver_and_claim(signal(waiting, "s-1"), claim)
    assert delivered.created and delivered.state is InstanceState.SUSPENDED
    assert delivered.claim is not None and delivered.claim.fencing_token == 2
    record = await store.reads.get_instance(waiting)
    assert (record.state, record.lease_owner) == (InstanceState.RUNNING, "node-b")
    passed = await store.mailbox.deliver_and_claim(signal(elsewhere, "s-2"), claim)
    assert passed.created and passed.claim is None
    assert (await store.reads.get_instance(elsewhere)).state is InstanceState.SUSPENDED
    # a repeat of a delivery claims nothing
    again = await store.mailbox.deliver_and_claim(signal(waiting, "s-3", None), claim)
    assert again.claim is None and again.state is InstanceState.RUNNING


async def test_a_commit_takes_a_signal_with_its_row(store: Store) -> None:
    instance_id = await started(store)
    await store.mailbox.deliver_signal(signal(instance_id, "s-1", seconds=3))
    row = step(
        instance_id,
        step_id=5,
        kind=StepKind.SIGNAL,
        capability_id="approved",
        committed_at=at(6),
        values={"approved": {"by": "ana"}},
    )
    ack = await store.runs.commit(
        Commit(instance_id, 1, at(6), at(36), rows=(row,), take_signal="s-1")
    )
    assert ack == Ack(applied=True, cancel_requested=False)
    assert await store.mailbox.pending_signals(instance_id) == []
    taken = await store.mailbox.get_signal(instance_id, "s-1")
    assert taken is not None and (taken.taken_at, taken.taken_step_id) == (at(6), 5)
    # a taken signal is taken once: the second take writes nothing
    again = step(instance_id, step_id=6, kind=StepKind.SIGNAL, capability_id="approved")
    with pytest.raises(JournalConflict):
        await store.runs.commit(
            Commit(instance_id, 1, at(7), at(37), rows=(again,), take_signal="s-1")
        )
    assert [r.step_id for r in (await store.runs.load(instance_id)).steps] == [5]


async def test_a_refused_signal_leaves_the_mailbox_without_a_row(store: Store) -> None:
    instance_id = await started(store)
    await store.mailbox.deliver_signal(signal(instance_id, "s-1", seconds=3))
    assert await store.mailbox.refuse_signal(instance_id, 1, "s-1", 5, at(6)) == Ack()
    refused = await store.mailbox.get_signal(instance_id, "s-1")
    assert refused is not None and refused.outcome is False and refused.taken_step_id == 5
    assert await store.mailbox.pending_signals(instance_id) == []
    assert (await store.runs.load(instance_id)).steps == []
    with pytest.raises(JournalConflict):
        await store.mailbox.refuse_signal(instance_id, 1, "s-1", 5, at(7))
    with pytest.raises(StaleFencingToken):
        await store.mailbox.refuse_signal(instance_id, 9, "s-1", 5, at(7))


# ---------------------------------------------------------------- endings, cancels


async def test_a_completion_is_refused_under_a_cancel_and_unwinding_ends_it(
    store: Store,
) -> None:
    instance_id = await started(store)
    flagged = await store.intake.request_cancel(instance_id, "node-b", at(2), at(32))
    assert flagged.claim is None and flagged.state is InstanceState.RUNNING
    done = await store.runs.finish(instance_id, 1, at(3), InstanceState.COMPLETED, 1)
    assert done == Ack(applied=False, cancel_requested=True)
    ending = await store.runs.begin_ending(instance_id, 1, at(4), InstanceState.CANCELLED, None)
    assert ending.cancel_requested
    assert (await store.reads.get_instance(instance_id)).ending is InstanceState.CANCELLED
    await store.runs.finish(instance_id, 1, at(5), InstanceState.CANCELLED)
    record = await store.reads.get_instance(instance_id)
    assert (record.state, record.ending, record.lease_owner) == (
        InstanceState.CANCELLED,
        None,
        None,
    )
    with pytest.raises(InstanceEnded):
        await store.intake.request_cancel(instance_id, "node-b", at(6), at(36))


async def test_a_cancel_claims_a_parked_instance(store: Store) -> None:
    instance_id = await parked(store, at(600))
    answer = await store.intake.request_cancel(instance_id, "node-b", at(5), at(35))
    assert answer.claim is not None and answer.claim.fencing_token == 2
    record = await store.reads.get_instance(instance_id)
    assert record.cancel_requested and record.lease_owner == "node-b"


# ------------------------------------------------------------ heartbeats, streams


async def test_a_try_in_flight_keeps_its_checkpoint_and_a_commit_clears_it(
    store: Store,
) -> None:
    instance_id = await started(store)
    assert await store.runs.start_try(instance_id, 1, TryMark(4, 0, 1, at(1)), at(20)) == Ack()
    await store.runs.record_heartbeat(instance_id, 1, {"page": 3}, at(3), at(23))
    record = await store.reads.get_instance(instance_id)
    assert (record.try_step_id, record.try_number, record.heartbeat_value) == (4, 1, {"page": 3})
    assert record.lease_expires_at == at(23)
    beat = await store.runs.last_heartbeat(instance_id, 4, 0)
    assert beat is not None and (beat.try_number, beat.value) == (1, {"page": 3})
    row = step(instance_id, step_id=4, committed_at=at(5))
    await store.runs.commit(Commit(instance_id, 1, at(5), at(45), rows=(row,)))
    record = await store.reads.get_instance(instance_id)
    assert (record.try_step_id, record.heartbeat_at) == (None, None)
    assert record.lease_expires_at == at(45)
    with pytest.raises(JournalConflict):  # no try in flight
        await store.runs.record_heartbeat(instance_id, 1, {"page": 4}, at(6), at(26))


async def test_a_stream_keeps_its_bound_and_its_fence(store: Store) -> None:
    instance_id = await started(store)

    def message(n: int) -> StreamWrite:
        return StreamWrite(instance_id, "progress", {"n": n}, 40, at(n))

    assert await store.streams.write_stream(message(1), 100, token=1)
    assert await store.streams.write_stream(message(2), 100)
    assert not await store.streams.write_stream(message(3), 100, token=1)  # past the bound
    with pytest.raises(StaleFencingToken):
        await store.streams.write_stream(message(4), 1000, token=2)
    stored = await store.streams.read_stream(instance_id, "progress")
    assert [m.payload for m in stored] == [{"n": 1}, {"n": 2}]
    after = await store.streams.read_stream(instance_id, "progress", after=stored[0].sequence)
    assert [m.payload for m in after] == [{"n": 2}]


# ------------------------------------------------------------------- the read model


async def test_the_operator_list_filters_and_pages(store: Store) -> None:
    from flowpark.engine.ports.operator import InstanceFilter

    ids = [await started(store, created_at=T0 + timedelta(seconds=n)) for n in range(3)]
    waiting = ids[0]
    await store.runs.commit(
        Commit(waiting, 1, at(4), at(34), park=park(at(10), kind=WakeKind.POLL))
    )
    page = await store.operator.list_instances(InstanceFilter(), limit=2)
    assert [r.id for r in page.rows] == [ids[2], ids[1]] and page.after is not None
    rest = await store.operator.list_instances(InstanceFilter(), limit=2, after=page.after)
    assert [r.id for r in rest.rows] == [ids[0]] and rest.after is None
    polls = InstanceFilter(waiting=WakeKind.POLL)
    assert await store.operator.count_matching(polls) == 1
    overdue = InstanceFilter(overdue_seconds=5, now=at(20))
    assert [r.id for r in (await store.operator.list_instances(overdue, limit=10)).rows] == [
        waiting
    ]
    counts = await store.operator.count_instances_by(at(20), 5)
    assert counts.overdue == 1
    assert {(c.state, c.count) for c in counts.by_state} == {
        (InstanceState.RUNNING, 2),
        (InstanceState.SUSPENDED, 1),
    }


async def test_an_ending_that_lists_failed_compensations_is_found_by_the_filter(
    store: Store,
) -> None:
    from flowpark.engine.ports.operator import InstanceFilter
    from flowpark.engine.records import COMPENSATION_FAILURES
    from flowpark.errors import FlowFailure

    failed = {"capability_id": "t.undo", "step_id": 0, "scope": 0, "detail": "503"}
    marked, clean, running = [await started(store) for _ in range(3)]
    cancelled = FlowFailure("flow.cancelled", "cancelled", {COMPENSATION_FAILURES: [failed]})
    await store.runs.finish(marked, 1, at(5), InstanceState.CANCELLED, failure=cancelled)
    plain = FlowFailure("flow.cancelled", "cancelled")
    await store.runs.finish(clean, 1, at(5), InstanceState.CANCELLED, failure=plain)
    where = InstanceFilter(compensation_failed=True)
    page = await store.operator.list_instances(where, limit=10)
    assert [r.id for r in page.rows] == [marked]
    assert await store.operator.count_matching(where) == 1
    assert running not in [r.id for r in page.rows]
    stored = await store.reads.get_instance(marked)
    assert stored.failure is not None
    assert stored.failure.details[COMPENSATION_FAILURES] == [failed]
    both = InstanceFilter(compensation_failed=True, states=(InstanceState.FAILED,))
    assert await store.operator.count_matching(both) == 0


async def test_a_marked_ending_is_reopened_once_with_its_retry_rows(store: Store) -> None:
    from flowpark.engine.ports import Reopen
    from flowpark.engine.records import COMPENSATION_FAILURES, Outcome
    from flowpark.errors import FlowFailure

    failed = {COMPENSATION_FAILURES: [{"capability_id": "ocr.cancel", "step_id": 0}]}
    marked = await started(store, instance_key="doc-1")
    failure = FlowFailure("flow.cancelled", "cancelled", failed)
    await store.runs.finish(marked, 1, at(5), InstanceState.CANCELLED, failure=failure)
    plain = await started(store)
    await store.runs.finish(plain, 1, at(5), InstanceState.CANCELLED)
    retry = step(marked, kind=StepKind.RETRY, capability_id="ocr.cancel", values={"after_try": 3})

    def reopen(instance_id: str, *rows: object) -> Reopen:
        return Reopen(instance_id, "node-b", at(10), at(40), rows)  # type: ignore[arg-type]

    assert await store.intake.reopen(reopen(plain)) is None  # nothing failed
    other = await started(store, instance_key="doc-1")  # the key is taken again meanwhile
    with pytest.raises(InstanceKeyInUse):
        await store.intake.reopen(reopen(marked, retry))
    assert (await store.runs.load(marked)).steps == []  # nothing written
    await store.runs.finish(other, 1, at(6), InstanceState.COMPLETED)
    claim = await store.intake.reopen(reopen(marked, retry))
    assert claim is not None and claim.fencing_token == 2
    again = await store.runs.load(marked)
    inst = again.instance
    assert (inst.state, inst.ending, inst.lease_owner) == (
        InstanceState.RUNNING,
        InstanceState.CANCELLED,
        "node-b",
    )
    assert inst.failure is not None and inst.failure.details == failed  # kept
    assert [(r.kind, r.values, r.outcome) for r in again.steps] == [
        (StepKind.RETRY, {"after_try": 3}, Outcome.SUCCESS)
    ]
    assert await store.intake.reopen(reopen(marked)) is None  # it runs now
    done = FlowFailure("flow.cancelled", "cancelled")
    await store.runs.finish(marked, 2, at(12), InstanceState.CANCELLED, failure=done)
    assert await store.intake.reopen(reopen(marked)) is None  # cleared: nothing to retry


async def test_the_operator_list_finds_by_display_key_and_id_prefix(store: Store) -> None:
    from flowpark.engine.ports.operator import InstanceFilter

    one = await started(store, input={"document": "d-1"})
    await started(store, input={"document": "d-2"})
    keyed = (FLOW + ("document",),)
    where = InstanceFilter(display_fields=keyed, display_value="d-1")
    page = await store.operator.list_instances(where, limit=10)
    assert [(r.id, r.display_value) for r in page.rows] == [(one, "d-1")]
    unkeyed = InstanceFilter(display_value="d-1")  # no flow declares a display key
    assert await store.operator.count_matching(unkeyed) == 0
    prefixed = await store.operator.list_instances(InstanceFilter(id_prefix=one[:8]), limit=10)
    assert one in [r.id for r in prefixed.rows]


# ------------------------------------------------------------------- operator actions


async def test_an_action_record_is_completed_or_retaken_only_as_it_was_read(
    store: Store,
) -> None:
    from flowpark.engine.ports.operator import OperatorAction

    instance_id = await started(store)
    reads = store.operator
    first = OperatorAction(
        str(uuid.uuid4()), instance_id, "wake", "ops", at(1), {"pending": True}, "k-1"
    )
    assert await reads.record_action(first) == (first, True)
    again, created = await reads.record_action(replace(first, id=str(uuid.uuid4())))
    assert (again.id, created) == (first.id, False)  # one record per key

    rerun = replace(first, actor="ops-2", acted_at=at(70), details={"pending": True, "runs": 2})
    assert await reads.retake_action(first, rerun)
    assert not await reads.retake_action(first, replace(rerun, acted_at=at(71)))  # lost race
    # the first run's late outcome is not kept over the retaking run's
    assert not await reads.complete_action(replace(first, details={"answer": {}, "status": 200}))
    done = replace(rerun, details={"answer": {"woken": True}, "status": 200, "runs": 2})
    assert await reads.complete_action(done)
    assert await reads.find_action(instance_id, "wake", "k-1") == done
    assert await reads.actions_of(instance_id) == [done]


async def test_scratch_is_a_new_empty_store_beside_this_one(store: Store) -> None:
    instance_id = await started(store)
    scratch = store.scratch()
    assert await scratch.reads.count_instances() == 0
    other = await started(scratch)
    assert await store.reads.count_instances() == 1  # nothing of the scratch's is here
    with pytest.raises(InstanceNotFound):
        await store.reads.get_instance(other)
    assert (await store.reads.get_instance(instance_id)).id == instance_id
