"""Chaos on real processes: the database stopped under load (a PostgreSQL server of the
test's own), then started again.

``flowpark fakes``, a ``flowpark serve`` and a ``flowpark worker`` node (the helpers of
:mod:`tests.e2e.cluster`); while the database is down every answer is 503
``store_unavailable`` within the documented bound, readiness says so without the driver's
words, and the outage is logged once per interval without a traceback; afterwards every
document completes with no help, no journal row twice, one OCR job per document.
Figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from flowpark.store.db import CONNECT_TIMEOUT_SECONDS, STORE_WAIT_SECONDS, make_async_engine
from tests.e2e.cluster import (
    DOCUMENTS,
    Cluster,
    Starter,
    documents,
    no_duplicate_rows,
    ocr_jobs,
    report,
    states,
)
from tests.support.eventually import eventually
from tests.support.own_postgres import own_postgres
from tests.support.server import TOKEN, flowpark_command

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


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
            await no_duplicate_rows(reader)
            jobs = await ocr_jobs(fakes)
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
