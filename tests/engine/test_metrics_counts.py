"""Counts of ``/metrics`` fed by the engine and the database (SQLite and PostgreSQL): an
ephemeral run counts in ``flowpark_instances_started`` / ``_ended`` as a durable instance
does; ``flowpark_deliveries_pending`` counts the pending deliveries by subscriber; the review
gauges count the items waiting for a person and the oldest one's age."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import generate_latest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.engine.clock import SystemClock, VirtualClock
from flowpark.engine.ports import Commit, ReviewAct, ReviewVerb
from flowpark.engine.records import InstanceState, ReviewRequest
from flowpark.runtime.metrics import Metrics
from flowpark.runtime.observe import NodeObserver
from flowpark.runtime.telemetry import Telemetry
from flowpark.settings import Settings, Subscriber
from flowpark.store import SqlStore
from flowpark.store.deliveries import DELIVERY, SqlDeliveries
from flowpark.testing import FlowHarness, Scripted
from tests.e2e.test_delivery import SECRET, emit_events
from tests.engine.flows import Job, ephemeral_flow
from tests.support.journal import at, new_instance, step
from tests.support.scrape import Scrape

ORDER = {"order_id": "o-1"}


async def test_ephemeral_runs_count_as_started_and_ended(store_url: str | None) -> None:
    metrics = Metrics("n")
    start = Scripted(Job(job_id="e-1"), Job(job_id="e-2"), RuntimeError("provider down"))
    async with FlowHarness.open(
        [ephemeral_flow()],
        database_url=store_url,
        migrate=False,
        substitutes={"t.start": start, "t.after": Scripted(None)},
    ) as h:
        h.engine.observer = NodeObserver(metrics)
        for _ in range(2):
            done = await h.start("t.quick", ORDER)
            assert done.instance.state is InstanceState.COMPLETED
        failed = await h.start("t.quick", ORDER)
        assert failed.instance.state is InstanceState.FAILED
        assert failed.instance.failure is not None
        code = failed.instance.failure.code
        assert await h.store.reads.count_instances() == 0  # still no row

    scrape = Scrape(generate_latest(metrics.registry).decode())
    flow = {"flow": "t.quick", "version": "1.0.0"}
    assert scrape.value("flowpark_instances_started_total", **flow) == 3
    ended = "flowpark_instances_ended_total"
    assert scrape.value(ended, **flow) == 3
    assert scrape.value(ended, **flow, state="completed", code="") == 2
    assert scrape.value(ended, **flow, state="failed", code=code) == 1


async def test_an_ephemeral_run_whose_caller_goes_away_counts_as_cancelled(
    store_url: str | None,
) -> None:
    metrics = Metrics("n")
    calling = asyncio.Event()

    async def hang(_: object) -> None:
        calling.set()
        await asyncio.Event().wait()  # a provider that never answers

    async with FlowHarness.open(
        [ephemeral_flow()],
        database_url=store_url,
        migrate=False,
        substitutes={"t.start": Scripted(hang), "t.after": Scripted(None)},
    ) as h:
        h.engine.observer = NodeObserver(metrics)
        request = asyncio.ensure_future(h.start("t.quick", ORDER))
        await calling.wait()
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request

    scrape = Scrape(generate_latest(metrics.registry).decode())
    flow = {"flow": "t.quick", "version": "1.0.0"}
    assert scrape.value("flowpark_instances_started_total", **flow) == 1
    assert scrape.value("flowpark_instances_ended_total", **flow, state="cancelled", code="") == 1


async def test_the_pending_gauge_counts_each_subscribers_waiting_deliveries(
    sql_store_url: str, sql_engine: AsyncEngine
) -> None:
    emit_events(sql_store_url, instances=2, per_instance=2)
    deliveries = SqlDeliveries(sql_engine)
    # "gone" was configured when these were relayed, and is not any more
    assert await deliveries.relay(["audit", "gone"], datetime.now(UTC)) == 4  # events
    async with sql_engine.begin() as conn:
        done = (await conn.execute(DELIVERY.select().where(DELIVERY.c.subscriber == "audit"))).all()
        await conn.execute(
            update(DELIVERY)
            .where(DELIVERY.c.sequence == done[0].sequence)
            .values(state="delivered", delivered_at=datetime.now(UTC))
        )
    subscribers = [
        Subscriber(name=name, url="http://127.0.0.1:9/hook", secret=SECRET)  # type: ignore[arg-type]
        for name in ("audit", "billing")
    ]
    telemetry = Telemetry(Settings(subscribers=subscribers))
    assert telemetry.metrics is not None

    def pending() -> dict[str, float]:
        scrape = Scrape(generate_latest(telemetry.metrics.registry).decode())  # type: ignore[union-attr]
        return {
            s.labels["subscriber"]: s.value
            for s in scrape.samples
            if s.name == "flowpark_deliveries_pending"
        }

    await telemetry.refresh(sql_engine, SystemClock())
    # billing has none yet; the unconfigured subscriber's are shown under ""
    assert pending() == {"audit": 3, "billing": 0, "": 4}

    async with sql_engine.begin() as conn:
        await conn.execute(update(DELIVERY).values(state="failed"))
    await telemetry.refresh(sql_engine, SystemClock())
    assert pending() == {"audit": 0, "billing": 0, "": 0}  # zero, not the last figure


async def test_the_provider_gauges_read_the_shared_limits(sql_store: SqlStore) -> None:
    from flowpark.engine.ports import PushbackReport
    from flowpark.engine.ports.providers import ProviderState

    now = datetime.now(UTC)
    state = ProviderState("ocr", 40, 4, None, 40, None, None, 0, now, "declared")
    await sql_store.providers.declare([state], now)
    await sql_store.providers.pushback(PushbackReport("ocr", now, now, "429"))
    telemetry = Telemetry(Settings())
    assert telemetry.metrics is not None
    await telemetry.refresh(sql_store.engine, SystemClock())
    scrape = Scrape(generate_latest(telemetry.metrics.registry).decode())
    assert scrape.value("flowpark_provider_limit", provider="ocr") == 40
    assert scrape.value("flowpark_provider_effective_rate", provider="ocr") == 20
    # its counters start at zero, so a first pushback shows as an increase
    calls = "flowpark_provider_calls_total"
    assert scrape.value(calls, provider="ocr", outcome="pushback") == 0


async def test_provider_calls_and_deferrals_count_by_provider(store_url: str) -> None:
    from tests.api.test_providers_api import OCR, flow

    metrics = Metrics("n")
    async with FlowHarness.open([flow()], database_url=store_url, migrate=False) as h:
        h.engine.observer = NodeObserver(metrics)  # the budget reads the engine's
        for n in range(11):  # 2 calls each (upload, check 0): a burst of 20, then deferral
            await h.start("p.poll", {"order_id": f"o-{n}"})
    scrape = Scrape(generate_latest(metrics.registry).decode())
    ok = scrape.value("flowpark_provider_calls_total", provider="ocr", outcome="ok")
    deferred = scrape.value("flowpark_provider_deferrals_total", provider="ocr", reason="budget")
    assert ok == OCR.burst and deferred >= 1
    assert scrape.value("flowpark_provider_limit", provider="ocr") == OCR.rate_per_second


async def test_the_review_gauges_count_waiting_items_and_the_oldest_age(
    sql_engine: AsyncEngine,
) -> None:
    journal = SqlStore(sql_engine)
    record, _ = await journal.intake.create_instance(new_instance())
    asked = tuple(ReviewRequest(f"r-{n}", "doc", "late") for n in range(3))
    row = step(record.id, step_id=1, committed_at=at(2))
    await journal.runs.commit(Commit(record.id, 1, at(2), at(32), rows=(row,), reviews=asked))
    await journal.reviews.act_on_review(ReviewAct("r-1", ReviewVerb.CLAIM, "ana", at(5)))
    await journal.reviews.act_on_review(ReviewAct("r-2", ReviewVerb.DISMISS, "ana", at(5)))
    telemetry = Telemetry(Settings())
    assert telemetry.metrics is not None

    def gauges() -> dict[str, float]:
        scrape = Scrape(generate_latest(telemetry.metrics.registry).decode())  # type: ignore[union-attr]
        return {
            s.labels.get("state", s.name): s.value
            for s in scrape.samples
            if s.name.startswith(("flowpark_reviews_waiting", "flowpark_review_oldest"))
        }

    clock = VirtualClock(at(2) + timedelta(hours=2))
    await telemetry.refresh(sql_engine, clock)
    assert gauges() == {
        "open": 1,
        "claimed": 1,
        "flowpark_review_oldest_waiting_age_seconds": 7200,
    }
    await journal.reviews.act_on_review(ReviewAct("r-0", ReviewVerb.RESOLVE, "bo", at(9)))
    await journal.reviews.act_on_review(ReviewAct("r-1", ReviewVerb.RESOLVE, "ana", at(9)))
    await telemetry.refresh(sql_engine, clock)
    assert gauges() == {"open": 0, "claimed": 0, "flowpark_review_oldest_waiting_age_seconds": 0}
