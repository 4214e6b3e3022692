"""A start answers in bounded time: a provider that hangs does not hold the client's POST.

The OCR provider (the fakes, on their own loopback server) holds the upload call until the
test lets it go (at most 30 s); flowpark serves with ``start_wait_seconds=2``.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from tests.support.api import DOCUMENTS, wait_for_state
from tests.support.server import LiveServer, live_server

HANG_SECONDS = 30.0


def hanging_uploads(app: Any, release: threading.Event, entered: threading.Event) -> Any:
    """``app`` with ``POST /fake/ocr/jobs`` held until ``release`` (or 30 s)."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (scope["method"], scope["path"]) == (
            "POST",
            "/fake/ocr/jobs",
        ):
            entered.set()
            until = time.monotonic() + HANG_SECONDS
            while not release.is_set() and time.monotonic() < until:
                await asyncio.sleep(0.05)
        await app(scope, receive, send)

    return wrapped


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[LiveServer, threading.Event, threading.Event]]:
    release, entered = threading.Event(), threading.Event()
    ocr = FakeOcrService()
    jobs = FakeJobService()
    try:
        with live_server(
            f"sqlite:///{tmp_path}/unused.db",
            app_factory=lambda _s: hanging_uploads(create_fakes_app(ocr, jobs), release, entered),
        ) as server:
            yield server, release, entered
    finally:
        release.set()


async def test_a_start_against_a_hanging_provider_answers_running_at_the_start_wait_and_continues(
    tmp_path: Path,
    _sqlite_template: Path,
    provider: tuple[LiveServer, threading.Event, threading.Event],
) -> None:
    ocr_server, release, entered = provider
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    with live_server(
        f"sqlite:///{db}", ocr_base_url=ocr_server.base_url, start_wait_seconds=2.0
    ) as node:
        async with node.client() as http:
            key = f"key-{uuid.uuid4().hex}"
            body = {"documentId": f"doc-{uuid.uuid4().hex[:8]}", "pages": 1}
            began = time.monotonic()
            resp = await http.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key})
            took = time.monotonic() - began
            assert resp.status_code == 202, resp.text
            assert resp.json()["status"] == "running"
            # answered while the provider still holds the upload: the start waited its 2 s,
            # not for the call (which hangs until released, past its 10 s timeout)
            assert entered.is_set() and not release.is_set()
            assert 2.0 <= took < 10.0, took
            instance_id = resp.json()["instanceId"]
            assert resp.headers["location"].endswith(f"/api/v1/instances/{instance_id}")
            view = (await http.get(f"/api/v1/instances/{instance_id}")).json()
            # nothing but the upload's retry window, stored before its first try
            assert view["state"] == "running", view
            assert [r["capabilityId"] for r in view["journal"]] == ["retry.total"]

            # a replay with the same key answers the same instance at once
            again = await http.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key})
            assert again.status_code == 202, again.text
            assert again.json()["instanceId"] == instance_id

            # the provider answers: the run goes on on the node and parks at the poll
            release.set()
            parked = await wait_for_state(http, instance_id, ("suspended",), timeout=20)
            caps = [r["capabilityId"] for r in parked["journal"] if r["kind"] == "step"]
            assert caps[0] == "ocr.upload" and caps.count("ocr.upload") == 1
            assert "ocr.status" in caps
            replay = await http.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key})
            assert replay.json() == {
                "instanceId": instance_id,
                "status": "suspended",
                **({"awaiting": replay.json()["awaiting"]} if "awaiting" in replay.json() else {}),
            }
            print(f"start answered running in {took:.2f}s with the provider hanging")
