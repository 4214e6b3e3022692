"""The overview's figures, from the store (both stores) and on the page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx

from flowpark.store.db import make_async_engine
from flowpark.store.sql_store import SqlStore
from flowpark.ui.overview import percentile
from tests.support.seed import Seeded, seed_console_data


async def test_flow_activity_counts_each_state_per_flow_version(store_url: str) -> None:
    now = datetime.now(UTC)
    seeded = await seed_console_data(store_url, now=now)
    db = make_async_engine(store_url)
    try:
        journal = SqlStore(db)
        activity = await journal.reads.flow_activity(
            now,
            overdue=timedelta(seconds=5),
            due_within=timedelta(minutes=1),
            since=now - timedelta(hours=1),
        )
        by = {(a.flow_name, a.flow_version): a for a in activity}
        docs = by[("document.process", "1.0.0")]
        assert (docs.running, docs.stuck) == (1, 1)
        assert docs.suspended == len(seeded.overdue) + len(seeded.parked)
        assert docs.overdue == len(seeded.overdue)
        assert docs.due_soon == len(seeded.parked)  # due within the minute, not yet late
        assert (docs.completed_recently, docs.failed_recently) == (1, 1)
        assert len(docs.failures) == 1 and docs.failures[0][1] == 1
        assert by[("document.process", "0.1.0")].suspended == 1
        assert by[("t.poll", "1.0.0")].suspended == 1

        # an hour later nothing ended "recently"
        later = await journal.reads.flow_activity(
            now + timedelta(hours=2),
            overdue=timedelta(seconds=5),
            due_within=timedelta(minutes=1),
            since=now + timedelta(hours=1),
        )
        assert all(a.completed_recently == a.failed_recently == 0 for a in later)

        waiting = {
            (w.flow_version, w.step_id): w.count
            for w in await journal.reads.waiting_by_step("document.process")
        }
        assert waiting[("1.0.0", 1)] == len(seeded.overdue) + len(seeded.parked)

        starts = await journal.reads.attempt_starts(now - timedelta(hours=1))
        second = [s for s in starts if s.instance_id == seeded.overdue[0]]
        assert len(second) == 1 and second[0].scope == 1
        assert second[0].previous_committed_at is not None
        assert second[0].first_started_at is not None
        assert second[0].first_started_at <= second[0].previous_committed_at <= second[0].started_at
    finally:
        await db.dispose()


def test_percentiles_are_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0], 0.99) == 3.0
    values = [float(n) for n in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0


def _row(html: str, flow: str, version: str) -> str:
    match = re.search(
        rf'<tr data-flow="{re.escape(flow)}" data-version="{re.escape(version)}">(.*?)</tr>',
        html,
        re.S,
    )
    assert match, f"no row for {flow} {version}"
    return match.group(1)


async def test_the_overview_page_shows_each_flow_version(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await signed_in.get("/ui")
    assert page.status_code == 200
    docs = _row(page.text, "document.process", "1.0.0")
    assert f'overdue=1">{len(seeded.overdue)}</a>' in docs
    assert 'stuck=1">1</a>' in docs
    assert 'state=failed">1</a>' in docs
    assert "error_code=" in docs  # failures by code link to the filtered list
    assert "(not on this node)" in _row(page.text, "document.process", "0.1.0")
    assert "(not on this node)" in _row(page.text, "t.poll", "1.0.0")
    assert "(not on this node)" not in docs
    assert _row(page.text, "job.await", "1.0.0")  # registered here, no instances


async def test_the_flow_page_draws_the_waiting_counts(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await signed_in.get("/ui/flows/document.process/1.0.0")
    assert page.status_code == 200
    parked = len(seeded.overdue) + len(seeded.parked)
    assert (
        f'data-box="1" data-kind="poll" data-title="poll ocr.status" data-waiting="{parked}"'
        in page.text
    )
    # the steps that call a provider say which, on the box
    for box in ("0", "2", "5", "comp-0"):
        assert re.search(rf'data-box="{box}"[^>]*data-provider="ocr"', page.text), box
        assert f'data-testid="provider-{box}"' in page.text
    assert page.text.count(">calls ocr</text>") == 4
    assert not re.search(r'data-box="1"[^>]*data-provider=', page.text)  # the poll itself
    missing = await signed_in.get("/ui/flows/document.process/0.1.0")
    assert missing.status_code == 404 and 'data-code="flow_not_found"' in missing.text


async def test_step_activity_places_running_completed_and_failed_instances(store_url: str) -> None:
    now = datetime.now(UTC)
    await seed_console_data(store_url, now=now)
    db = make_async_engine(store_url)
    try:
        reads = SqlStore(db).reads
        got = await reads.step_activity("document.process", "1.0.0", now - timedelta(hours=1))
        assert got.completed == 1
        assert sum(got.failed.values()) == 1
        assert sum(got.running.values()) >= 1  # a run placed by the step it runs or resumed at
        assert all(isinstance(step, int) and step >= 0 for step in [*got.failed, *got.running])
        later = await reads.step_activity("document.process", "1.0.0", now + timedelta(hours=1))
        assert later.completed == 0 and later.failed == {}
        assert (await reads.step_activity("nope", "1.0.0", now)).running == {}
    finally:
        await db.dispose()


async def test_flow_activity_counts_recently_cancelled_instances(store_url: str) -> None:
    from flowpark.testing import FlowHarness, Scripted
    from tests.engine.flows import Job, await_flow

    subs = {"t.start": Scripted(Job(job_id="j")), "t.undo": Scripted(None)}
    async with FlowHarness.open(
        [await_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        started = await h.start("t.await", {"order_id": "o-c"})
        await h.engine.cancel(started.instance.id)
        now = h.clock.now()
        [activity] = await h.store.reads.flow_activity(
            now,
            overdue=timedelta(seconds=5),
            due_within=timedelta(minutes=1),
            since=now - timedelta(hours=1),
        )
        assert activity.cancelled_recently == 1 and activity.failed_recently == 0
