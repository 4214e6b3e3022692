"""What every store promises about an operator's wake kept on the instance row
(``flow_instance.woken``): a bulk wake's batch marks the parked instances and records each
one's action at once (:meth:`~flowpark.engine.ports.OperatorReads.record_wakes`), a claim
reads the mark back, a park clears it unless it keeps it (the deferral of the woken try),
an ending clears it. Run on each store: in memory, SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

from flowpark.engine.ports import Commit, Park, Store
from flowpark.engine.ports.operator import OperatorAction, WakeBatch, WakeMark
from flowpark.engine.records import InstanceState, WakeKind
from tests.support.journal import at, new_instance, step

RUNNABLE = [("document.process", "1.0.0")]


async def _parked(store: Store, wake: Any, kind: WakeKind, step_id: int = 3) -> str:
    """An instance started by node-a (token 1) and parked at ``step_id`` for ``kind``."""
    record, _ = await store.intake.create_instance(new_instance())
    park = Park(wake, step_id, 0, "node-a", kind)
    await store.runs.commit(Commit(record.id, 1, at(2), at(32), park=park))
    return record.id


def _wake(instance_id: str, key: str | None = None) -> OperatorAction:
    return OperatorAction(str(uuid.uuid4()), instance_id, "wake", "ops", at(10), {}, key)


def _details(mark: WakeMark) -> dict[str, Any] | None:
    """As the API records them: nothing for an instance gone or ended."""
    if mark.state is None or mark.state.ended:
        return None
    kind = mark.wake_kind.value if mark.wake_kind is not None else None
    return {"answer": {"woken": mark.marked, "state": mark.state.value, "kind": kind}}


async def test_a_bulk_wake_marks_what_is_parked_and_records_every_action_at_once(
    store: Store,
) -> None:
    poll = await _parked(store, at(60), WakeKind.POLL)
    overdue = await _parked(store, at(5), WakeKind.RETRY)
    signal = await _parked(store, None, WakeKind.SIGNAL)
    unserved = await _parked(store, at(60), WakeKind.POLL)
    running, _ = await store.intake.create_instance(new_instance())
    ended, _ = await store.intake.create_instance(new_instance())
    await store.runs.finish(ended.id, 1, at(3), InstanceState.COMPLETED)
    missing = str(uuid.uuid4())
    order = [poll, overdue, signal, unserved, running.id, ended.id, missing]
    batch = WakeBatch(
        tuple(_wake(i, "bulk:k") for i in order), at(10), _details, frozenset({unserved})
    )

    done = await store.operator.record_wakes(batch)

    assert [d.instance_id for d in done] == order
    marks = {d.instance_id: d.mark for d in done}
    assert {i for i, m in marks.items() if m is not None and m.marked} == {poll, overdue}
    assert marks[poll] == WakeMark(poll, InstanceState.SUSPENDED, WakeKind.POLL, True, at(10))
    # an instance due already keeps its earlier instant (its place among the overdue)
    assert marks[overdue] == WakeMark(overdue, InstanceState.SUSPENDED, WakeKind.RETRY, True, at(5))
    assert marks[signal] == WakeMark(signal, InstanceState.SUSPENDED, WakeKind.SIGNAL)
    assert marks[unserved] == WakeMark(unserved, InstanceState.SUSPENDED, WakeKind.POLL)
    assert marks[running.id] == WakeMark(running.id, InstanceState.RUNNING)
    assert marks[ended.id] == WakeMark(ended.id, InstanceState.COMPLETED)
    assert marks[missing] == WakeMark(missing, None)
    for instance_id in (poll, overdue):
        record = await store.reads.get_instance(instance_id)
        assert record.woken and record.state is InstanceState.SUSPENDED
    assert (await store.reads.get_instance(poll)).wake_at == at(10)
    for instance_id in (signal, unserved, running.id, ended.id):
        assert not (await store.reads.get_instance(instance_id)).woken
    unchanged = await store.reads.get_instance(unserved)
    assert (unchanged.wake_at, unchanged.state) == (at(60), InstanceState.SUSPENDED)

    # each recorded with who and when, in the instance's history; none for the gone ones
    recorded = {d.instance_id: d.action for d in done}
    assert recorded[ended.id] is None and recorded[missing] is None
    for instance_id in (poll, overdue, signal, unserved, running.id):
        history = await store.operator.actions_of(instance_id)
        assert history == [recorded[instance_id]]
        (action,) = history
        assert (action.action, action.actor, action.acted_at, action.idempotency_key) == (
            "wake",
            "ops",
            at(10),
            "bulk:k",
        )
    assert (await store.operator.actions_of(poll))[0].details == {
        "answer": {"woken": True, "state": "suspended", "kind": "poll"}
    }

    # the same key again: the first records answer, nothing is marked or recorded again
    again = await store.operator.record_wakes(
        WakeBatch(tuple(_wake(i, "bulk:k") for i in order), at(20), _details)
    )
    assert [d.mark for d in again[:5]] == [None] * 5
    assert [d.action for d in again[:5]] == [recorded[i] for i in order[:5]]
    assert (await store.reads.get_instance(unserved)).woken is False
    assert (await store.reads.get_instance(poll)).wake_at == at(10)
    for instance_id in order[:5]:
        assert len(await store.operator.actions_of(instance_id)) == 1


async def test_the_mark_is_read_by_the_claim_kept_by_a_woken_park_and_cleared_otherwise(
    store: Store,
) -> None:
    first = await _parked(store, at(60), WakeKind.RETRY)
    second = await _parked(store, at(60), WakeKind.RETRY)
    await store.operator.record_wakes(WakeBatch((_wake(first), _wake(second)), at(10), _details))
    claims = await store.intake.claim_due("node-b", at(10), at(40), 10, RUNNABLE)
    assert sorted(c.instance_id for c in claims) == sorted([first, second])
    for claim in claims:
        snapshot = claim.snapshot or await store.runs.load(claim.instance_id)
        assert snapshot.instance.woken and snapshot.instance.state is InstanceState.RUNNING
    token = {c.instance_id: c.fencing_token for c in claims}

    # a deferral of the woken try keeps the mark (a park alone, and a park with a row)
    deferred = Park(at(11), 3, 0, "node-b", WakeKind.PROVIDER_BUDGET, woken=True)
    await store.runs.commit(Commit(first, token[first], at(10), at(40), park=deferred))
    row = step(second, step_id=2, started_at=at(10), committed_at=at(10))
    await store.runs.commit(Commit(second, token[second], at(10), at(40), (row,), park=deferred))
    for instance_id in (first, second):
        record = await store.reads.get_instance(instance_id)
        assert (record.woken, record.wake_kind, record.wake_at) == (
            True,
            WakeKind.PROVIDER_BUDGET,
            at(11),
        )

    # any other park clears it; so does an ending
    again = await store.runs.claim(first, "node-b", at(11), at(41))
    assert again is not None
    plain = Park(at(99), 3, 0, "node-b", WakeKind.RETRY)
    await store.runs.commit(Commit(first, again.fencing_token, at(11), at(41), park=plain))
    assert not (await store.reads.get_instance(first)).woken
    last = await store.runs.claim(second, "node-b", at(11), at(41))
    assert last is not None
    await store.runs.finish(second, last.fencing_token, at(12), InstanceState.COMPLETED)
    ended = await store.reads.get_instance(second)
    assert ended.state is InstanceState.COMPLETED and not ended.woken
