"""Delivery metrics on a real node with a real subscriber process (``subscriber.py``): one
subscriber accepts every event, the other's signatures do not verify (401), so its
deliveries fail and run out of sends. ``GET /metrics`` counts each send by subscriber and
outcome and observes the lag of each delivery made."""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any

import pytest

from flowpark.runtime.app import create_app
from tests.e2e.test_delivery import FAST_RETRIES, SECRET, emitter_flows, subscriber
from tests.support.eventually import eventually
from tests.support.scrape import Scrape
from tests.support.server import free_port, live_server

OTHER_SECRET = "whsec_" + base64.b64encode(b"a-secret-the-subscriber-refuses!").decode()


async def _scrape(http: Any) -> Scrape:
    resp = await http.get("/metrics")
    assert resp.status_code == 200, resp.text
    return Scrape(resp.text)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_sends_are_counted_by_subscriber_and_outcome_with_the_lag_of_each_delivery(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"
    subscribers = [
        {"name": "audit", "url": url, "secret": SECRET},
        {"name": "billing", "url": url, "secret": OTHER_SECRET},  # refused: 401
    ]
    with (
        subscriber(tmp_path, port),
        live_server(
            f"sqlite:///{db}",
            app_factory=lambda s: create_app(s, flows=[emitter_flows]),
            subscribers=subscribers,
            delivery_max_tries=2,
            metrics_refresh_seconds=0.2,
            **FAST_RETRIES,
        ) as node,
    ):
        async with node.client() as http:
            before = await _scrape(http)
            for sub in ("audit", "billing"):  # each configured subscriber starts at zero
                for outcome in ("delivered", "failed", "gave_up"):
                    labels = {"subscriber": sub, "outcome": outcome}
                    assert labels in before.series("flowpark_delivery_tries_total"), labels
                    assert before.value("flowpark_delivery_tries_total", **labels) == 0

            resp = await http.post("/api/v1/emit-three", json={"label": "m"})
            assert resp.status_code == 202, resp.text

            async def settled() -> None:
                rows = (await http.get("/api/v1/deliveries", params={"limit": 100})).json()
                states = sorted((r["subscriber"], r["state"]) for r in rows)
                assert states == [("audit", "delivered")] * 3 + [("billing", "failed")] * 3

            await eventually(settled, timeout=60, what="every delivery delivered or failed")

            async def counted() -> Scrape:
                scrape = await _scrape(http)
                pending = "flowpark_deliveries_pending"
                assert scrape.value(pending, subscriber="audit") == 0
                assert scrape.value(pending, subscriber="billing") == 0
                assert {"subscriber": "audit"} in scrape.series(pending)
                return scrape

            scrape = await eventually(counted, timeout=20, what="the gauges refreshed")

    tries = "flowpark_delivery_tries_total"
    assert scrape.value(tries, subscriber="audit", outcome="delivered") == 3
    assert scrape.value(tries, subscriber="audit", outcome="failed") == 0
    assert scrape.value(tries, subscriber="audit", outcome="gave_up") == 0
    # each of billing's three deliveries: one failed send, then a last one given up
    assert scrape.value(tries, subscriber="billing", outcome="delivered") == 0
    assert scrape.value(tries, subscriber="billing", outcome="failed") == 3
    assert scrape.value(tries, subscriber="billing", outcome="gave_up") == 3

    lag = "flowpark_delivery_lag_seconds"
    assert scrape.value(f"{lag}_count", subscriber="audit") == 3
    assert 0 < scrape.value(f"{lag}_sum", subscriber="audit") < 3 * 60
    assert scrape.value(f"{lag}_bucket", subscriber="audit", le="+Inf") == 3
    assert scrape.value(f"{lag}_count", subscriber="billing") == 0
