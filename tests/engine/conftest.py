"""Engine-tier fixtures: the document flow with scripted or real (HTTP) capabilities."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import timedelta

import httpx
import pytest
import uvicorn

from samples.fakes import FakeJobService, FakeOcrService, create_fakes_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
    while not server.started:
        assert not task.done(), "fake server failed to start"
        await asyncio.sleep(0.01)
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
