"""A provider that reuses its delivery ids (after a restart, its counter starts again) on the
provider signal route, over real HTTP, on SQLite and on PostgreSQL: a replay of a delivery
id still answers its first signal (the documented rule), even once its instance ended; but
a delivery with a seen id whose correlation key a *live other* instance holds is refused
with 409 ``delivery_id_reused`` (problem+json), logged, counted
(``flowpark_webhook_delivery_ids_reused_total``) and stores nothing, where it was answered
``202 created: false`` with the ended instance's signal (the same bytes) or 422
``idempotency_key_reused`` (another payload) while the live one never got it."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flowpark.runtime.app import create_app
from tests.api.test_correlated_signals import (
    CI,
    GITHUB,
    github,
    problem,
    signals,
    started,
    workflow_run,
)
from tests.support.api import wait_for_state
from tests.support.scrape import Scrape
from tests.support.server import LiveServer, live_server

FLOWS = Path(__file__).parents[1] / "e2e" / "provider_flows.py"
REUSED = "flowpark_webhook_delivery_ids_reused_total"


@pytest.fixture
def node(store_url: str) -> Iterator[LiveServer]:
    with live_server(
        store_url,
        app_factory=lambda s, _sample: create_app(s, flows=[str(FLOWS)]),
        signal_secrets={"github": GITHUB},
    ) as server:
        yield server


async def _reused(http: httpx.AsyncClient) -> float:
    scrape = Scrape((await http.get("/metrics")).text)
    return scrape.value(REUSED, provider="ci", signal="ci.completed")


async def test_a_reused_delivery_id_for_another_live_instance_is_refused_not_swallowed(
    node: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    run, other_run = (uuid.uuid4().int % 10**9 for _ in range(2))
    delivery = str(uuid.uuid4())  # the provider's id, used again after its restart
    body = workflow_run(run)
    async with node.client() as http, httpx.AsyncClient(base_url=node.base_url) as hook:
        before = await _reused(http)
        ended = await started(http, "/api/v1/builds", {"run_id": run})
        first = await hook.post(CI, content=body, headers=github(body, delivery))
        assert first.status_code == 202, first.text
        assert (await wait_for_state(http, ended))["state"] == "completed"

        # its retry, once the instance ended and released the key: the first signal again
        retry = await hook.post(CI, content=body, headers=github(body, delivery))
        assert retry.status_code == 202, retry.text
        assert retry.json()["created"] is False
        assert retry.json()["signalId"] == first.json()["signalId"]

        # the provider restarted, its run ids and delivery ids counting again: a live
        # instance holds the run id now, and the same delivery (same id, same bytes) comes
        live = await started(http, "/api/v1/builds", {"run_id": run})
        with caplog.at_level(logging.WARNING, logger="flowpark.api"):
            reused = await hook.post(CI, content=body, headers=github(body, delivery))
            # the same id for another run of a live instance: refused the same way
            elsewhere = await started(http, "/api/v1/builds", {"run_id": other_run})
            other = workflow_run(other_run)
            reused_elsewhere = await hook.post(CI, content=other, headers=github(other, delivery))
        refusal = problem(reused, 409, "delivery_id_reused")  # was 202 created: false
        assert (refusal["provider"], refusal["signal"]) == ("ci", "ci.completed")
        assert refusal["deliveryId"] == delivery
        assert str(run) not in reused.text  # no key echoed to the sender
        problem(reused_elsewhere, 409, "delivery_id_reused")  # was 422 idempotency_key_reused
        for waiting in (live, elsewhere):  # nothing stored: not a quiet success
            assert await signals(http, waiting) == []
            assert (await http.get(f"/api/v1/instances/{waiting}")).json()["state"] == "suspended"
        assert len(await signals(http, ended)) == 1
        lines = [r.getMessage() for r in caplog.records if "delivery_id_reused" in r.getMessage()]
        assert len(lines) == 2 and ended in lines[0] and live in lines[0], lines
        assert await _reused(http) == before + 2

        # sent again with a new id, it reaches the live instance as any delivery does
        fresh = await hook.post(CI, content=body, headers=github(body, str(uuid.uuid4())))
        assert fresh.status_code == 202, fresh.text
        assert fresh.json()["instanceId"] == live and fresh.json()["created"] is True
        assert (await wait_for_state(http, live))["state"] == "completed"
