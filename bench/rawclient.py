"""A raw HTTP/1.1 keep-alive client for the start route: pre-encoded requests on plain
asyncio streams (no httpx), so the client spends far less CPU than the server it drives and
the server's CPU per request is what a run measures.

Each of ``concurrency`` connections sends one request, reads the whole answer (status line,
headers, ``Content-Length`` body) and sends the next; every answer must be 202.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from bench.common import API_TOKEN
from bench.flows import document_input

__all__ = ["drive"]


def _request(host: str, port: int, i: int, run_id: str) -> bytes:
    body = json.dumps(document_input(i, run_id)).encode()
    head = (
        "POST /api/v1/documents HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        f"Authorization: Bearer {API_TOKEN}\r\n"
        f"Idempotency-Key: {run_id}-{i}\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _answer(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def drive(
    host: str, port: int, n: int, *, concurrency: int = 32, first: int = 0
) -> tuple[list[float], float]:
    """Send ``n`` starts (numbers ``first..first+n-1``) over ``concurrency`` keep-alive
    connections; returns each request's latency (seconds) and the wall time of the batch."""
    run_id = uuid.uuid4().hex[:6]
    numbers = iter(range(first, first + n))
    latencies: list[float] = []

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for i in numbers:
                request = _request(host, port, i, run_id)
                t0 = time.perf_counter()
                writer.write(request)
                status = await _answer(reader)
                latencies.append(time.perf_counter() - t0)
                if status != 202:
                    raise RuntimeError(f"start answered {status}")
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(connection() for _ in range(min(concurrency, max(n, 1)))))
    return latencies, time.perf_counter() - t0
