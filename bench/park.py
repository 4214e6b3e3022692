"""``park``: start N ``document.process`` instances that all park; what a parked one costs.

* ``--via engine`` (default): ``Engine.start`` in this process (the node), 32 at a time.
* ``--via http``: ``POST /api/v1/documents`` to the server (uvicorn, its own process).

The OCR provider is the fake (its own process); its jobs stay pending, so every instance
parks on its status poll after attempt 0. No sweep runs while parking (the server's scan
interval is an hour), so what is measured is exactly N parked instances.

Figures: ``bytes_per_instance`` (PostgreSQL: ``pg_total_relation_size`` of the flowpark
tables / N; SQLite: the file after a WAL checkpoint / N), the node's RSS after a warm-up
(``rss_before_mb``) and after parking (``rss_after_mb``), ``rss_growth_mb``, and
``starts_per_s``.
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from typing import Any

from bench.common import (
    BenchStore,
    Result,
    api_client,
    rss_mb,
    run_concurrently,
    spawn_fake_ocr,
    spawn_server,
    sql,
    store_size_bytes,
)
from bench.flows import document_input, node_engine

__all__ = ["run"]

KIB = 1024


def _warmup(n: int) -> int:
    return min(200, max(n // 50, 1))


async def _park_engine(store: BenchStore, n: int, ocr_url: str, concurrency: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    async with node_engine(store.url, ocr_url=ocr_url, concurrency=concurrency) as engine:
        plan = engine.catalog.latest("document.process")

        async def start(i: int) -> None:
            result = await engine.start(
                plan, document_input(i, run_id), idempotency_key=f"{run_id}-{i}"
            )
            assert result.instance.state == "suspended", result.instance.state

        warm = _warmup(n)
        await run_concurrently(warm, concurrency, start, label="warm-up")
        gc.collect()
        before = rss_mb()
        t0 = time.perf_counter()
        await run_concurrently(n - warm, concurrency, start, label="park (engine)", start=warm)
        elapsed = time.perf_counter() - t0
        gc.collect()
        after = rss_mb()
    return {
        "rss_before_mb": before,
        "rss_after_mb": after,
        "elapsed": elapsed,
        "timed": n - warm,
        "warmup": warm,
        "node": "this process (engine API)",
    }


async def _park_http(store: BenchStore, n: int, ocr_url: str, concurrency: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:6]
    with spawn_server(store.url, ocr_url) as server:
        async with api_client(server.base_url, concurrency) as client:

            async def start(i: int) -> None:
                resp = await client.post(
                    "/api/v1/documents",
                    json=document_input(i, run_id),
                    headers={"Idempotency-Key": f"{run_id}-{i}"},
                )
                assert resp.status_code == 202, resp.text
                assert resp.json()["status"] == "suspended", resp.text

            warm = _warmup(n)
            await run_concurrently(warm, concurrency, start, label="warm-up")
            before = server.rss_mb()
            t0 = time.perf_counter()
            await run_concurrently(n - warm, concurrency, start, label="park (http)", start=warm)
            elapsed = time.perf_counter() - t0
            await asyncio.sleep(1)
            after = server.rss_mb()
    return {
        "rss_before_mb": before,
        "rss_after_mb": after,
        "elapsed": elapsed,
        "timed": n - warm,
        "warmup": warm,
        "node": "uvicorn server process",
    }


async def run(
    store: BenchStore, n: int, *, via: str = "engine", concurrency: int = 32, **_: Any
) -> Result:
    with spawn_fake_ocr() as ocr:
        if via == "http":
            measured = await _park_http(store, n, ocr.base_url, concurrency)
        else:
            measured = await _park_engine(store, n, ocr.base_url, concurrency)
    parked = sql(store, "SELECT count(*) FROM flow_instance WHERE state = 'suspended'")[0][0]
    if parked != n:
        raise RuntimeError(f"expected {n} parked instances, found {parked}")
    sizes = store_size_bytes(store)
    total = sum(sizes.values())
    per = total / n
    growth = measured["rss_after_mb"] - measured["rss_before_mb"]
    scaled = growth * 100_000 / measured["timed"]
    figures = {
        "bytes_per_instance": round(per, 1),
        "rss_before_mb": round(measured["rss_before_mb"], 1),
        "rss_after_mb": round(measured["rss_after_mb"], 1),
        "rss_growth_mb": round(growth, 1),
        "rss_growth_per_100k_mb": round(scaled, 1),
        "starts_per_s": round(measured["timed"] / measured["elapsed"], 1),
        "parked": parked,
    }
    targets = {}
    if store.kind == "postgres":
        targets["bytes_per_instance"] = ("<= 1024 (PostgreSQL)", per <= KIB)
    targets["rss_growth_per_100k_mb"] = ("< 50 per 100k parked", scaled < 50)
    details = {
        "bytes_by_table": {k: v for k, v in sizes.items() if v},
        "node": measured["node"],
        "rss_window": f"after {measured['warmup']} warm-up starts -> after {n}",
    }
    return Result(
        "park",
        store.kind,
        n,
        figures,
        {"via": via, "concurrency": concurrency},
        targets=targets,
        details=details,
    )
