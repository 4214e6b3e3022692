"""PostgreSQL signal delivery in one statement (deliver, and claim the instance when it is
parked on a wait that accepts the signal): races with a park, with other deliveries and
with repeats of one idempotency key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import text

from flowpark.engine.ports import NewSignal, WakeClaim
from flowpark.engine.records import InstanceState, StepKind
from flowpark.store import SqlStore
from tests.support.eventually import eventually
from tests.support.journal import at, commit_of, new_instance, park_at, park_commit, step

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("sql_store_url", ["postgres"], indirect=True),
]

WAIT = 4  # the node index of the wait that accepts "approved"


async def waiting_on_a_lock(journal: SqlStore) -> bool:
    """Whether a session of this database waits for a lock (another session holds it)."""
    async with journal.engine.connect() as conn:
        waiting = await conn.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    return bool(waiting)


async def started(journal: SqlStore) -> str:
    record, created = await journal.intake.create_instance(new_instance())
    assert created
    return record.id


def deliver(
    journal: SqlStore, instance_id: str, signal_id: str, key: str | None = None, **changes: Any
) -> Any:
    return journal.mailbox.deliver_and_claim(
        NewSignal(instance_id, "approved", {"by": signal_id}, key, at(5), signal_id),
        WakeClaim(changes.get("owner", "node-b"), at(35), tuple((WAIT,))),
    )


async def test_a_park_committed_while_the_delivery_waits_is_seen_and_claimed(
    sql_store: SqlStore,
) -> None:
    """The lost-wake-up race: the run parks (its last row with it) while the delivery waits
    for the row; the park's own mailbox check ran before the signal existed, so the
    delivery must see the park and claim, and its journal must hold the park's row."""
    instance_id = await started(sql_store)
    last = step(instance_id, step_id=3)
    async with sql_store.engine.connect() as node_a:
        await node_a.execute(
            text(
                "UPDATE flow_instance SET state = 'suspended', wake_step_id = :wait, "
                "wake_scope = 0, lease_owner = NULL, lease_expires_at = NULL WHERE id = :id"
            ),
            {"id": instance_id, "wait": WAIT},
        )
        await node_a.execute(
            text(
                "INSERT INTO flow_step (instance_id, step_id, scope, kind, capability_id, "
                "outcome, try_number, final, started_at, committed_at) VALUES (:id, 3, 0, "
                "'step', 'ocr.submit', 'success', 1, false, :at, :at)"
            ),
            {"id": instance_id, "at": last.committed_at},
        )
        delivery = asyncio.ensure_future(deliver(sql_store, instance_id, "s-1"))
        await eventually(lambda: waiting_on_a_lock(sql_store), what="the delivery blocks")
        assert not delivery.done()  # it waits for the row the park holds
        await node_a.commit()
    answer = await asyncio.wait_for(delivery, timeout=10)
    assert (answer.created, answer.state) == (True, InstanceState.SUSPENDED)
    assert answer.claim is not None and answer.claim.fencing_token == 2
    # its statement began before the park's row existed: the engine must load the journal
    assert answer.claim.snapshot is None
    snapshot = await sql_store.runs.load(instance_id)
    assert [(r.step_id, r.kind) for r in snapshot.steps] == [(3, StepKind.STEP)]
    assert [s.id for s in snapshot.signals] == ["s-1"]
    assert snapshot.instance.state is InstanceState.RUNNING


async def test_a_delivery_waits_for_a_batched_park_and_then_claims(
    sql_store: SqlStore,
) -> None:
    """The same race through the store's own park (the group-commit statement)."""
    instance_id = await started(sql_store)
    deliveries = []

    async def park() -> None:
        await sql_store.runs.commit(
            commit_of(
                1,
                step(instance_id, step_id=3),
                lease_until=at(40),
                park=park_at(None, WAIT, 0, "approved", owner="node-a"),
            )
        )

    async def signal() -> None:
        deliveries.append(await deliver(sql_store, instance_id, "s-1"))

    await asyncio.gather(park(), signal())
    (answer,) = deliveries
    record = await sql_store.reads.get_instance(instance_id)
    if answer.claim is None:  # the delivery came first: the park saw it and stayed running
        assert record.state is InstanceState.RUNNING and record.fencing_token == 1
    else:  # the park came first: the delivery claimed the instance
        assert record.state is InstanceState.RUNNING and record.fencing_token == 2
        assert answer.claim.fencing_token == 2
    snapshot = await sql_store.runs.load(instance_id)
    assert [s.id for s in snapshot.signals] == ["s-1"]
    assert [r.step_id for r in snapshot.steps] == [3]


async def test_concurrent_deliveries_claim_a_parked_instance_once(
    sql_store: SqlStore,
) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.commit(park_commit(instance_id, 1, at(1), park_at(None, WAIT, 0)))
    answers = await asyncio.wait_for(
        asyncio.gather(
            *(deliver(sql_store, instance_id, f"s-{n}", owner=f"node-{n}") for n in range(10))
        ),
        timeout=20,
    )
    assert all(a.created for a in answers)
    claims = [a for a in answers if a.claim is not None]
    assert len(claims) == 1
    record = await sql_store.reads.get_instance(instance_id)
    assert record.fencing_token == 2 and record.state is InstanceState.RUNNING
    assert len(await sql_store.mailbox.pending_signals(instance_id)) == 10


async def test_concurrent_repeats_of_one_key_store_and_claim_once(
    sql_store: SqlStore,
) -> None:
    instance_id = await started(sql_store)
    await sql_store.runs.commit(park_commit(instance_id, 1, at(1), park_at(None, WAIT, 0)))
    answers = await asyncio.wait_for(
        asyncio.gather(*(deliver(sql_store, instance_id, f"s-{n}", key="hook") for n in range(20))),
        timeout=20,
    )
    assert sum(a.created for a in answers) == 1
    assert len({a.signal.id for a in answers}) == 1
    assert sum(a.claim is not None for a in answers) == 1
    assert len(await sql_store.reads.list_signals(instance_id)) == 1
    assert (await sql_store.reads.get_instance(instance_id)).fencing_token == 2
