"""PostgreSQL specifics: sweeps skip rows another node holds (FOR UPDATE SKIP LOCKED)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from flowpark.engine.records import NewInstance
from flowpark.store import SqlStore, make_async_engine, upgrade
from tests.support.journal import park_at, park_commit

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RUNNABLE = [("document.process", "1.0.0")]


async def test_claim_due_skips_locked_rows_without_waiting(pg_url: str) -> None:
    upgrade(pg_url)
    engine = make_async_engine(pg_url)
    journal = SqlStore(engine)
    try:
        ids = []
        for n in range(3):
            record, _ = await journal.intake.create_instance(
                NewInstance(
                    id=f"00000000-0000-7000-8000-{n:012d}",
                    flow_name="document.process",
                    flow_version="1.0.0",
                    input={},
                    created_at=T0,
                    deadline_at=None,
                    lease_owner="node-a",
                    lease_expires_at=T0 + timedelta(seconds=30),
                )
            )
            await journal.runs.commit(
                park_commit(record.id, 1, T0, park_at(T0 + timedelta(seconds=n), 1, 0))
            )
            ids.append(record.id)
        async with engine.connect() as other_node:
            # another node's claim is in flight on the oldest instance
            await other_node.execute(
                text("SELECT id FROM flow_instance WHERE id = :id FOR UPDATE"), {"id": ids[0]}
            )
            now = T0 + timedelta(minutes=1)
            claims = await asyncio.wait_for(
                journal.intake.claim_due("node-b", now, now + timedelta(seconds=30), 10, RUNNABLE),
                timeout=10,
            )
            assert [c.instance_id for c in claims] == ids[1:]
            await other_node.rollback()
        claims = await journal.intake.claim_due(
            "node-b", now, now + timedelta(seconds=30), 10, RUNNABLE
        )
        assert [c.instance_id for c in claims] == ids[:1]
    finally:
        await engine.dispose()


async def test_claim_due_takes_expired_leases_then_wakes_in_order_up_to_its_limit(
    pg_url: str,
) -> None:
    """The two ordered scans of a claim: expired leases (by expiry) first, then the
    earliest wakes (ties by id), a held row stepped over, no more than the limit taken."""
    upgrade(pg_url)
    engine = make_async_engine(pg_url)
    journal = SqlStore(engine)

    async def start(n: int, lease_seconds: int) -> str:
        record, _ = await journal.intake.create_instance(
            NewInstance(
                id=f"00000000-0000-7000-8000-{n:012d}",
                flow_name="document.process",
                flow_version="1.0.0",
                input={},
                created_at=T0,
                deadline_at=None,
                lease_owner="node-a",
                lease_expires_at=T0 + timedelta(seconds=lease_seconds),
            )
        )
        return record.id

    try:
        parked = []
        for n in range(40):  # wakes at 0..9 s, four instances each (ties)
            instance_id = await start(100 - n, 30)
            wake = T0 + timedelta(seconds=n // 4)
            await journal.runs.commit(park_commit(instance_id, 1, T0, park_at(wake, 1, 0)))
            parked.append((wake, instance_id))
        lost = [await start(n, seconds) for n, seconds in ((1, 40), (2, 35))]
        order = [lost[1], lost[0]] + [i for _, i in sorted(parked)]
        now = T0 + timedelta(minutes=1)
        async with engine.connect() as other_node:
            await other_node.execute(
                text("SELECT id FROM flow_instance WHERE id = :id FOR UPDATE"), {"id": order[2]}
            )
            claims = await journal.intake.claim_due(
                "node-b", now, now + timedelta(seconds=30), 6, RUNNABLE
            )
            await other_node.rollback()
        taken = [c.instance_id for c in claims]
        assert sorted(taken[:2]) == sorted(lost) and [c.taken_over for c in claims[:2]] == [
            True,
            True,
        ]
        assert set(taken) == {*order[:2], *order[3:7]}
        rest = await journal.intake.claim_due(
            "node-c", now, now + timedelta(seconds=30), 100, RUNNABLE
        )
        assert {c.instance_id for c in rest} == {order[2], *order[7:]}
    finally:
        await engine.dispose()
