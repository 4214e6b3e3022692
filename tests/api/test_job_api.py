"""``POST /api/v1/jobs`` (job.await) over real HTTP: uvicorn on loopback, the fake job service
on the same server (QUEUED 2 s, then RUNNING, SUCCEEDED 6 s after its start), real time."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx
import pytest

from tests.support.api import assert_problem
from tests.support.eventually import eventually

JOBS = "/api/v1/jobs"


def new_job() -> str:
    return f"job-{uuid.uuid4().hex[:12]}"


async def start_job(
    client: httpx.AsyncClient, job_id: str, key: str | None = None
) -> httpx.Response:
    return await client.post(
        JOBS,
        json={"instanceKey": job_id},
        headers={"Idempotency-Key": key or f"key-{uuid.uuid4().hex}"},
    )


async def ended(client: httpx.AsyncClient, instance_id: str) -> dict[str, Any]:
    view: dict[str, Any] = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["state"] in ("completed", "failed", "cancelled"), view["state"]
    return view


async def progress(client: httpx.AsyncClient, instance_id: str) -> list[str]:
    resp = await client.get(f"/api/v1/instances/{instance_id}/streams/JobProgress")
    assert resp.status_code == 200, resp.text
    return [m["value"]["state"] for m in resp.json()]


@pytest.mark.slow
async def test_a_job_completes_over_http_in_about_six_seconds(client: httpx.AsyncClient) -> None:
    job_id = new_job()
    began = time.monotonic()
    resp = await start_job(client, job_id)
    answered = time.monotonic() - began
    assert resp.status_code == 202, resp.text
    body = resp.json()
    # the answer comes once the wait has begun, not when it ends
    assert body["status"] == "running" and answered < 3.0, (body, answered)
    view = await eventually(lambda: ended(client, body["instanceId"]), timeout=30, interval=0.05)
    took = time.monotonic() - began
    print(f"job.await over HTTP: 202 after {answered:.2f}s, completed after {took:.2f}s")
    assert view["state"] == "completed", view["error"]
    assert view["result"] == {"jobId": job_id, "output": f"job {job_id} done"}
    assert view["instanceKey"] == job_id
    assert 5.5 <= took <= 9.0, took
    assert await progress(client, body["instanceId"]) == ["QUEUED", "RUNNING"]
    (waited,) = [r for r in view["journal"] if r["capabilityId"] == "job.await"]
    assert (waited["outcome"], waited["try"]) == ("success", 1)


async def test_a_running_instance_key_answers_the_same_start_and_refuses_another(
    client: httpx.AsyncClient,
) -> None:
    job_id = new_job()
    first = await start_job(client, job_id, key="k1-" + job_id)
    assert first.status_code == 202, first.text
    instance_id = first.json()["instanceId"]

    again = await start_job(client, job_id, key="k1-" + job_id)
    assert again.status_code == 202, again.text
    assert again.json()["instanceId"] == instance_id

    other = await start_job(client, job_id, key="k2-" + job_id)
    problem = assert_problem(other, 409, "instance_key_in_use")
    assert problem["instanceId"] == instance_id
    assert problem["instanceKey"] == job_id

    # end it early through the job service, then the key is free again
    done = await client.post(f"/fake/jobs/{job_id}/complete")
    assert done.status_code == 200, done.text
    view = await eventually(lambda: ended(client, instance_id), timeout=20)
    assert view["state"] == "completed"

    reused = await start_job(client, job_id, key="k3-" + job_id)
    assert reused.status_code == 202, reused.text
    assert reused.json()["instanceId"] != instance_id
    later = await eventually(lambda: ended(client, reused.json()["instanceId"]), timeout=20)
    assert later["state"] == "completed"
    assert later["result"] == {"jobId": job_id, "output": f"job {job_id} done"}


async def test_a_failed_job_fails_the_instance_with_job_failed(client: httpx.AsyncClient) -> None:
    job_id = new_job()
    resp = await start_job(client, job_id)
    assert resp.status_code == 202, resp.text
    failed = await client.post(f"/fake/jobs/{job_id}/fail", json={"reason": "disk full"})
    assert failed.status_code == 200, failed.text
    view = await eventually(lambda: ended(client, resp.json()["instanceId"]), timeout=20)
    assert view["state"] == "failed"
    assert view["error"]["code"] == "job.failed"
    assert "disk full" in view["error"]["message"]
