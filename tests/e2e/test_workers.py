"""``flowpark serve --workers 2``: every worker process runs its own sweep; the atomic claim
alone keeps each execution to one journal row and each event to one outbox row.

The fake OCR keeps its jobs in memory, so the workers share one fake provider served on
its own (``create_fakes_server``), as a multi-node deployment would."""

from __future__ import annotations

import asyncio
import shutil
from collections import Counter
from pathlib import Path

import httpx
import pytest

from flowpark.samples.fakes.server import create_fakes_server
from tests.support.api import all_events, start_document, wait_for_state
from tests.support.db import query
from tests.support.eventually import eventually
from tests.support.server import live_server, serve_subprocess

DOCUMENTS = 20


@pytest.mark.slow
async def test_two_sweeping_workers_run_each_attempt_once(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "workers.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with (
        live_server(url, app_factory=create_fakes_server, sample_ocr_per_page=0.1) as fakes,
        serve_subprocess(
            url,
            tmp_path / "server.log",
            workers=2,
            ocr_base_url=fakes.base_url,
            timer_scan_interval="0.2",
            ocr_callbacks="false",
        ) as server,
    ):
        async with server.client() as client:

            async def healthy() -> None:
                assert server.process.poll() is None, server.output()
                try:
                    resp = await client.get("/healthz")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not up yet: {exc!r}") from exc
                assert resp.status_code == 200

            await eventually(healthy, timeout=30, interval=0.1, what="two workers are up")
            # 5 pages x 0.1 s: every document parks after attempt 0 and a sweep finishes it
            started = await asyncio.gather(
                *(start_document(client, f"w-{i}", pages=5) for i in range(DOCUMENTS))
            )
            assert [r.status_code for r in started] == [202] * DOCUMENTS
            ids = [r.json()["instanceId"] for r in started]
            views = [await wait_for_state(client, i, timeout=30) for i in ids]
            events = await all_events(client)
            assert "Traceback" not in server.output(), server.output()[-3000:]

    errors = [v["error"] for v in views if v["error"]]
    assert {v["state"] for v in views} == {"completed"}, errors[:2]
    for view in views:
        caps = Counter(r["capabilityId"] for r in view["journal"])
        assert caps["ocr.upload"] == 1 and caps["document.extract"] == 1, caps
        scopes = [r["scope"] for r in view["journal"] if r["capabilityId"] == "ocr.status"]
        assert scopes == list(range(len(scopes))), scopes
    # one successful row per execution (retried failures would add rows of their own)
    (duplicates,) = query(
        url,
        "SELECT count(*) FROM (SELECT instance_id, step_id, scope, kind "
        "FROM flow_step WHERE outcome = 'success' "
        "GROUP BY 1, 2, 3, 4 HAVING count(*) > 1)",
    )[0]
    assert duplicates == 0
    processed = Counter(e["instanceId"] for e in events if e["name"] == "document.processed")
    assert processed == Counter({i: 1 for i in ids})
