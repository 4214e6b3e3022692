"""The chain over real HTTP: a node serving the samples, its fake OCR admitting 3 calls/s,
one at once (``FLOWPARK_OCR_RATE_LIMIT``), three documents at once. The calls the fake
refuses with 429 and ``Retry-After`` are pushbacks: parked until then, not failed tries;
every document completes, and the provider's row says it was pushed back and why."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.support.eventually import eventually
from tests.support.scrape import Scrape
from tests.support.server import live_server

DOCUMENTS = 3


@pytest.mark.slow  # real waits: the documents' first poll interval (2.5 to 5 s), pushbacks
async def test_a_rate_limited_provider_pushes_back_and_no_document_fails(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    with live_server(
        f"sqlite:///{tmp_path / 'flowpark.db'}",
        timer_scan_interval=0.5,
        sample_ocr_per_page=0.05,
        ocr_callbacks=False,
        ocr_rate_limit=3,
        ocr_rate_burst=1,
    ) as server:
        async with server.client() as client:
            run = uuid.uuid4().hex[:6]
            ids = []
            for n in range(DOCUMENTS):
                resp = await client.post(
                    "/api/v1/documents",
                    json={"documentId": f"doc-{run}-{n}", "pages": 1},
                    headers={"Idempotency-Key": f"{run}-{n}"},
                )
                assert resp.status_code in (200, 201, 202), resp.text
                ids.append(resp.json()["instanceId"])

            async def all_completed() -> list[dict[str, Any]]:
                views = [(await client.get(f"/api/v1/instances/{i}")).json() for i in ids]
                assert all(v["state"] == "completed" for v in views), [
                    (v["state"], v.get("wakeKind")) for v in views
                ]
                return views

            views = await eventually(all_completed, timeout=60, interval=0.5)
            ocr = (await client.get("/api/v1/providers/ocr")).json()
            load = (await client.get("/fake/ocr/admin/load")).json()
            scrape = Scrape((await client.get("/metrics")).text)
    assert load["refused"] >= 1  # the fake refused some calls with 429
    assert ocr["pushbacks"] >= 1
    if ocr["lowered"]:  # still recovering: why it was lowered
        assert "429" in ocr["loweredReason"]
    else:  # recovered already (a slow run): no reason is left
        assert ocr["loweredReason"] is None
    assert sum(m["pushback"] for m in ocr["minutes"]) >= 1
    # the time the provider held calls back is its own metric, apart from wake lateness
    held = "flowpark_provider_deferral_seconds_count"
    assert scrape.value(held, provider="ocr", reason="pushback") >= 1
    assert scrape.value("flowpark_provider_deferral_seconds_sum", provider="ocr") > 0
    # no failed try: each document's journal holds only successful executions
    for view in views:
        assert {r["outcome"] for r in view["journal"]} == {"success"}, view["journal"]
