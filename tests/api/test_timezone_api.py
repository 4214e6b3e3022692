"""The server in ``TZ=Asia/Tokyo`` stores and serves the same UTC instants as anywhere else:
API instants carry ``Z`` and match the real UTC time, raw SQLite columns hold naive UTC, the
poll's wake is the backoff after attempt 0 (not 9 h off) and the parked document resumes
when it is due."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from flowpark.samples.document_processing import Waits
from tests.support.api import instant, start_document, wait_for_state
from tests.support.db import query
from tests.support.eventually import eventually
from tests.support.server import serve_subprocess

ZONE = "Asia/Tokyo"
ZONE_OFFSET = 9 * 3600
FIRST_WAIT = (Waits.OCR_POLLING.initial * (1 - Waits.OCR_POLLING.jitter), Waits.OCR_POLLING.initial)
#: clock agreement between this process and the server (same machine)
SLACK = timedelta(seconds=2)


def _raw_instant(value: str) -> datetime:
    """A SQLite instant column: naive UTC text (``YYYY-MM-DD HH:MM:SS.ffffff``)."""
    parsed = datetime.fromisoformat(value)
    assert parsed.tzinfo is None, f"stored with an offset: {value}"
    return parsed.replace(tzinfo=UTC)


def test_the_zone_is_really_applied_to_child_processes() -> None:
    # without tzdata TZ=Asia/Tokyo silently means UTC and the test below would prove nothing
    env = {**os.environ, "TZ": ZONE}
    out = subprocess.run(
        [sys.executable, "-c", "import time; print(time.localtime().tm_gmtoff)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(out.stdout) == ZONE_OFFSET


async def test_instants_are_utc_when_the_server_runs_in_tokyo(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "tokyo.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with serve_subprocess(
        url,
        tmp_path / "server.log",
        env={"TZ": ZONE},
        sample_ocr_per_page="0.25",
        timer_scan_interval="0.2",
        ocr_callbacks="false",
    ) as server:
        async with server.client() as client:

            async def healthy() -> None:
                assert server.process.poll() is None, server.output()
                try:
                    resp = await client.get("/healthz")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not up yet: {exc!r}") from exc
                assert resp.status_code == 200

            await eventually(healthy, timeout=30, interval=0.1, what="flowpark serve is up")

            before = datetime.now(UTC)
            # 2 pages x 0.25 s: attempt 0 sees "pending", attempt 1 (2.5-5 s later) completes
            resp = await start_document(client, "tokyo-doc", pages=2)
            after = datetime.now(UTC)
            assert resp.status_code == 202, resp.text
            instance_id = resp.json()["instanceId"]
            parked = (await client.get(f"/api/v1/instances/{instance_id}")).json()

            assert parked["state"] == "suspended"
            created = instant(parked["createdAt"])
            assert before - SLACK <= created <= after + SLACK
            assert before - SLACK <= instant(parked["updatedAt"]) <= after + SLACK
            assert instant(parked["deadlineAt"]) == created + Waits.DEADLINE
            attempt0 = next(r for r in parked["journal"] if r["capabilityId"] == "ocr.status")
            wake_at = instant(parked["wakeAt"])
            low, high = FIRST_WAIT
            assert wake_at - instant(attempt0["startedAt"]) >= low - timedelta(milliseconds=50)
            assert wake_at - instant(attempt0["startedAt"]) <= high + timedelta(seconds=1)
            for row in parked["journal"]:
                assert before - SLACK <= instant(row["startedAt"]) <= after + SLACK
                assert before - SLACK <= instant(row["committedAt"]) <= after + SLACK

            # what SQLite holds is the same instants, as naive UTC
            (raw,) = query(
                url,
                "SELECT created_at, updated_at, deadline_at, wake_at "
                "FROM flow_instance WHERE id = ?",
                (instance_id,),
            )
            assert [_raw_instant(v) for v in raw] == [
                created,
                instant(parked["updatedAt"]),
                instant(parked["deadlineAt"]),
                wake_at,
            ]
            # each stored row is a journal row of the same sequence (the deadlines a row
            # carries share its sequence, their instants inside it; those the instance row
            # carries from the start have sequence 0)
            steps = query(
                url,
                "SELECT sequence, started_at, committed_at FROM flow_step "
                "WHERE instance_id = ? ORDER BY sequence",
                (instance_id,),
            )
            shown = {
                (r["sequence"], instant(r["startedAt"]), instant(r["committedAt"]))
                for r in parked["journal"]
            }
            stored = {(n, _raw_instant(a), _raw_instant(b)) for n, a, b in steps}
            assert stored <= shown
            assert {r["sequence"] for r in parked["journal"]} - {0} == {n for n, _, _ in steps}
            assert all(r["kind"] == "deadline" for r in parked["journal"] if r["sequence"] == 0)

            done = await wait_for_state(client, instance_id, timeout=20)
            # (checked while serving: shutdown noise is test_runtime_shutdown's business)
            assert "Traceback" not in server.output(), server.output()[-3000:]

        assert done["state"] == "completed", done["error"]
        polls = [r for r in done["journal"] if r["capabilityId"] == "ocr.status"]
        assert [r["scope"] for r in polls] == [0, 1]
        # resumed when due: not early, and not 9 h (or a sweep's worth of hours) late
        resumed = instant(polls[1]["startedAt"])
        assert wake_at <= resumed <= wake_at + timedelta(seconds=3)
        (raw_updated,) = query(
            url, "SELECT updated_at FROM flow_instance WHERE id = ?", (instance_id,)
        )[0]
        assert abs(_raw_instant(raw_updated) - datetime.now(UTC)) < timedelta(seconds=30)
