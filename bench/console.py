"""``console``: how fast the web console's pages answer over N instances (default 10,000).

N ``document.process`` instances are started through the engine and park on their OCR
poll (the fake OCR keeps every job pending); 2 % are then cancelled (compensation runs), so
the overview and the lists count ended instances too. The server
(its own process, no sweep) then answers each console page ``--repeat`` times (default 20)
to one signed-in client, one request at a time: the overview, the instance list (plain,
overdue, filtered by flow and state, page 2), an instance page, and the flow graph.

Figures per page: ``<page>_p50_ms`` and ``<page>_p99_ms`` (wall time of the full answer at
the client). Target: every page's p99 under 200 ms.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import httpx

from bench.common import (
    API_TOKEN,
    BenchStore,
    Result,
    percentiles,
    run_concurrently,
    spawn_fake_ocr,
    spawn_server,
)
from bench.flows import document_input, node_engine

__all__ = ["run"]

TARGET_MS = 200.0
#: How many of the N instances are cancelled at the end of the set-up.
ENDED_SHARE = 0.02


async def _populate(store: BenchStore, n: int, ocr_url: str, concurrency: int) -> list[str]:
    run_id = uuid.uuid4().hex[:6]
    ids: list[str] = []
    async with node_engine(store.url, ocr_url=ocr_url, concurrency=concurrency) as engine:
        plan = engine.catalog.latest("document.process")

        async def start(i: int) -> None:
            result = await engine.start(
                plan, document_input(i, run_id), idempotency_key=f"{run_id}-{i}"
            )
            ids.append(result.instance.id)

        await run_concurrently(n, concurrency, start, label="park")

        async def cancel(i: int) -> None:
            await engine.cancel(ids[i])

        await run_concurrently(max(1, int(n * ENDED_SHARE)), concurrency, cancel, label="cancel")
    return ids


def _pages(client: httpx.Client, instance_id: str) -> dict[str, str]:
    """The console's pages by figure name (page 2 of the list from page 1's link)."""
    first = client.get("/ui/instances")
    first.raise_for_status()
    nxt = re.search(r'data-testid="next-page" href="([^"]+)"', first.text)
    return {
        "overview": "/ui",
        "instances": "/ui/instances",
        "instances_overdue": "/ui/instances?overdue=1",
        "instances_filtered": "/ui/instances?flow=document.process&state=suspended&waiting=poll",
        "instances_page2": nxt.group(1).replace("&amp;", "&") if nxt else "/ui/instances",
        "instance": f"/ui/instances/{instance_id}",
        "flow_graph": "/ui/flows/document.process/1.0.0",
    }


def _measure(base_url: str, ids: list[str], repeat: int) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {}
    with httpx.Client(base_url=base_url, timeout=60) as client:
        signed = client.post("/ui/sign-in", data={"token": API_TOKEN})
        if signed.status_code != 303:
            raise RuntimeError(f"sign-in failed: {signed.status_code} {signed.text[:200]}")
        pages = _pages(client, ids[len(ids) // 2])
        for path in pages.values():  # warm-up: templates compiled, pools open
            client.get(path).raise_for_status()
        for _ in range(repeat):
            for name, path in pages.items():
                t0 = time.perf_counter()
                resp = client.get(path)
                elapsed = (time.perf_counter() - t0) * 1000
                if resp.status_code != 200:
                    raise RuntimeError(f"{path}: {resp.status_code} {resp.text[:200]}")
                timings.setdefault(name, []).append(elapsed)
    return timings


async def run(
    store: BenchStore, n: int, *, concurrency: int = 32, repeat: int = 20, **_: Any
) -> Result:
    with spawn_fake_ocr() as ocr:
        t0 = time.perf_counter()
        ids = await _populate(store, n, ocr.base_url, concurrency)
        setup = time.perf_counter() - t0
        with spawn_server(store.url, ocr.base_url) as server:
            timings = _measure(server.base_url, ids, repeat)
    figures: dict[str, Any] = {}
    targets: dict[str, tuple[str, bool]] = {}
    for name, values in timings.items():
        points = percentiles(values)
        figures[f"{name}_p50_ms"] = round(points["p50"], 1)
        figures[f"{name}_p99_ms"] = round(points["p99"], 1)
        targets[f"{name}_p99_ms"] = (f"< {TARGET_MS:g} ms", points["p99"] < TARGET_MS)
    return Result(
        scenario="console",
        store=store.kind,
        n=n,
        figures=figures,
        params={"repeat": repeat, "cancelled": max(1, int(n * ENDED_SHARE))},
        targets=targets,
        details={
            "setup_s": round(setup, 1),
            "client": "one signed-in httpx client, one request at a time, server in its "
            "own process (uvicorn, no sweep)",
        },
    )
