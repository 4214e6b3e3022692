"""Console fixtures: a real server (uvicorn on loopback, no sweep) over a database holding
instances in every state (:func:`tests.support.seed.seed_console_data`)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.seed import Seeded, seed_console_data
from tests.support.server import TOKEN, LiveServer, live_server


@pytest.fixture(scope="session")
def seeded_db(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Seeded]:
    """A SQLite file with instances in every state, and their ids."""
    import asyncio

    path = tmp_path_factory.mktemp("console") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    return url, asyncio.run(seed_console_data(url))


@pytest.fixture(scope="session")
def console(seeded_db: tuple[str, Seeded]) -> Iterator[LiveServer]:
    """The server over the seeded database (no sweep: what is overdue stays overdue; a 60 s
    scan interval makes a wake overdue 2 minutes after its instant, so the newest parked
    instances are not overdue yet while the session runs)."""
    with live_server(seeded_db[0], run_sweeper=False, timer_scan_interval=60.0) as server:
        yield server


@pytest.fixture
def seeded(seeded_db: tuple[str, Seeded]) -> Seeded:
    return seeded_db[1]


@pytest.fixture
async def browser_less(console: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client on the console, not signed in, not following redirects."""
    async with httpx.AsyncClient(base_url=console.base_url, timeout=30.0) as http:
        yield http


@pytest.fixture
async def signed_in(browser_less: httpx.AsyncClient) -> httpx.AsyncClient:
    """The same client, signed in with the test token."""
    resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN, "next": "/ui"})
    assert resp.status_code == 303, resp.text
    return browser_less
