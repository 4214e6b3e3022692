"""``bulkwake``: an operator's bulk wake of N parked instances (default 1,000) whose
provider is limited, answered over HTTP.

The server (samples, fake OCR in a process of its own, no sweeper: the instances stay
parked) limits the OCR provider to 2 calls/s; N ``document.process`` instances are started
(their first calls mostly deferred by that limit) and parked. Then one client wakes them
all the way ``flowpark instances wake --all`` does: ``POST /api/v1/instances/actions``
pages of at most 1,000 with ``nextCursor``. Figures: ``answer_ms`` (the whole wake, every
page, at the client), ``acted`` (wakes recorded), ``statements`` are not counted here (a
test pins them: ``tests/api/test_bulk_wakes.py``). Target: ``answer_ms`` < 2,000 (a wake
is recorded, not run: the sweep runs it at the provider's pace).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from bench.common import (
    BenchStore,
    Result,
    api_client,
    err_console,
    run_concurrently,
    spawn_fake_ocr,
    spawn_server,
)

__all__ = ["QUICK_N", "run"]

QUICK_N = 100
TARGET_MS = 2000.0
LIMIT_PER_S = 2.0


async def run(store: BenchStore, n: int, *, quick: bool = False, **_: Any) -> Result:
    """Start ``n`` limited instances, then time one bulk wake of all of them."""
    n = min(n, QUICK_N) if quick else n
    limits = {"ocr": {"rate_per_second": LIMIT_PER_S, "burst": 1}}
    env = {"FLOWPARK_PROVIDER_LIMITS": json.dumps(limits), "FLOWPARK_START_WAIT_SECONDS": "5"}
    with (
        spawn_fake_ocr() as ocr,
        spawn_server(store.url, ocr.base_url, sweeper=False, extra_env=env) as server,
    ):
        async with api_client(server.base_url) as http:
            run_id = uuid.uuid4().hex[:8]

            async def start(i: int) -> None:
                key = f"bulk-{run_id}-{i}"
                answer = await http.post(
                    "/api/v1/documents",
                    json={"documentId": key, "pages": 1},
                    headers={"Idempotency-Key": key},
                )
                answer.raise_for_status()

            await run_concurrently(n, 16, start, label="start")
            acted = 0
            pages = 0
            cursor: str | None = None
            began = time.perf_counter()
            while True:
                body: dict[str, Any] = {
                    "action": "wake",
                    "filter": {"flow": "document.process"},
                    "limit": 1000,
                }
                if cursor:
                    body["cursor"] = cursor
                answer = await http.post("/api/v1/instances/actions", json=body)
                answer.raise_for_status()
                page = answer.json()
                acted += int(page.get("acted", 0))
                pages += 1
                cursor = page.get("nextCursor")
                if not cursor:
                    break
            answer_ms = (time.perf_counter() - began) * 1000
    figures = {"answer_ms": round(answer_ms, 1), "acted": acted, "pages": pages}
    err_console.print(f"bulkwake: {figures}")
    return Result(
        "bulkwake",
        store.kind,
        n,
        figures,
        params={"limit_per_s": LIMIT_PER_S},
        targets={"answer_ms": (f"< {TARGET_MS:g}", answer_ms < TARGET_MS)},
    )
