"""``/metrics`` access (loopback by default, token, off) and ``/readyz`` (database, schema at
head, a recent sweep) on real servers."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest

from flowpark.store.migrate import downgrade, upgrade
from tests.support.eventually import eventually
from tests.support.scrape import Scrape
from tests.support.server import TOKEN, LiveServer, live_server


@pytest.fixture
def db_copy(_sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


async def test_metrics_are_served_to_loopback_clients(live: LiveServer) -> None:
    async with live.client(token=None) as client:
        resp = await client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=")
    scrape = Scrape(resp.text)
    assert scrape.series("flowpark_node_info") == [{"node": live.settings.node_id}]
    assert "flowpark_instances_started" in scrape.families


async def test_metrics_refuse_a_client_off_loopback(live: LiveServer) -> None:
    transport = httpx.ASGITransport(app=live.app, client=("203.0.113.9", 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
        resp = await client.get("/metrics")
    assert resp.status_code == 403
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["code"] == "metrics_forbidden"


async def test_metrics_behind_a_token(db_copy: str) -> None:
    with live_server(db_copy, metrics_access="token") as server:
        async with server.client(token=None) as client:
            refused = await client.get("/metrics")
            wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
            allowed = await client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert refused.status_code == 401
    assert refused.json()["code"] == "unauthorized"
    assert wrong.status_code == 401
    assert allowed.status_code == 200
    assert "flowpark_node_info" in allowed.text


async def test_metrics_switched_off(db_copy: str) -> None:
    with live_server(db_copy, metrics_enabled=False) as server:
        async with server.client() as client:
            resp = await client.get("/metrics")
    assert resp.status_code == 404


async def test_readyz_checks_database_schema_and_sweep(db_copy: str) -> None:
    with live_server(db_copy) as server:
        async with server.client(token=None) as client:

            async def ready() -> dict[str, object]:
                resp = await client.get("/readyz")
                assert resp.status_code == 200, resp.text
                return dict(resp.json())

            body = await eventually(ready, timeout=20)
            assert body == {
                "status": "ready",
                "checks": {"database": "ok", "schema": "ok", "sweep": "ok"},
            }

            # no sweep ended for longer than 3 scan intervals: not ready
            sweeper = server.app.state.sweeper
            sweeper.scheduler.pause()
            await eventually(lambda: not sweeper._sweeping, timeout=20)
            sweeper.last_success = time.monotonic() - 4 * server.settings.timer_scan_interval
            stale = await client.get("/readyz")
            assert stale.status_code == 503
            assert stale.headers["content-type"] == "application/problem+json"
            assert stale.json()["code"] == "not_ready"
            assert int(stale.headers["retry-after"]) >= 1  # when to ask again
            assert stale.json()["checks"]["sweep"].startswith("last sweep ended")
            sweeper.scheduler.resume()
            await eventually(ready, timeout=20, what="ready again after a sweep")

            # a schema behind the code's head: not ready
            downgrade(db_copy, "-1")
            try:
                behind = await client.get("/readyz")
            finally:
                upgrade(db_copy)
            assert behind.status_code == 503
            checks = behind.json()["checks"]
            assert checks["database"] == "ok"
            assert "flowpark db upgrade" in checks["schema"]
            await eventually(ready, timeout=20, what="ready again at head")
