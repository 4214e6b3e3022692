"""``flowpark serve --workers 2`` with default settings: the CLI runs one ``flowpark fakes``
process for all workers (the fake OCR and jobs keep their state in memory, so a worker of
its own each would answer 404 for jobs another worker uploaded), and stops it on exit.

Unlike ``test_workers.py`` (which serves the fakes itself and sets FLOWPARK_OCR_BASE_URL),
nothing here points the workers at a provider. With the OCR webhook on (the default) a
document ends by a status check or by the fake OCR's callback (which must reach the serve
URL), whichever comes first; with it off, by the status checks of either worker's sweep."""

from __future__ import annotations

import asyncio
import re
import shutil
from functools import partial
from pathlib import Path

import httpx
import pytest

from tests.support.api import start_document, wait_for_state
from tests.support.eventually import eventually
from tests.support.server import SubprocessServer, serve_subprocess

DOCUMENTS = 30


async def _healthy(server: SubprocessServer, client: httpx.AsyncClient) -> None:
    assert server.process.poll() is None, server.output()
    try:
        resp = await client.get("/healthz")
    except httpx.TransportError as exc:
        raise AssertionError(f"not up yet: {exc!r}") from exc
    assert resp.status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("callbacks", ["true", "false"])
async def test_serve_with_two_workers_shares_one_fakes_process(
    _sqlite_template: Path, tmp_path: Path, callbacks: str
) -> None:
    path = tmp_path / "workers.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with serve_subprocess(
        url,
        tmp_path / "server.log",
        workers=2,
        sample_ocr_per_page="0.5",
        timer_scan_interval="0.2",
        ocr_callbacks=callbacks,
    ) as server:
        async with server.client() as client:
            await eventually(
                partial(_healthy, server, client),
                timeout=30,
                interval=0.1,
                what="two workers are up",
            )
            # 6 pages x 0.5 s: each document parks after attempt 0 (its status check comes
            # within 3 s of the upload even when 30 starts share two loaded workers; with
            # 1.5 s jobs a slow start saw every job done there and no callback was needed);
            # attempt 1 is due 2.5-5 s after the park, so for most documents the callback at
            # 3 s comes first and for the rest a sweep ends them
            started = await asyncio.gather(
                *(start_document(client, f"d-{i}", pages=6) for i in range(DOCUMENTS))
            )
            assert [r.status_code for r in started] == [202] * DOCUMENTS
            ids = [r.json()["instanceId"] for r in started]
            views = [await wait_for_state(client, i, timeout=30) for i in ids]
        output = server.output()

    errors = [v["error"] for v in views if v["error"]]
    assert [v["state"] for v in views] == ["completed"] * DOCUMENTS, errors[:3]
    assert "Traceback" not in output, output[-3000:]
    signalled = sum(
        1
        for v in views
        for r in v["journal"]
        if (r["kind"], r["capabilityId"]) == ("signal", "ocr.completed")
    )
    if callbacks == "true":  # the fakes process reached the workers at the serve URL
        assert signalled > 0, output[-3000:]
    else:
        assert signalled == 0
    found = re.search(r"info: .*flowpark fakes.* on (http://127\.0\.0\.1:\d+)", output)
    assert found, output[-3000:]
    assert "warning: with --workers" not in output
    # serve stopped the fakes process it started
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{found.group(1)}/healthz", timeout=2)
