"""``start``: ``POST /api/v1/documents`` over real HTTP to the server (uvicorn on loopback,
its own process), unique ``Idempotency-Key`` per request, ``--concurrency`` 32 clients
(httpx). Each request answers 202 once the instance has uploaded, run poll attempt 0 and
parked. Reports requests/s, p50 and p99 latency, and CPU per request of the server, the
fake OCR and PostgreSQL.
"""

from __future__ import annotations

import uuid
from typing import Any

from bench.common import (
    BenchStore,
    CpuMeter,
    Result,
    api_client,
    percentiles,
    run_concurrently,
    spawn_fake_ocr,
    spawn_server,
)
from bench.flows import document_input

__all__ = ["run"]


async def run(store: BenchStore, n: int, *, concurrency: int = 32, **_: Any) -> Result:
    run_id = uuid.uuid4().hex[:6]
    with spawn_fake_ocr() as ocr, spawn_server(store.url, ocr.base_url) as server:
        async with api_client(server.base_url, concurrency) as client:

            async def start(i: int) -> None:
                resp = await client.post(
                    "/api/v1/documents",
                    json=document_input(i, run_id),
                    headers={"Idempotency-Key": f"{run_id}-{i}"},
                )
                if resp.status_code != 202:
                    raise RuntimeError(f"start answered {resp.status_code}: {resp.text}")

            warm = min(100, n)
            await run_concurrently(warm, concurrency, start, label="warm-up", start=n)
            meter = CpuMeter(store, {"server": server.pid, "fake_ocr": ocr.pid})
            meter.start()
            latencies = await run_concurrently(n, concurrency, start, label="POST /documents")
            meter.stop()
    stats = percentiles([x * 1000 for x in latencies], (50, 99))
    figures = {
        "requests_per_s": round(n / meter.wall, 1),
        "p50_ms": round(stats["p50"], 1),
        "p99_ms": round(stats["p99"], 1),
        "max_ms": round(stats["max"], 1),
    }
    return Result(
        "start",
        store.kind,
        n,
        figures,
        {
            "concurrency": concurrency,
            "client": "httpx",
            "server": "uvicorn (1 proc)",
            "warmup": warm,
        },
        details={"cpu_ms_per_request": {k: round(v * 1000 / n, 2) for k, v in meter.used.items()}},
    )
