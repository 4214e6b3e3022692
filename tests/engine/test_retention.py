"""The retention purge: ended instances older than the retention are deleted with every row
of every table that names them; instances within the window, or not ended, are untouched
(SQLite and PostgreSQL, ``sql_store_url``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import func, insert, select, update

from flowpark.engine.ports import StreamWrite
from flowpark.engine.records import InstanceState
from flowpark.flows import Flow
from flowpark.store.deliveries import SqlDeliveries
from flowpark.store.provider_tables import CORRELATION
from flowpark.store.retention import SqlRetention
from flowpark.store.tables import (
    EventDeliveryRow,
    FlowActionRow,
    FlowHeartbeatRow,
    ReviewItemRow,
    SignalDeliveryRow,
    metadata,
)
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Job, Order, Start
from tests.support.harness import sql_of

DELIVERY = EventDeliveryRow.__table__  # type: ignore[attr-defined]
RETENTION = timedelta(days=30)
DAY = timedelta(days=1)


def life_flow() -> Flow:
    """start -> emit ``t.started`` -> await ``t.ready`` (no timeout)."""
    flow = Flow("t.life", "1.0.0", input=Order)
    flow.step(Start())
    flow.emit("t.started", lambda bag: {"job": bag.get(Job).job_id}, reads=(Job,))
    flow.await_signal(READY)
    return flow


def _tables() -> list[Any]:
    return [t for t in metadata.sorted_tables if "instance_id" in t.c or t.name == "flow_instance"]


async def _rows_by_table(h: FlowHarness, instance_id: str) -> dict[str, int]:
    counts = {}
    async with sql_of(h).engine.connect() as conn:
        for table in _tables():
            column = table.c.id if table.name == "flow_instance" else table.c.instance_id
            counts[table.name] = (
                await conn.execute(select(func.count()).where(column == instance_id))
            ).scalar_one()
    return counts


async def _life(h: FlowHarness, key: str, *, end: bool) -> str:
    """An instance with rows in every table: journal, event and its delivery, signal,
    stream message, heartbeat; ended (completed) when ``end``."""
    inst = (await h.start("t.life", {"order_id": key})).instance
    now = h.clock.now()
    await SqlDeliveries(sql_of(h).engine).relay(["audit"], now)
    await h.store.streams.write_stream(StreamWrite(inst.id, "S", {"at": key}, 10, now), 1000)
    async with sql_of(h).engine.begin() as conn:
        await conn.execute(
            insert(FlowHeartbeatRow.__table__).values(  # type: ignore[attr-defined]
                instance_id=inst.id, step_id=0, scope=0, try_number=1, value=None, recorded_at=now
            )
        )
        await conn.execute(
            insert(ReviewItemRow.__table__).values(  # type: ignore[attr-defined]
                id=f"review-{key}", instance_id=inst.id, subject=key, reason="r", created_at=now
            )
        )
        await conn.execute(
            insert(FlowActionRow.__table__).values(  # type: ignore[attr-defined]
                id=f"action-{key}", instance_id=inst.id, action="wake", actor="ops", acted_at=now
            )
        )
        await conn.execute(
            insert(SignalDeliveryRow.__table__).values(  # type: ignore[attr-defined]
                flow_name="t.life",
                signal_name="t.ready",
                delivery_id=f"msg-{key}",
                instance_id=inst.id,
                received_at=now,
            )
        )
    if end:
        await h.engine.deliver(inst.id, "t.ready", {"job_id": key})
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED
    async with sql_of(h).engine.begin() as conn:  # an ending released its keys: one put back
        await conn.execute(
            insert(CORRELATION).values(
                flow_name="t.life", provider="p", key=key, instance_id=inst.id, created_at=now
            )
        )
    return inst.id


async def test_the_purge_deletes_old_ended_instances_and_every_row_of_them(
    sql_store_url: str,
) -> None:
    subs = {"t.start": Scripted(Job(job_id="j"))}
    async with FlowHarness.open(
        [life_flow()], database_url=sql_store_url, migrate=False, substitutes=subs
    ) as h:
        t0 = h.clock.now()
        old = [await _life(h, f"old-{i}", end=True) for i in range(3)]
        undelivered = await _life(h, "undelivered", end=True)  # old, its event not sent yet
        waiting = await _life(h, "waiting", end=False)  # old, but not ended
        h.clock.set(t0 + 20 * DAY)
        recent = await _life(h, "recent", end=True)  # ended within the window
        # the old ones' deliveries ended (one delivered, two failed for good)
        async with sql_of(h).engine.begin() as conn:
            for instance_id, state in zip(old, ("delivered", "failed", "failed"), strict=True):
                await conn.execute(
                    update(DELIVERY)
                    .where(DELIVERY.c.instance_id == instance_id)
                    .values(state=state)
                )
        kept = {i: await _rows_by_table(h, i) for i in (waiting, recent, undelivered)}
        for instance_id in (*old, recent):
            counts = await _rows_by_table(h, instance_id)
            # a row in every table that names an instance (a new table needs one here too)
            assert all(counts.values()), counts

        h.clock.set(t0 + RETENTION + DAY)
        retention = SqlRetention(sql_of(h).engine)
        deleted = await retention.purge(h.clock.now() - RETENTION, limit=2)  # two batches

        assert deleted == 3
        for instance_id in old:
            assert await _rows_by_table(h, instance_id) == dict.fromkeys(kept[waiting], 0)
        # an ended instance whose event is still pending keeps every row, its delivery too
        assert {i: await _rows_by_table(h, i) for i in (waiting, recent, undelivered)} == kept
        assert await retention.purge(h.clock.now() - RETENTION) == 0  # nothing more
        # once its delivery ended (failed: visible in the deliveries list), it goes too
        async with sql_of(h).engine.begin() as conn:
            await conn.execute(
                update(DELIVERY).where(DELIVERY.c.instance_id == undelivered).values(state="failed")
            )
        assert await retention.purge(h.clock.now() - RETENTION) == 1
        # the waiting instance still runs to its end
        await h.engine.deliver(waiting, "t.ready", {"job_id": "late"})
        assert (await h.instance(waiting)).state is InstanceState.COMPLETED


def test_the_retention_setting_is_an_iso_duration_or_empty() -> None:
    import pytest
    from pydantic import ValidationError

    from flowpark.settings import Settings

    assert Settings().retention_period == RETENTION  # the default, P30D
    assert Settings(retention="PT12H").retention_period == timedelta(hours=12)
    assert Settings(retention="").retention_period is None  # off
    with pytest.raises(ValidationError, match="FLOWPARK_RETENTION"):
        Settings(retention="30 days")
