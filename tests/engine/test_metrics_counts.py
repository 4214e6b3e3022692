"""Counts of ``/metrics`` fed by the engine (SQLite and PostgreSQL): an ephemeral run
counts in ``flowpark_instances_started`` / ``_ended`` as a durable instance does."""

from __future__ import annotations

from prometheus_client import generate_latest

from app.engine.journal import InstanceState
from app.runtime.metrics import Metrics
from app.runtime.observe import NodeObserver
from app.testing import FlowHarness, Scripted
from tests.engine.flows import Job, ephemeral_flow
from tests.support.scrape import Scrape

ORDER = {"order_id": "o-1"}


async def test_ephemeral_runs_count_as_started_and_ended(store_url: str) -> None:
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
        assert await h.journal.reads.count_instances() == 0  # still no row

    scrape = Scrape(generate_latest(metrics.registry).decode())
    flow = {"flow": "t.quick", "version": "1.0.0"}
    assert scrape.value("flowpark_instances_started_total", **flow) == 3
    ended = "flowpark_instances_ended_total"
    assert scrape.value(ended, **flow) == 3
    assert scrape.value(ended, **flow, state="completed", code="") == 2
    assert scrape.value(ended, **flow, state="failed", code=code) == 1
