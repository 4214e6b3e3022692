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
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.db import CONNECT_TIMEOUT_SECONDS, STORE_WAIT_SECONDS, make_async_engine
from tests.e2e.test_multinode import Cluster, Proc, documents, report, rows, states
from tests.support.eventually import eventually
from tests.support.own_postgres import own_postgres
from tests.support.server import TOKEN, flowpark_command

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CRASH_DOCUMENTS = 300
CRASH_LOOP_SECONDS = 30.0
KILL_EVERY = 3.0  # seconds between kills
UPLOAD_TRIES = 15  # the most tries ocr.upload's 3 minutes allow (waits 2, 4, 8, then 15 s)
STALL_AT = 1.0  # seconds after the last start is answered the provider stops (SIGSTOP)
STALL_SECONDS = 30.0
#: pages of each document in the stall test: 20 s of OCR at 0.5 s a page, so the stall
#: comes while every document waits for its job: its poll's first attempts (2.5 to 15 s
#: after its start) call the provider in the stall's first half
STALL_PAGES = 40
#: the stall test's crash loop, from the last start on: nodes are killed during the stall
#: and after it, less often than in the crash loop (a killed node takes up to 9 s to be
#: back on this machine: killed every 3 s, the nodes would be down for most of the stall,
#: and few calls would meet it)
STALL_LOOP_SECONDS = 40.0
STALL_KILL_EVERY = 8.0
#: each OCR call's timeout in the stall test (seconds): three tries of a count-only policy
#: (1 s, 2 s wait, 1 s, 4 s wait, 1 s) are over in 9 s, well inside the stall
STALL_CALL_TIMEOUT = 1.0
#: runs per node in the stall test: each try the stall holds takes a run slot for the call
#: timeout, so the nodes keep trying as fast as the retry policies say
STALL_CONCURRENCY = 16
COUNT_ONLY_TRIES = 3  # the tries of the count-only policies the samples had before
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
        "SELECT instance_id, count(*) FROM outbox_event GROUP BY instance_id HAVING count(*) > 1",
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
    pg_url: str, tmp_path: Path
) -> None:
    subprocess.run(
        [*flowpark_command(), "db", "upgrade", "--url", pg_url],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = Cluster(pg_url, tmp_path)
    db = make_async_engine(pg_url, pool_size=2)
    try:
        await _crash_loop(cluster, db)
    finally:
        await db.dispose()
        cluster.stop_all()


@pytest.mark.timeout(180)
async def test_a_provider_stalled_for_30_s_in_a_crash_loop_fails_no_document(
    pg_url: str, tmp_path: Path
) -> None:
    """The fakes process is stopped (SIGSTOP) for 30 s in the middle of a run of 300
    documents, while nodes are killed: every call in flight times out, the retry policies
    (3 minutes, durable waits) ride it out, every document completes.

    Each call times out after 1 s here, so the stall outlasts what three quick tries ride
    out: a count-only policy of 3 tries fails the executions caught by the stall (their
    documents end failed), and the test checks that some execution did need more than
    three tries to succeed."""
    subprocess.run(
        [*flowpark_command(), "db", "upgrade", "--url", pg_url],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = Cluster(
        pg_url,
        tmp_path,
        node_settings={
            "sample_ocr_call_timeout_seconds": str(STALL_CALL_TIMEOUT),
            "concurrency": str(STALL_CONCURRENCY),
        },
    )
    db = make_async_engine(pg_url, pool_size=2)
    try:
        await _crash_loop(
            cluster,
            db,
            stall=(STALL_AT, STALL_SECONDS),
            pages=STALL_PAGES,
            loop_seconds=STALL_LOOP_SECONDS,
            kill_every=STALL_KILL_EVERY,
        )
        # the stall was long enough to matter: executions that only a time-bounded policy
        # saves (their success came after more tries than a count-only policy allows)
        ((saved, most),) = await rows(
            db,
            "SELECT count(*), coalesce(max(try_number), 0) FROM flow_step "
            "WHERE kind = 'step' AND outcome = 'success' AND try_number > :tries",
            tries=COUNT_ONLY_TRIES,
        )
        ((failed_tries,),) = await rows(
            db, "SELECT count(*) FROM flow_step WHERE kind = 'step' AND outcome = 'failure'"
        )
        by_try = await rows(
            db,
            "SELECT capability_id, try_number, outcome, count(*) FROM flow_step "
            "WHERE kind = 'step' AND try_number > 1 GROUP BY 1, 2, 3 ORDER BY 1, 2, 3",
        )
        report(
            "stall beyond three tries",
            executions=saved,
            most_tries=most,
            failed=failed_tries,
            retried=" ".join(f"{c}#{t}:{o}={n}" for c, t, o, n in by_try),
        )
        assert saved > 0, "no execution needed more than three tries: the stall proved nothing"
    finally:
        await db.dispose()
        cluster.stop_all()


async def _stall(fakes: Proc, after: float, seconds: float) -> float:
    """SIGSTOP the fakes ``after`` seconds from now, SIGCONT them ``seconds`` later;
    answers how long they were stopped."""
    assert fakes.process is not None
    await asyncio.sleep(after)
    fakes.process.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        await asyncio.sleep(seconds)
    finally:
        fakes.process.send_signal(signal.SIGCONT)
    return time.monotonic() - stopped


async def _crash_loop(
    cluster: Cluster,
    db: AsyncEngine,
    stall: tuple[float, float] | None = None,
    pages: int = 2,
    loop_seconds: float = CRASH_LOOP_SECONDS,
    kill_every: float = KILL_EVERY,
) -> None:
    fakes = await cluster.start_fakes()
    serve_a, serve_b = await cluster.start_nodes("serve-a", "serve-b")
    (worker,) = await cluster.start_nodes("worker-c", role="worker")
    victims = [serve_b, worker, serve_a]
    began = time.monotonic()
    starts = Starter([serve_a.url, serve_b.url], pages=pages)
    # the documents start while the nodes are being killed: some starts and runs are cut;
    # with a stall, they all start first, so that the stall comes while each one polls
    starting = asyncio.create_task(starts.run(documents(CRASH_DOCUMENTS, "crash")))
    stalling = None
    if stall is not None:
        await starting
        began = time.monotonic()
        stalling = asyncio.create_task(_stall(fakes, *stall))
    kills = 0
    rng = random.Random(14)
    while time.monotonic() - began < loop_seconds:
        await asyncio.sleep(kill_every * rng.uniform(0.7, 1.3))
        victim = victims[kills % len(victims)]
        if victim.alive():
            victim.kill()
        kills += 1
        victim.start()  # restarted at once (same port for a serve node)
    await starting
    stalled_s = await stalling if stalling is not None else 0.0
    loop_ended = time.monotonic()
    assert len(starts.instance_ids) == CRASH_DOCUMENTS

    async def every_document_ended() -> None:
        now = await states(db)
        assert now["completed"] + now["failed"] + now["cancelled"] == CRASH_DOCUMENTS, dict(now)

    await eventually(every_document_ended, timeout=150, interval=0.5, what="every document ended")
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
        "crash loop" + (" with a stalled provider" if stall else ""),
        documents=CRASH_DOCUMENTS,
        kills=kills,
        stalled_s=stalled_s,
        loop_s=loop_ended - began,
        drained_s=finished - loop_ended,
        uploads=stats["ocr"].get("upload", 0),
        upload_repeats=stats["ocr"].get("upload_repeat", 0),
        status_calls=stats["ocr"].get("status", 0),
        max_uploads_per_key=max(per_key.values()),
        start_repeats=starts.repeated,
    )


OUTAGE_SECONDS = 10.0
OUTAGE_DOCUMENTS = 100
#: the longest an answer may take while the database is down (docs/operating.md)
OUTAGE_ANSWER_BOUND = STORE_WAIT_SECONDS + CONNECT_TIMEOUT_SECONDS


@pytest.mark.timeout(300)
async def test_a_database_outage_answers_503_and_afterwards_every_document_completes(
    tmp_path: Path,
) -> None:
    with own_postgres() as pg:
        subprocess.run(
            [*flowpark_command(), "db", "upgrade", "--url", pg.url],
            check=True,
            capture_output=True,
            timeout=120,
        )
        nodes = Cluster(pg.url, tmp_path)
        reader = make_async_engine(pg.url, pool_size=2)
        try:
            fakes = await nodes.start_fakes()
            (serve,) = await nodes.start_nodes("serve-a")
            await nodes.start_nodes("worker-b", role="worker")
            names = documents(OUTAGE_DOCUMENTS, "outage")
            before = Starter([serve.url], pages=6)  # ~3 s of OCR: parked through the outage
            await before.run(names[: OUTAGE_DOCUMENTS // 2])

            pg.stop()
            stopped = time.monotonic()
            answers: list[tuple[str, int, str, float]] = []
            known = next(iter(before.instance_ids.values()))
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with httpx.AsyncClient(base_url=serve.url, headers=headers, timeout=60) as http:

                async def probe(index: int) -> None:
                    while time.monotonic() - stopped < OUTAGE_SECONDS:
                        document = names[OUTAGE_DOCUMENTS // 2 + index]
                        for method, call in (
                            (
                                "signal",
                                http.post(
                                    f"{DOCUMENTS}/{known}/signals/ocr.completed",
                                    json={"jobId": "outage-probe"},
                                    headers={"Idempotency-Key": f"{document}-signal"},
                                ),
                            ),
                            (
                                "start",
                                http.post(
                                    DOCUMENTS,
                                    json={"documentId": document, "pages": 2},
                                    headers={"Idempotency-Key": document},
                                ),
                            ),
                            ("read", http.get(f"/api/v1/instances/{known}")),
                        ):
                            began = time.monotonic()
                            resp = await call
                            code = (
                                resp.json().get("code", "")
                                if resp.headers.get("content-type", "").endswith("json")
                                else ""
                            )
                            answers.append(
                                (method, resp.status_code, code, time.monotonic() - began)
                            )
                        await asyncio.sleep(0.2)

                await asyncio.gather(*(probe(i) for i in range(8)))
                # readiness says what is wrong, and nothing of the driver's message
                ready = await http.get("/readyz")
            pg.start()
            restarted = time.monotonic()

            assert answers, "no request was made during the outage"
            statuses = Counter((m, s, c) for m, s, c, _ in answers)
            assert all(s == 503 and c == "store_unavailable" for _, s, c in statuses), statuses
            slowest = max(seconds for *_, seconds in answers)
            assert slowest <= OUTAGE_ANSWER_BOUND, slowest
            slowest_by = {m: max(sec for mm, _, _, sec in answers if mm == m) for m, *_ in answers}
            assert ready.status_code == 503, ready.text
            assert ready.json()["checks"]["database"] == "store_unavailable", ready.text
            for leak in ("127.0.0.1", str(pg.port), "connection", "SELECT", "psycopg"):
                assert leak not in ready.text, (leak, ready.text)

            # afterwards, with no help: the parked documents go on; the starts refused
            # during the outage are repeated (same Idempotency-Key) as a client would
            after = Starter([serve.url])
            await after.run(names[OUTAGE_DOCUMENTS // 2 :])

            async def every_document_completed() -> None:
                now = await states(reader)
                assert now == Counter({"completed": OUTAGE_DOCUMENTS}), dict(now)

            await eventually(
                every_document_completed, timeout=90, interval=0.5, what="every document done"
            )
            drained = time.monotonic()
            await _no_duplicate_rows(reader)
            jobs = await _ocr_jobs(fakes)
            assert len(jobs) == OUTAGE_DOCUMENTS and {j["status"] for j in jobs} == {"completed"}
            outputs = "".join(p.output() for p in nodes.procs)
            assert "internal_error" not in outputs, outputs[-3000:]
            # an expected outage: one warning line per kind and interval, no traceback
            assert "Traceback" not in outputs, outputs[-5000:]
            lines = Counter(
                (proc.name, line.split("store unavailable (", 1)[1].split(")", 1)[0])
                for proc in nodes.procs
                for line in proc.output().splitlines()
                if "store unavailable (" in line
            )
            assert lines, "the outage was not logged"
            per_interval = (restarted - stopped) / 10.0 + 2  # first line, then one per 10 s
            assert max(lines.values()) <= per_interval, lines
            report(
                "database outage",
                documents=OUTAGE_DOCUMENTS,
                outage_s=restarted - stopped,
                answers_during=len(answers),
                slowest_answer_s=slowest,
                slowest_signal_s=slowest_by.get("signal", 0.0),
                outage_log_lines=sum(lines.values()),
                completed_after_s=drained - restarted,
            )
        finally:
            await reader.dispose()
            nodes.stop_all()
