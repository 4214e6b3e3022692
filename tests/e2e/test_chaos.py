"""Chaos on real processes: nodes SIGKILLed in a loop; the database stopped under load.

Each test runs ``flowpark fakes`` (the fake OCR, its own process) and ``flowpark serve`` /
``flowpark worker`` nodes on PostgreSQL (the helpers of ``test_multinode``), starts
documents over HTTP and checks what the brief promises after the chaos: every document
completes with no help, the journal holds no duplicated row, the provider created one OCR
job per document (the execution key deduplicated every re-executed upload) and no job is
left open. Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.e2e.test_multinode import (  # noqa: F401 - fixtures
    Cluster,
    Proc,
    cluster,
    db,
    documents,
    report,
    rows,
    states,
)
from tests.support.eventually import eventually
from tests.support.server import TOKEN

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CRASH_DOCUMENTS = 300
CRASH_LOOP_SECONDS = 30.0
KILL_EVERY = 3.0  # seconds between kills
UPLOAD_TRIES = 6  # ocr.upload's maximum_attempts
DOCUMENTS = "/api/v1/documents"


async def _no_duplicate_rows(db: AsyncEngine) -> None:
    repeated = await rows(
        db,
        "SELECT instance_id, step_id, scope, kind, try_number, count(*) FROM flow_step "
        "GROUP BY instance_id, step_id, scope, kind, try_number HAVING count(*) > 1",
    )
    assert repeated == [], repeated[:10]
    events = await rows(
        db,
        "SELECT instance_id, count(*) FROM outbox_event GROUP BY instance_id "
        "HAVING count(*) > 1",
    )
    assert events == [], events[:10]


class Starter:
    """Starts documents over HTTP on any serve node; a start no node answers (all being
    restarted) is repeated, with the same Idempotency-Key and body, until one does."""

    def __init__(self, urls: list[str], pages: int = 2, clients: int = 16) -> None:
        self.urls = urls
        self.pages = pages
        self.gate = asyncio.Semaphore(clients)
        self.instance_ids: dict[str, str] = {}
        self.repeated = 0
        self.answers: Counter[int] = Counter()

    async def run(self, names: list[str], within: float = 90.0) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:

            async def start(index: int, document: str) -> None:
                deadline = time.monotonic() + within
                turn = index
                async with self.gate:
                    while True:
                        url = self.urls[turn % len(self.urls)] + DOCUMENTS
                        turn += 1
                        try:
                            resp = await http.post(
                                url,
                                json={"documentId": document, "pages": self.pages},
                                headers={"Idempotency-Key": document},
                            )
                        except httpx.TransportError:
                            resp = None
                        if resp is not None:
                            self.answers[resp.status_code] += 1
                            assert resp.status_code in (200, 202, 503), resp.text
                            if resp.status_code != 503:
                                self.instance_ids[document] = resp.json()["instanceId"]
                                return
                        self.repeated += 1
                        assert time.monotonic() < deadline, f"no node started {document}"
                        await asyncio.sleep(0.2)

            await asyncio.gather(*(start(i, d) for i, d in enumerate(names)))


async def _ocr_jobs(fakes: Proc) -> list[dict[str, str]]:
    async with httpx.AsyncClient(base_url=fakes.url, timeout=30) as http:
        resp = await http.get("/fake/ocr/jobs")
        assert resp.status_code == 200, resp.text
        return list(resp.json())


async def _stats(fakes: Proc) -> dict[str, dict[str, int]]:
    async with httpx.AsyncClient(base_url=fakes.url, timeout=30) as http:
        resp = await http.get("/fake/stats")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())


@pytest.mark.timeout(300)
async def test_a_crash_loop_loses_no_document_and_creates_no_second_job(
    cluster: Cluster, db: AsyncEngine
) -> None:
    fakes = await cluster.start_fakes()
    serve_a, serve_b = await cluster.start_nodes("serve-a", "serve-b")
    (worker,) = await cluster.start_nodes("worker-c", role="worker")
    victims = [serve_b, worker, serve_a]
    began = time.monotonic()
    starts = Starter([serve_a.url, serve_b.url])
    # the documents start while the nodes are being killed: some starts and runs are cut
    starting = asyncio.create_task(starts.run(documents(CRASH_DOCUMENTS, "crash")))
    kills = 0
    rng = random.Random(14)
    while time.monotonic() - began < CRASH_LOOP_SECONDS:
        await asyncio.sleep(KILL_EVERY * rng.uniform(0.7, 1.3))
        victim = victims[kills % len(victims)]
        if victim.alive():
            victim.kill()
        kills += 1
        victim.start()  # restarted at once (same port for a serve node)
    await starting
    loop_ended = time.monotonic()
    assert len(starts.instance_ids) == CRASH_DOCUMENTS

    async def every_document_ended() -> None:
        now = await states(db)
        assert now["completed"] + now["failed"] + now["cancelled"] == CRASH_DOCUMENTS, dict(now)

    await eventually(every_document_ended, timeout=120, interval=0.5, what="every document ended")
    finished = time.monotonic()
    assert await states(db) == Counter({"completed": CRASH_DOCUMENTS})
    await _no_duplicate_rows(db)
    jobs = await _ocr_jobs(fakes)
    by_document = Counter(j["documentId"] for j in jobs)
    # one OCR job per document, however often the upload ran; none left open
    assert len(jobs) == CRASH_DOCUMENTS and set(by_document.values()) == {1}, by_document
    assert {j["status"] for j in jobs} == {"completed"}
    stats = await _stats(fakes)
    per_key = stats["ocrUploadsByKey"]
    assert len(per_key) == CRASH_DOCUMENTS
    # the at-least-once rule: an execution reaches the provider at most once per try
    # its retry policy allows plus once per run of it cut short (a kill)
    assert max(per_key.values()) <= UPLOAD_TRIES + kills, max(per_key.values())
    report(
        "crash loop",
        documents=CRASH_DOCUMENTS,
        kills=kills,
        loop_s=loop_ended - began,
        drained_s=finished - loop_ended,
        uploads=stats["ocr"].get("upload", 0),
        upload_repeats=stats["ocr"].get("upload_repeat", 0),
        status_calls=stats["ocr"].get("status", 0),
        max_uploads_per_key=max(per_key.values()),
        start_repeats=starts.repeated,
    )
