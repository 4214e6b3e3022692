"""API fixtures: one real flowpark server (uvicorn on loopback) for the session.

``live`` serves the samples on a migrated SQLite file with a fast fake OCR (0.05 s/page),
a 2 s sweep and no OCR webhook, so documents finish through the parked poll alone (its
short waits wake through the sweeper's in-process wakes, not the periodic scan; a faster scan
would only burn the worker's CPU for the rest of the session: each idle scan is a claim). Tests
that need other settings start their own with :func:`tests.support.server.live_server`.
Each test uses fresh document ids and idempotency keys, so they share the server safely.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import LiveServer, live_server

#: seconds between the session server's periodic sweeps
LIVE_SCAN_INTERVAL = 2.0


@pytest.fixture(scope="session")
def live(_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The session's server (samples, fake OCR, sweep) on its own migrated SQLite file."""
    path = tmp_path_factory.mktemp("live") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", timer_scan_interval=LIVE_SCAN_INTERVAL) as server:
        yield server


@pytest.fixture
async def client(live: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    """An authenticated client on ``live``."""
    async with live.client() as http:
        yield http


@pytest.fixture
async def anonymous(live: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    """A client on ``live`` without credentials."""
    async with live.client(token=None) as http:
        yield http


@pytest.fixture
def doc_id() -> str:
    """A fresh document id."""
    return f"doc-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def key() -> str:
    """A fresh idempotency key."""
    return f"key-{uuid.uuid4().hex}"
