"""``signal``: ``POST .../signals/ocr.completed`` -> instance completed, over real HTTP.

Setup (untimed): N ``document.process`` instances started over HTTP park on their OCR
poll; every OCR job is then completed at the fake (``/complete``, no callback). Timed: for
each instance, ``--concurrency`` at a time, POST the ``ocr.completed`` signal and wait
until the instance is ``completed`` (the delivery stores the signal, claims the parked
instance and runs it to its end: take signal, extract, emit, complete; when the 202 does
not say ``completed`` yet, ``GET /api/v1/instances/{id}`` is polled every 5 ms).
Reports p50/p99 of signal -> completed, and signals per second.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx

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
    ids: dict[int, str] = {}
    with spawn_fake_ocr() as ocr, spawn_server(store.url, ocr.base_url) as server:
        async with (
            api_client(server.base_url, concurrency) as client,
            httpx.AsyncClient(base_url=ocr.base_url, timeout=60) as fake,
        ):

            async def start(i: int) -> None:
                resp = await client.post(
                    "/api/v1/documents",
                    json=document_input(i, run_id),
                    headers={"Idempotency-Key": f"{run_id}-{i}"},
                )
                assert resp.status_code == 202, resp.text
                ids[i] = resp.json()["instanceId"]

            await run_concurrently(n, concurrency, start, label="setup: start")
            jobs = {j["documentId"]: j["jobId"] for j in (await fake.get("/fake/ocr/jobs")).json()}

            async def complete(i: int) -> None:
                job = jobs[document_input(i, run_id)["documentId"]]
                resp = await fake.post(f"/fake/ocr/jobs/{job}/complete")
                assert resp.status_code == 200, resp.text

            await run_concurrently(n, concurrency, complete, label="setup: complete jobs")

            async def signal(i: int) -> None:
                job = jobs[document_input(i, run_id)["documentId"]]
                resp = await client.post(
                    f"/api/v1/documents/{ids[i]}/signals/ocr.completed",
                    json={"jobId": job, "status": "completed"},
                    headers={"Idempotency-Key": f"ocr-{job}"},
                )
                assert resp.status_code == 202, resp.text
                state = resp.json()["state"]
                while state != "completed":
                    if state in ("failed", "cancelled"):
                        raise RuntimeError(f"instance {ids[i]} ended {state}")
                    await asyncio.sleep(0.005)
                    state = (await client.get(f"/api/v1/instances/{ids[i]}")).json()["state"]

            meter = CpuMeter(store, {"server": server.pid, "fake_ocr": ocr.pid})
            meter.start()
            t0 = time.perf_counter()
            latencies = await run_concurrently(n, concurrency, signal, label="signal -> completed")
            elapsed = time.perf_counter() - t0
            meter.stop()
    stats = percentiles([x * 1000 for x in latencies], (50, 99))
    figures = {
        "p50_ms": round(stats["p50"], 1),
        "p99_ms": round(stats["p99"], 1),
        "max_ms": round(stats["max"], 1),
        "signals_per_s": round(n / elapsed, 1),
    }
    return Result(
        "signal",
        store.kind,
        n,
        figures,
        {"concurrency": concurrency, "client": "httpx", "server": "uvicorn (1 proc)"},
        details={"cpu_ms_per_signal": {k: round(v * 1000 / n, 2) for k, v in meter.used.items()}},
    )
