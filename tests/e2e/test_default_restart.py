"""The default setup survives a restart: ``flowpark serve`` with the samples, 20 documents
parked on the in-process fake OCR, the node killed (SIGKILL: nothing flushed or handed back)
and started again: 20 of 20 complete, each keeping its attempts and its budget; the fake OCR
kept its jobs (beside the SQLite file), so no attempt meets a 404. A graceful stop (SIGTERM
and SIGINT are one path in uvicorn) of nodes with parked documents is in test_multinode."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import start_document, wait_for_state
from tests.support.eventually import eventually
from tests.support.server import SubprocessServer, serve_subprocess

DOCUMENTS = 20
PAGES = 10  # x 1 s per page: every job is still pending when the node stops
SAMPLES = {"sample_ocr_per_page": "1", "ocr_callbacks": "false", "timer_scan_interval": "0.2"}


async def _up(node: SubprocessServer) -> None:
    async def healthy() -> None:
        assert node.process.poll() is None, node.output()[-3000:]
        try:
            async with node.client() as http:
                assert (await http.get("/healthz")).status_code == 200
        except httpx.TransportError as exc:
            raise AssertionError(f"not up yet: {exc!r}") from exc

    await eventually(healthy, timeout=30, interval=0.1, what="the node answers")


async def _views(node: SubprocessServer, ids: list[str]) -> list[dict[str, Any]]:
    async with node.client() as http:
        return [(await http.get(f"/api/v1/instances/{i}")).json() for i in ids]


def _status_scopes(view: dict[str, Any]) -> list[int]:
    return [r["scope"] for r in view["journal"] if r["capabilityId"] == "ocr.status"]


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGKILL], ids=["sigkill"])
async def test_parked_documents_complete_after_a_restart(
    _sqlite_template: Path, tmp_path: Path, stop: signal.Signals
) -> None:
    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with serve_subprocess(url, tmp_path / "first.log", settings=SAMPLES) as first:
        await _up(first)
        async with first.client() as http:
            started = await asyncio.gather(
                *(start_document(http, f"r-{i}", pages=PAGES) for i in range(DOCUMENTS))
            )
        assert [r.json()["status"] for r in started] == ["suspended"] * DOCUMENTS
        ids = [r.json()["instanceId"] for r in started]
        before = await _views(first, ids)
        first.process.send_signal(stop)
        first.process.wait(30)
    assert all(v["state"] == "suspended" for v in before)
    # each in its poll, its job pending: attempt 0 at least (a loaded machine may have read
    # the views after attempt 1 or 2 came round)
    assert all(_status_scopes(v)[:1] == [0] for v in before), [_status_scopes(v) for v in before]
    assert all(_status_scopes(v) == list(range(len(_status_scopes(v)))) for v in before)
    assert (tmp_path / "flowpark.db.fake-ocr.jsonl").exists()

    with serve_subprocess(url, tmp_path / "second.log", settings=SAMPLES) as second:
        await _up(second)
        again = await _views(second, ids)
        # the budget did not move: the instant stored before attempt 0, read on a new node
        # (by every document still in its poll: on a loaded machine the new node may come up
        # after some jobs are done, and those documents' open bound is then the next step's
        # retry window, a budget of its own)
        waiting = [
            (b, a)
            for b, a in zip(before, again, strict=True)
            if a["budget"] and a["budget"]["kind"] == "poll.budget"
        ]
        assert waiting, [(a["state"], a["budget"]) for a in again]
        for b, a in waiting:
            assert (a["budget"]["stepId"], a["budget"]["startedAt"], a["budget"]["endsAt"]) == (
                b["budget"]["stepId"],
                b["budget"]["startedAt"],
                b["budget"]["endsAt"],
            )
        async with second.client() as http:
            done = [await wait_for_state(http, i, timeout=90) for i in ids]
    errors = [v["error"] for v in done if v["error"]]
    assert [v["state"] for v in done] == ["completed"] * DOCUMENTS, errors[:3]
    for view in done:
        scopes = _status_scopes(view)
        assert scopes == list(range(len(scopes))) and len(scopes) >= 2  # 0 kept, then 1, ...
        assert view["result"]["fieldCount"] == PAGES
