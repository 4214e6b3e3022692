"""Engine-tier fixtures: the store (the memory store by default; the SQL stores are tested
through the contract suite, the end-to-end tests and the modules here that look at their
tables, which ask for ``sql_store_url``), and the document flow with scripted or real
(HTTP) capabilities."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
import uvicorn

from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from tests.support.eventually import eventually
from tests.support.server import free_port


@pytest.fixture
def store_url() -> None:
    """No database: a :class:`~flowpark.testing.FlowHarness` opened with ``database_url=None``
    runs on the memory store, which passes the same contract suite as SQLite and PostgreSQL
    (``tests/contract_store``)."""
    return None


@pytest.fixture
async def fake_ocr_server() -> AsyncIterator[tuple[str, FakeOcrService]]:
    """The fake OCR provider on a real loopback port; jobs never finish by themselves."""
    import asyncio

    ocr = FakeOcrService(per_page=timedelta(days=365))
    jobs = FakeJobService()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_fakes_app(ocr, jobs),
            host="127.0.0.1",
            port=port,
            log_level="warning",
            lifespan="on",
        )
    )
    task = asyncio.create_task(server.serve())

    def serving() -> bool:
        assert not task.done(), "fake server failed to start"
        return bool(server.started)

    await eventually(serving, timeout=30, interval=0.01, what="the fake OCR server")
    try:
        yield f"http://127.0.0.1:{port}", ocr
    finally:
        server.should_exit = True
        await task
        await ocr.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=5) as client:
        yield client
