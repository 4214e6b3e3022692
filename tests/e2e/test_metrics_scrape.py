"""``GET /metrics`` of real server processes after a known scenario: exact counts.

On PostgreSQL, one server process (``tests.support.obs_flows``) runs 3 ``obs.poll`` starts
(3 attempts each, 2 parks), one ``obs.timeout`` (its budget runs out), one ``obs.signal``
(ended by a signal), and takes over one ``obs.poll`` instance whose holder's lease had
expired. Every count the scenario fixes is asserted exactly, and every histogram has
observations. Under ``serve --workers 2`` one scrape answers the figures of both worker
processes.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from uuid6 import uuid7

from flowpark.engine.records import NewInstance
from flowpark.store import SqlStore, make_async_engine
from flowpark.store.migrate import upgrade
from tests.support.eventually import eventually
from tests.support.obs_flows import obs_server
from tests.support.scrape import Scrape
from tests.support.server import TOKEN, serve_subprocess

pytestmark = pytest.mark.slow

POLLS = 3


async def _up(client: httpx.AsyncClient, log: Path) -> None:
    async def ready() -> None:
        try:
            resp = await client.get("/readyz")
        except httpx.TransportError as exc:
            raise AssertionError(f"not up yet: {exc!r}\n{log.read_text()}") from exc
        assert resp.status_code == 200, resp.text

    await eventually(ready, timeout=60, interval=0.1, what="the server is ready")


async def _state(client: httpx.AsyncClient, instance_id: str) -> str:
    resp = await client.get(f"/api/v1/instances/{instance_id}")
    assert resp.status_code == 200, resp.text
    return str(resp.json()["state"])


async def _ended(client: httpx.AsyncClient, instance_id: str, state: str) -> None:
    async def check() -> None:
        assert await _state(client, instance_id) == state

    await eventually(check, timeout=30, interval=0.05, what=f"{instance_id} is {state}")


async def _scrape(client: httpx.AsyncClient) -> Scrape:
    resp = await client.get("/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    return Scrape(resp.text)


@pytest.mark.postgres
async def test_metrics_count_a_known_scenario_exactly(pg_url: str, tmp_path: Path) -> None:
    upgrade(pg_url)
    log = tmp_path / "server.log"
    # an instance whose holder died: running, its lease expired a minute ago
    db = make_async_engine(pg_url)
    try:
        now = datetime.now(UTC)
        orphan = NewInstance(
            id=str(uuid7()),
            flow_name="obs.poll",
            flow_version="1.0.0",
            input={"order_id": "orphan"},
            created_at=now - timedelta(minutes=2),
            deadline_at=None,
            lease_owner="dead-node",
            lease_expires_at=now - timedelta(minutes=1),
        )
        _, created = await SqlStore(db).intake.create_instance(orphan)
        assert created
    finally:
        await db.dispose()

    with obs_server(pg_url, log, timer_scan_interval="0.2", metrics_refresh_seconds="0.2") as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:
            await _up(client, log)
            polls = []
            for i in range(POLLS):
                resp = await client.post("/api/v1/obs/poll", json={"order_id": f"p-{i}"})
                assert resp.status_code in (200, 202), resp.text
                polls.append(resp.json()["instanceId"])
            resp = await client.post("/api/v1/obs/timeout", json={"order_id": "t"})
            timeout_id = resp.json()["instanceId"]
            resp = await client.post("/api/v1/obs/signal", json={"order_id": "s"})
            signal_id = resp.json()["instanceId"]
            assert await _state(client, signal_id) == "suspended"

            async def parked_gauge() -> None:
                scrape = await _scrape(client)
                assert scrape.value("flowpark_instances_parked", flow="obs.signal") == 1

            await eventually(parked_gauge, timeout=20, what="the parked gauge counts obs.signal")

            resp = await client.post(
                f"/api/v1/instances/{signal_id}/signals/obs.nudge", json={"note": "go"}
            )
            assert resp.status_code == 202, resp.text
            for instance_id in [*polls, orphan.id, signal_id]:
                await _ended(client, instance_id, "completed")
            await _ended(client, timeout_id, "failed")

            async def gauges_settled() -> Scrape:
                scrape = await _scrape(client)
                assert scrape.value("flowpark_instances_parked") == 0
                assert scrape.value("flowpark_instances_running") == 0
                return scrape

            scrape = await eventually(gauges_settled, timeout=20, what="gauges back to 0")

    # starts and ends
    assert scrape.value("flowpark_instances_started_total", flow="obs.poll") == POLLS
    assert scrape.value("flowpark_instances_started_total") == POLLS + 2
    assert scrape.value(
        "flowpark_instances_ended_total", flow="obs.poll", state="completed", code=""
    ) == (POLLS + 1)
    assert (
        scrape.value(
            "flowpark_instances_ended_total",
            flow="obs.timeout",
            state="failed",
            code="flow.poll_not_satisfied",
        )
        == 1
    )
    assert scrape.value("flowpark_instances_ended_total", flow="obs.signal", state="completed") == 1
    assert scrape.value("flowpark_instances_ended_total") == POLLS + 3
    # attempts: 3 per obs.poll instance (the orphan too), 1 for obs.timeout and obs.signal
    attempts = "flowpark_attempts_total"
    polled = POLLS + 1
    assert scrape.value(attempts, capability="obs.probe", outcome="satisfied") == polled
    assert scrape.value(attempts, capability="obs.probe", outcome="unsatisfied") == 2 * polled
    assert scrape.value(attempts, capability="obs.never", outcome="unsatisfied") == 1
    assert scrape.value(attempts, capability="obs.wait", outcome="unsatisfied") == 1
    assert scrape.value(attempts, outcome="failed") == 0
    assert scrape.value("flowpark_tries_total", outcome="success") == 3 * polled + 2
    assert scrape.value("flowpark_tries_total", outcome="failure") == 0
    assert scrape.value("flowpark_capability_duration_seconds_count") == 3 * polled + 2
    # waits
    assert scrape.value("flowpark_wake_lateness_seconds_count", flow="obs.poll") == 2 * polled
    assert scrape.value("flowpark_wake_lateness_seconds_count") == 2 * polled
    assert scrape.value("flowpark_poll_timeouts_total", flow="obs.timeout") == 1
    assert scrape.value("flowpark_poll_timeouts_total") == 1
    budget = "flowpark_poll_budget_used_ratio_count"
    assert scrape.value(budget, flow="obs.poll", outcome="satisfied") == polled
    assert scrape.value(budget, flow="obs.timeout", outcome="timed_out") == 1
    assert scrape.value(budget, flow="obs.signal", outcome="signalled") == 1
    assert scrape.value("flowpark_signal_to_resume_seconds_count", flow="obs.signal") == 1
    # nodes
    assert scrape.value("flowpark_lease_takeovers_total", flow="obs.poll") == 1
    assert scrape.value("flowpark_lease_takeovers_total") == 1
    assert scrape.value("flowpark_fencing_refusals_total") == 0
    # claims by sweeps: 2 wakes per obs.poll, the timeout's wake, the takeover
    assert scrape.value("flowpark_sweep_claimed_sum") == 2 * POLLS + 2 + 1 + 1
    assert scrape.value("flowpark_sweep_last_success_timestamp_seconds") > 0
    assert scrape.value("flowpark_instances_overdue") == 0
    assert scrape.value("flowpark_instances_stuck") == 0
    assert scrape.series("flowpark_db_pool_connections_in_use") == [{}]
    assert scrape.series("flowpark_node_info") == [{"node": "obs-node"}]
    for name in scrape.histograms():
        if name == "flowpark_delivery_lag_seconds":
            continue  # no subscriber here: see tests/e2e/test_delivery_metrics.py
        if name == "flowpark_provider_deferral_seconds":
            continue  # no provider here: see tests/api/test_provider_pushback_live.py
        assert scrape.value(f"{name}_count") > 0, f"{name} has no observations"
    assert scrape.histograms() == [
        "flowpark_capability_duration_seconds",
        "flowpark_delivery_lag_seconds",
        "flowpark_group_commit_batch_size",
        "flowpark_poll_budget_used_ratio",
        "flowpark_provider_deferral_seconds",
        "flowpark_signal_to_resume_seconds",
        "flowpark_sweep_claimed",
        "flowpark_sweep_duration_seconds",
        "flowpark_wake_lateness_seconds",
    ]
    # no instance id in any label
    for instance_id in [*polls, orphan.id, timeout_id, signal_id]:
        assert instance_id not in scrape.text


async def test_serve_workers_2_aggregates_both_processes(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    import shutil

    path = tmp_path / "workers.db"
    shutil.copyfile(_sqlite_template, path)
    with serve_subprocess(
        f"sqlite:///{path}",
        tmp_path / "server.log",
        workers=2,
        timer_scan_interval="0.2",
        ocr_callbacks="false",
        sample_ocr_per_page="0",
    ) as server:
        limits = httpx.Limits(max_keepalive_connections=0)  # a new connection per request
        async with httpx.AsyncClient(
            base_url=server.base_url,
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
            limits=limits,
        ) as client:

            async def both_up() -> set[str]:
                assert server.process.poll() is None, server.output()
                try:
                    resp = await client.get("/metrics")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not up yet: {exc!r}") from exc
                assert resp.status_code == 200, resp.text
                nodes = {s["node"] for s in Scrape(resp.text).series("flowpark_node_info")}
                assert len(nodes) == 2, nodes
                return nodes

            await eventually(both_up, timeout=60, interval=0.2, what="two workers report")
            documents = 12
            for i in range(documents):
                resp = await client.post(
                    "/api/v1/documents",
                    json={"documentId": f"agg-{i}", "pages": 1},
                    headers={"Idempotency-Key": f"agg-{i}"},
                )
                assert resp.status_code in (200, 202), resp.text
            # whichever process answers, the figures are those of both
            for _ in range(6):
                scrape = await _scrape(client)
                assert len(scrape.series("flowpark_node_info")) == 2
                assert scrape.value("flowpark_instances_started_total") == documents


async def test_worker_serves_metrics_on_its_port(_sqlite_template: Path, tmp_path: Path) -> None:
    import shutil
    import signal
    import subprocess

    from tests.support.server import flowpark_command, free_port

    path = tmp_path / "worker.db"
    shutil.copyfile(_sqlite_template, path)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(FLOWPARK_DATABASE_URL=f"sqlite:///{path}", FLOWPARK_NODE_ID="worker-1")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [*flowpark_command(), "worker", "--metrics-port", str(port), "--log-level", "info"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:

            async def swept() -> Scrape:
                assert worker.poll() is None, log.read_text()
                try:
                    resp = await client.get("/metrics")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not up yet: {exc!r}") from exc
                assert resp.status_code == 200
                scrape = Scrape(resp.text)
                assert scrape.value("flowpark_sweep_duration_seconds_count") >= 1
                return scrape

            scrape = await eventually(swept, timeout=60, interval=0.2, what="the worker swept")
        assert scrape.series("flowpark_node_info") == [{"node": "worker-1"}]
        assert scrape.value("flowpark_sweep_last_success_timestamp_seconds") > 0
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, log.read_text()
