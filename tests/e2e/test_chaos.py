"""Chaos on real processes: nodes SIGKILLed in a loop (with the provider stalled for 30 s in
one of them). The database stopped under load is ``test_chaos_outage``.

Each test runs ``flowpark fakes`` (the fake OCR, its own process) and ``flowpark serve`` /
``flowpark worker`` nodes on PostgreSQL (the helpers of :mod:`tests.e2e.cluster`), starts
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

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.db import make_async_engine
from tests.e2e.cluster import (
    Cluster,
    Proc,
    Starter,
    documents,
    no_duplicate_rows,
    ocr_jobs,
    provider_stats,
    report,
    rows,
    states,
)
from tests.support.eventually import eventually
from tests.support.server import flowpark_command

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
    await no_duplicate_rows(db)
    jobs = await ocr_jobs(fakes)
    by_document = Counter(j["documentId"] for j in jobs)
    # one OCR job per document, however often the upload ran; none left open
    assert len(jobs) == CRASH_DOCUMENTS and set(by_document.values()) == {1}, by_document
    assert {j["status"] for j in jobs} == {"completed"}
    stats = await provider_stats(fakes)
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
