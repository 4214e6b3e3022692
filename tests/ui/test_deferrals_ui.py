"""The console after a run its provider's limit held back: the overview shows the wake
lateness of the sweep (the harness sweeps on time: 0 s) and, apart, how long providers
deferred attempts; an instance's attempt says what it waited for ("deferred 20 s by provider
ocr's limit") and how late the sweep was after it. The documents run on the virtual clock,
in the last minutes, with the OCR provider's limit set to one call every 10 s."""

from __future__ import annotations

import html
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from flowpark.engine.node.engine import EngineConfig
from flowpark.samples.document_processing import (
    ExtractedFields,
    OcrClient,
    OcrJob,
    OcrStatus,
    build_document_flow,
)
from flowpark.testing import FlowHarness, Scripted
from tests.support.server import TOKEN, LiveServer, live_server


def _status(ctx: object) -> OcrStatus:
    done = getattr(ctx, "scope", 0) >= 1
    return OcrStatus(job_id="j", status="completed" if done else "pending", text="a: 1")


async def _limited_run(url: str) -> list[str]:
    """Three documents at once, the OCR provider at 0.1 calls/s: their calls deferred."""
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))
    subs = {
        "ocr.upload": Scripted(OcrJob(job_id="j")),
        "ocr.status": Scripted(_status),
        "document.extract": Scripted(ExtractedFields(values={"a": "1"})),
    }
    config = EngineConfig(
        node_id="harness", provider_limits={"ocr": {"rate_per_second": 0.1, "burst": 1}}
    )
    start = datetime.now(UTC) - timedelta(minutes=4)
    async with FlowHarness.open(
        [flow], database_url=url, substitutes=subs, start=start, config=config, migrate=False
    ) as h:
        ids = [
            (await h.start("document.process", {"documentId": f"d-{i}", "pages": 1})).instance.id
            for i in range(3)
        ]
        for _ in range(60):
            if all([(await h.instance(i)).state.ended for i in ids]):
                break
            await h.advance_to_next_wake()
        # and one whose wait a signal ended: its attempts list the signal, not deferred
        signalled = (await h.start("document.process", {"documentId": "d-s", "pages": 1})).instance
        await h.advance_to_next_wake(signalled.id)
        await h.signal(signalled.id, "ocr.completed", {"jobId": "j", "status": "completed"})
        await h.wait_until(lambda i: i.state.ended, signalled.id)
        return [*ids, signalled.id]


@pytest.fixture(scope="module")
def limited(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, list[str]]]:
    import asyncio

    path = tmp_path_factory.mktemp("deferrals") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    ids = asyncio.run(_limited_run(f"sqlite:///{path}"))
    with live_server(f"sqlite:///{path}", run_sweeper=False) as server:
        yield server, ids


async def test_the_overview_counts_provider_deferral_apart_from_wake_lateness(
    limited: tuple[LiveServer, list[str]],
) -> None:
    server, ids = limited
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30.0) as http:
        signed = await http.post("/ui/sign-in", data={"token": TOKEN, "next": "/ui"})
        assert signed.status_code == 303, signed.text
        page = (await http.get("/ui")).text
        late = re.search(r'data-testid="lateness"><div class="v">([^<]*)</div>', page)
        assert late is not None and late.group(1) == "0.00 s / 0.00 s", late  # was 20 s / 20 s
        held = re.search(r'data-testid="deferral"><div class="v">([^<]*)</div>', page)
        assert held is not None and re.fullmatch(r"\d+ s / \d+ s", held.group(1)), held
        assert int(held.group(1).split()[0]) >= 10
        assert "held back by providers" in page
        row = page[page.index('data-flow="document.process" data-version="1.0.0"') :]
        cell = re.search(r'data-testid="deferred-p50">([^<]*)<', row)
        assert cell is not None and cell.group(1).endswith(" s")

        answers = [await http.get(f"/ui/instances/{i}") for i in ids]
        assert [a.status_code for a in answers] == [200] * len(ids)
        pages = [a.text for a in answers]
        assert "ended by signal" in pages[-1] or 'data-outcome="signal"' in pages[-1]
        said = [
            html.unescape(m.group(1))
            for text in pages
            for m in re.finditer(r'data-testid="attempt-deferred">([^<]*)<', text)
        ]
        assert said, "no attempt says it was deferred"
        assert all(re.fullmatch(r"deferred \d+ s by provider ocr's limit", s) for s in said), said
        assert any('class="deferred" data-testid="deferred-' in text for text in pages)
