"""Small helpers for talking to flowpark's HTTP API in tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import httpx

from tests.support.eventually import eventually

__all__ = [
    "DOCUMENTS",
    "ENDED",
    "PROBLEM_JSON",
    "all_events",
    "assert_problem",
    "instant",
    "start_document",
    "wait_for_state",
]

DOCUMENTS = "/api/v1/documents"
PROBLEM_JSON = "application/problem+json"
ENDED = ("completed", "failed", "cancelled")


def instant(value: str) -> datetime:
    """Parse an API instant; it must be ISO-8601 with an explicit UTC designator."""
    assert isinstance(value, str), value
    assert value.endswith("Z") or value.endswith("+00:00"), f"not a UTC instant: {value}"
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    offset = parsed.utcoffset()
    assert offset is not None and offset.total_seconds() == 0, value
    return parsed.astimezone(UTC)


def assert_problem(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """``resp`` is an RFC 9457 problem with ``status`` (and ``code``); returns the body."""
    assert resp.status_code == status, (resp.status_code, resp.text[:500])
    assert resp.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON, resp.headers
    body: dict[str, Any] = resp.json()
    assert isinstance(body.get("code"), str) and body["code"], body
    assert body.get("status") == status, body
    if code is not None:
        assert body["code"] == code, body
    return body


async def start_document(
    client: httpx.AsyncClient,
    document_id: str | None = None,
    *,
    pages: int = 1,
    key: str | None = None,
    **extra: Any,
) -> httpx.Response:
    """``POST /api/v1/documents`` with a fresh (or the given) idempotency key."""
    body = {"documentId": document_id or f"doc-{uuid.uuid4().hex[:12]}", "pages": pages, **extra}
    return await client.post(
        DOCUMENTS, json=body, headers={"Idempotency-Key": key or f"key-{uuid.uuid4().hex}"}
    )


async def wait_for_state(
    client: httpx.AsyncClient,
    instance_id: str,
    states: tuple[str, ...] = ENDED,
    *,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """Poll ``GET /api/v1/instances/{id}`` until its state is one of ``states``."""

    async def reached() -> dict[str, Any]:
        resp = await client.get(f"/api/v1/instances/{instance_id}")
        assert resp.status_code == 200, resp.text
        view: dict[str, Any] = resp.json()
        assert view["state"] in states, f"state {view['state']}, wakeAt {view['wakeAt']}"
        return view

    return await eventually(
        reached, timeout=timeout, interval=0.1, what=f"instance {instance_id} in {states}"
    )


async def all_events(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Every outbox event, paging with the ``after`` cursor."""
    events: list[dict[str, Any]] = []
    after: int | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        resp = await client.get("/api/v1/events", params=params)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        if not page:
            return events
        events.extend(page)
        after = page[-1]["sequence"]
