"""``GET /api/v1/instances/{id}/streams/{name}``: JSON, Server-Sent Events with resume, and
the 404s, over real HTTP against the session's server."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.api import assert_problem, start_document
from tests.support.eventually import eventually

JOBS = "/api/v1/jobs"
SSE = {"Accept": "text/event-stream"}


@dataclass
class Event:
    id: str | None = None
    event: str = "message"
    data: list[str] = field(default_factory=list)

    def json(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads("\n".join(self.data))
        return value


async def read_events(
    client: httpx.AsyncClient, url: str, headers: dict[str, str]
) -> tuple[httpx.Response, list[Event]]:
    """Open the event stream and read it to its end (the server closes it)."""
    events: list[Event] = []
    current = Event()
    async with client.stream("GET", url, headers=headers) as resp:
        if resp.status_code != 200:
            await resp.aread()
            return resp, events
        async for line in resp.aiter_lines():
            if line == "":
                if current.data or current.id is not None:
                    events.append(current)
                current = Event()
            elif line.startswith(":"):
                continue  # keep-alive comment
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "data":
                    current.data.append(value)
                elif name == "id":
                    current.id = value
                elif name == "event":
                    current.event = value
    return resp, events


async def start_job(client: httpx.AsyncClient) -> tuple[str, str]:
    job_id = f"job-{uuid.uuid4().hex[:12]}"
    resp = await client.post(
        JOBS, json={"instanceKey": job_id}, headers={"Idempotency-Key": f"key-{uuid.uuid4().hex}"}
    )
    assert resp.status_code == 202, resp.text
    return job_id, resp.json()["instanceId"]


def url(instance_id: str, name: str = "JobProgress") -> str:
    return f"/api/v1/instances/{instance_id}/streams/{name}"


async def messages(
    client: httpx.AsyncClient, instance_id: str, **params: int
) -> list[dict[str, Any]]:
    resp = await client.get(url(instance_id), params=params)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    found: list[dict[str, Any]] = resp.json()
    return found


async def test_the_stream_as_json_in_write_order_with_an_after_cursor(
    client: httpx.AsyncClient,
) -> None:
    job_id, instance_id = await start_job(client)

    async def running() -> list[dict[str, Any]]:
        found = await messages(client, instance_id)
        assert [m["value"]["state"] for m in found] == ["QUEUED", "RUNNING"]
        return found

    queued, run = await eventually(running, timeout=15)
    assert queued["sequence"] < run["sequence"]
    assert queued["stream"] == "JobProgress" and queued["createdAt"].endswith("Z")
    assert queued["value"] == {"jobId": job_id, "state": "QUEUED", "result": None, "error": None}
    assert await messages(client, instance_id, after=queued["sequence"]) == [run]
    assert await messages(client, instance_id, after=run["sequence"]) == []
    await client.post(f"/fake/jobs/{job_id}/complete")


async def test_server_sent_events_follow_the_job_and_end_with_the_instance(
    client: httpx.AsyncClient,
) -> None:
    job_id, instance_id = await start_job(client)
    # the job service ends the job as soon as it has reported RUNNING
    await eventually(lambda: _states(client, instance_id, ["QUEUED", "RUNNING"]), timeout=15)
    await client.post(f"/fake/jobs/{job_id}/complete")

    resp, events = await read_events(client, url(instance_id), SSE)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    *progress, end = events
    assert [e.json()["value"]["state"] for e in progress] == ["QUEUED", "RUNNING"]
    assert [e.id for e in progress] == [str(e.json()["sequence"]) for e in progress]
    assert end.event == "end" and end.id is None
    assert end.json() == {"instanceId": instance_id, "state": "completed"}

    # a reconnect resumes after Last-Event-ID: only what came after, then the end again
    resp, resumed = await read_events(
        client, url(instance_id), {**SSE, "Last-Event-ID": progress[0].id or ""}
    )
    assert [(e.event, e.id) for e in resumed] == [("message", progress[1].id), ("end", None)]
    resp, nothing_new = await read_events(
        client, url(instance_id), {**SSE, "Last-Event-ID": progress[1].id or ""}
    )
    assert [e.event for e in nothing_new] == ["end"]


async def test_an_open_event_stream_delivers_messages_as_they_are_written(
    client: httpx.AsyncClient,
) -> None:
    job_id, instance_id = await start_job(client)
    states: list[str] = []
    async with client.stream("GET", url(instance_id), headers=SSE) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and '"value"' in line:
                states.append(json.loads(line[6:])["value"]["state"])
                if states == ["QUEUED", "RUNNING"]:
                    # end the job while the stream is open: the stream must then end
                    await client.post(f"/fake/jobs/{job_id}/complete")
            elif line.startswith("event: end"):
                break
    assert states == ["QUEUED", "RUNNING"]


async def _states(client: httpx.AsyncClient, instance_id: str, expected: list[str]) -> None:
    assert [m["value"]["state"] for m in await messages(client, instance_id)] == expected


async def test_unknown_instances_and_undeclared_streams_are_404_problems(
    client: httpx.AsyncClient,
) -> None:
    assert_problem(await client.get(url("no-such-instance")), 404, "instance_not_found")
    assert_problem(
        await client.get(url("no-such-instance"), headers=SSE), 404, "instance_not_found"
    )
    job_id, instance_id = await start_job(client)
    problem = assert_problem(await client.get(url(instance_id, "Nope")), 404, "stream_not_declared")
    assert problem["streams"] == ["JobProgress"]
    assert_problem(
        await client.get(url(instance_id, "Nope"), headers=SSE), 404, "stream_not_declared"
    )
    document = await start_document(client)
    assert document.status_code == 202, document.text
    assert_problem(await client.get(url(document.json()["instanceId"])), 404, "stream_not_declared")
    await client.post(f"/fake/jobs/{job_id}/complete")


@pytest.mark.parametrize(
    "cursor",
    ["abc", "-1", "1.5", str(2**63), b"\xb2", b"\xb9", "\u0661".encode(), b"\xff"],
    ids=[
        "word",
        "negative",
        "fraction",
        "too-big",
        "superscript-two",
        "superscript-one",
        "arabic-indic-one",
        "latin1",
    ],
)
async def test_a_bad_last_event_id_is_422(client: httpx.AsyncClient, cursor: str | bytes) -> None:
    job_id, instance_id = await start_job(client)
    resp = await client.get(url(instance_id), headers={**SSE, "Last-Event-ID": cursor})  # type: ignore[arg-type]  # bytes on purpose
    assert_problem(resp, 422, "input_invalid")
    await client.post(f"/fake/jobs/{job_id}/complete")


async def test_streams_need_a_bearer_token(anonymous: httpx.AsyncClient) -> None:
    assert_problem(await anonymous.get(url("any")), 401, "unauthorized")
