"""A real node on SQLite, polling the fake OCR provider behind a declared rate: a poll whose
attempt is deferred for want of budget runs its ``on_timeout`` when its budget ends (within
one scan interval), and the provider sees only the calls the rate allows."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
from pydantic import BaseModel

from flowpark import Backoff, Capability, Deps, Flow, HttpTrigger, Provider, StepContext
from flowpark.engine.records import StepKind
from flowpark.runtime.app import create_app
from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from flowpark.store import SqlStore, make_async_engine
from tests.support.eventually import eventually
from tests.support.server import live_server

SCAN = 1.0
BUDGET = timedelta(seconds=3)
RUN = timedelta(seconds=0.5)


class Doc(BaseModel):
    name: str = "d"


class Listed(BaseModel):
    done: bool = False


class ListJobs(Capability):
    """One call of the fake OCR provider (its job list), declared at one call per 50 s."""

    id = "rated.list"
    idempotent = True
    provider = Provider("ocr-rated", rate_per_second=0.02, burst=1)
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Listed,)
    base_url: ClassVar[str] = ""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def execute(self, ctx: StepContext) -> None:
        answer = await self.http.get(f"{ListJobs.base_url}/fake/ocr/jobs")
        answer.raise_for_status()
        ctx.put(Listed(done=False))


def rated_flows(deps: Deps) -> list[Flow]:
    """``rated.poll``: polls the provider every second for 3 s, then fails its way."""
    flow = Flow("rated.poll", "1.0.0", input=Doc, trigger=HttpTrigger("POST", "/api/v1/rated"))
    flow.poll_until(
        ListJobs(deps.http),
        until=lambda bag: bag.get(Listed).done,
        interval=Backoff.fixed(timedelta(seconds=1)),
        timeout=BUDGET,
    )
    flow.on_timeout(lambda b: b.fail("rated.not_done", "the provider did not finish"))
    return [flow]


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_budget_ending_while_deferred_runs_on_timeout_within_a_scan(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    ocr, jobs = FakeOcrService(per_page=timedelta(days=1)), FakeJobService()
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    url = f"sqlite:///{db}"
    with live_server(
        f"sqlite:///{tmp_path / 'fakes.db'}",
        app_factory=lambda _settings, _sample: create_fakes_app(ocr, jobs),
    ) as fakes:
        ListJobs.base_url = fakes.base_url
        with live_server(
            url,
            app_factory=lambda s: create_app(s, flows=[rated_flows]),
            timer_scan_interval=SCAN,
            start_wait_seconds=5.0,
        ) as node:
            async with node.client() as http:
                ids = []
                for key in ("a", "b"):
                    answer = await http.post(
                        "/api/v1/rated", json={"name": key}, headers={"Idempotency-Key": key}
                    )
                    assert answer.status_code in (200, 202), answer.text
                    ids.append(answer.json()["instanceId"])

                async def both_failed() -> None:
                    for instance_id in ids:
                        body = (await http.get(f"/api/v1/instances/{instance_id}")).json()
                        assert body["state"] == "failed", body["state"]

                await eventually(both_failed, timeout=30, what="both budgets ended")
    store = make_async_engine(url)
    try:
        journal = SqlStore(store)
        for instance_id in ids:
            snap = await journal.reads.load(instance_id)
            inst = snap.instance
            assert inst.failure is not None and inst.failure.code == "rated.not_done"
            (budget,) = [r for r in snap.steps if r.kind is StepKind.DEADLINE]
            ends = budget.committed_at + BUDGET
            # woken by the first scan after the end, then its run writes the failure (its
            # own time: RUN on a loaded machine); the provider's next slot is 50 s later
            assert ends <= inst.updated_at <= ends + timedelta(seconds=SCAN) + RUN
        calls = 0
        for instance_id in ids:
            steps = (await journal.reads.load(instance_id)).steps
            calls += sum(1 for r in steps if r.capability_id == "rated.list")
        assert calls == 1  # one token (the burst); every later attempt was deferred
        (state,) = await journal.providers.states()
        assert state.name == "ocr-rated"
        minutes = await journal.providers.tallies("ocr-rated", budget.committed_at)
        assert sum(m.ok for m in minutes) <= 1
    finally:
        await store.dispose()
