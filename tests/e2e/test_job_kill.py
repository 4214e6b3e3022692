"""SIGKILL the node that runs ``job.await``: another node resumes it from its checkpoint.

Two real ``flowpark serve`` processes share one SQLite file. The fake job service runs in
this test process (so it outlives the killed node) and both nodes call it. The job never
ends by itself; the test ends it once the surviving node has taken the wait over. The
sample's heartbeat timeout is shortened through its setting
(``FLOWPARK_SAMPLE_JOB_HEARTBEAT_SECONDS``) so the takeover happens in seconds.
"""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from tests.support.eventually import eventually
from tests.support.server import LiveServer, SubprocessServer, live_server, serve_subprocess

HEARTBEAT_SECONDS = 10


@pytest.fixture
def fakes(tmp_path: Path) -> Iterator[tuple[LiveServer, FakeJobService]]:
    """The fake job service on its own loopback server: QUEUED 1 s, then RUNNING for good."""
    jobs = FakeJobService(queued_for=timedelta(seconds=1), succeed_after=timedelta(days=1))
    ocr = FakeOcrService()
    with live_server(
        f"sqlite:///{tmp_path}/unused.db",
        app_factory=lambda _settings, _sample: create_fakes_app(ocr, jobs),
    ) as server:
        yield server, jobs


async def healthy(node: SubprocessServer) -> None:
    assert node.process.poll() is None, node.output()
    async with node.client() as http:
        try:
            assert (await http.get("/healthz")).status_code == 200
        except httpx.TransportError as exc:
            raise AssertionError(f"{node.base_url} not up: {exc}") from exc


async def view(node: SubprocessServer, instance_id: str) -> dict[str, Any]:
    async with node.client() as http:
        resp = await http.get(f"/api/v1/instances/{instance_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]


async def progress(node: SubprocessServer, instance_id: str) -> list[str]:
    async with node.client() as http:
        resp = await http.get(f"/api/v1/instances/{instance_id}/streams/JobProgress")
        assert resp.status_code == 200, resp.text
        return [m["value"]["state"] for m in resp.json()]


def tries(instance: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in instance["journal"] if r["capabilityId"] == "job.await"]


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_a_killed_nodes_wait_resumes_on_the_other_node_from_its_checkpoint(
    tmp_path: Path, _sqlite_template: Path, fakes: tuple[LiveServer, FakeJobService]
) -> None:
    jobs_server, jobs = fakes
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    settings = {
        "jobs_base_url": jobs_server.base_url,
        "sample_job_heartbeat_seconds": str(HEARTBEAT_SECONDS),
        "timer_scan_interval": "0.2",
    }
    with ExitStack() as stack:
        a = stack.enter_context(
            serve_subprocess(f"sqlite:///{db}", tmp_path / "a.log", node_id="a", settings=settings)
        )
        b = stack.enter_context(
            serve_subprocess(f"sqlite:///{db}", tmp_path / "b.log", node_id="b", settings=settings)
        )
        await eventually(lambda: healthy(a), timeout=30, what="node a up")
        await eventually(lambda: healthy(b), timeout=30, what="node b up")

        job_id = f"job-{uuid.uuid4().hex[:12]}"
        async with a.client() as http:
            resp = await http.post(
                "/api/v1/jobs",
                json={"instanceKey": job_id},
                headers={"Idempotency-Key": f"key-{job_id}"},
            )
        assert resp.status_code == 202, resp.text
        instance_id = resp.json()["instanceId"]

        # node a runs the wait and has reported QUEUED, then RUNNING (its checkpoint)
        async def reported_running() -> None:
            assert await progress(b, instance_id) == ["QUEUED", "RUNNING"]

        await eventually(reported_running, timeout=20, what="RUNNING reported")
        before = await view(b, instance_id)
        assert before["state"] == "running" and before["lease"]["owner"] == "a", before
        assert tries(before) == []

        a.process.send_signal(signal.SIGKILL)
        a.process.wait(10)
        killed_at = time.monotonic()

        # node b declares the try lost once its heartbeats stop, and runs try 2
        async def taken_over() -> dict[str, Any]:
            now = await view(b, instance_id)
            lost = tries(now)
            assert [(r["try"], r["outcome"]) for r in lost] == [(1, "failure")], lost
            assert lost[0]["errorType"] == "heartbeat_timeout"
            assert now["state"] == "running" and now["lease"]["owner"] == "b", now
            return now

        await eventually(taken_over, timeout=HEARTBEAT_SECONDS + 30, what="takeover by b")
        took_over = time.monotonic() - killed_at
        print(f"node b took the wait over {took_over:.1f}s after SIGKILL of node a")
        calls = jobs.calls["status"]
        await eventually(
            lambda: jobs.calls["status"] > calls + 1, timeout=10, what="b polls the job"
        )

        async with httpx.AsyncClient(base_url=jobs_server.base_url) as http:
            assert (await http.post(f"/fake/jobs/{job_id}/complete")).status_code == 200

        async def completed() -> dict[str, Any]:
            now = await view(b, instance_id)
            assert now["state"] == "completed", now["state"]
            return now

        final = await eventually(completed, timeout=20, what="completed on b")
        assert final["result"] == {"jobId": job_id, "output": f"job {job_id} done"}
        assert [(r["try"], r["outcome"]) for r in tries(final)] == [(1, "failure"), (2, "success")]
        # try 2 resumed from the checkpoint RUNNING: no progress message twice
        assert await progress(b, instance_id) == ["QUEUED", "RUNNING"]
        assert jobs.calls["start"] == 1
        assert took_over < HEARTBEAT_SECONDS + 15, took_over
        assert "Traceback" not in b.output(), b.output()
