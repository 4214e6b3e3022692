"""SQLite under concurrent writers: 100 parallel starts while the sweep advances other
parked instances - no 5xx, no "database is locked" anywhere in the logs, exactly 100 new
instances, and every document completes."""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.api import instant, start_document
from tests.support.db import count_instances, query
from tests.support.eventually import eventually
from tests.support.server import LiveServer, live_server

BURST = 100
SEEDED = 40
#: 5 s of fake OCR: every document parks after attempt 0 (even when 40 starts queue on
#: SQLite for seconds on a loaded machine: with 2 s jobs all 40 were once done at attempt
#: 0) and is finished by the sweep at attempt 1 or 2 (due 2.5-5 s, then 5-10 s later)
PAGES = 500


@pytest.fixture
def busy_server(_sqlite_template: Path, tmp_path: Path) -> Iterator[LiveServer]:
    path = tmp_path / "busy.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(
        f"sqlite:///{path}", timer_scan_interval=0.2, sample_ocr_per_page=0.01, ocr_callbacks=False
    ) as server:
        yield server


def _log_text(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        text += "\n" + record.exc_text
    return text


async def test_100_parallel_starts_while_the_sweep_runs(
    busy_server: LiveServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    url = busy_server.database_url
    limits = httpx.Limits(max_connections=BURST + 10, max_keepalive_connections=BURST + 10)
    async with busy_server.client(timeout=120, limits=limits) as client:
        # parked documents the sweep will claim and advance during the burst
        seeded = await asyncio.gather(
            *(start_document(client, f"seed-{i}", pages=PAGES) for i in range(SEEDED))
        )
        assert [r.status_code for r in seeded] == [202] * SEEDED, [r.text for r in seeded]
        seeded_ids = [r.json()["instanceId"] for r in seeded]
        views = [(await client.get(f"/api/v1/instances/{i}")).json() for i in seeded_ids]
        # on a loaded machine an early one may already be resuming: none may have failed
        assert {v["state"] for v in views} <= {"suspended", "running", "completed"}
        wakes = sorted(instant(v["wakeAt"]) for v in views if v["wakeAt"])
        assert wakes, [(v["state"], v["journal"][-1:]) for v in views][:3]
        # start the burst once half of them are due: the rest fall due during it
        half_due = wakes[len(wakes) // 2]
        await eventually(
            lambda: datetime.now(UTC) >= half_due,
            timeout=10,
            what="half of the seeded documents are due",
        )

        prefix = f"burst-{uuid.uuid4().hex[:6]}"
        burst_started = datetime.now(UTC)
        answers = await asyncio.gather(
            *(start_document(client, f"{prefix}-{i}", pages=PAGES) for i in range(BURST)),
            return_exceptions=True,
        )
        burst_ended = datetime.now(UTC)

        failures = [a for a in answers if isinstance(a, BaseException)]
        assert not failures, failures[:3]
        statuses = [a.status_code for a in answers]  # type: ignore[union-attr]
        assert not [s for s in statuses if s >= 500], statuses
        assert statuses == [202] * BURST, [a.text for a in answers][:3]  # type: ignore[union-attr]
        assert len({a.json()["instanceId"] for a in answers}) == BURST  # type: ignore[union-attr]

        everyone = seeded_ids + [a.json()["instanceId"] for a in answers]  # type: ignore[union-attr]

        async def all_completed() -> None:
            states = query(url, "SELECT state, count(*) FROM flow_instance GROUP BY state")
            assert dict(states) == {"completed": SEEDED + BURST}, states

        await eventually(all_completed, timeout=60, interval=0.25, what="every document done")

    assert count_instances(url) == SEEDED + BURST
    assert (
        query(
            url,
            "SELECT count(*) FROM flow_instance WHERE json_extract(input, '$.documentId') LIKE ?",
            (f"{prefix}-%",),
        )[0][0]
        == BURST
    )
    assert len(everyone) == SEEDED + BURST
    # the sweep really wrote while the burst ran: some seeded attempt 1 started inside it
    resumed = query(
        url,
        "SELECT started_at FROM flow_step WHERE capability_id = 'ocr.status' "
        f"AND scope = 1 AND instance_id IN ({','.join('?' * SEEDED)})",
        tuple(seeded_ids),
    )
    resumed_at = [datetime.fromisoformat(r[0]).replace(tzinfo=UTC) for r in resumed]
    print(
        f"burst {burst_ended - burst_started}; seeded resumed during it: "
        f"{sum(burst_started <= at <= burst_ended for at in resumed_at)}"
    )
    assert any(burst_started <= at <= burst_ended for at in resumed_at), (
        burst_started,
        burst_ended,
        sorted(resumed_at)[:3],
    )

    locked = [_log_text(r) for r in caplog.records if "database is locked" in _log_text(r)]
    assert not locked, locked[:2]
    errors = [f"{r.name}: {_log_text(r)}" for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors[:2]
