"""The console's providers page in a real browser (Debian's Chromium, headless) against a
node served in a thread on a fixed engine clock: a provider's limit, its rate lowered by a
pushback and why, and the chart of its calls per second against the limit over the last
hour.

The page reads "the last complete minute" and the last hour from the engine clock, so the
node's clock stands still at :data:`NOW` and the tallies are seeded relative to it: what the
page shows does not depend on the wall clock's minute or on how long a loaded machine takes
between the seeding and the reading.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI
from playwright.sync_api import Page, expect

from flowpark.engine.clock import VirtualClock
from flowpark.engine.ports import GrantRequest, PushbackReport
from flowpark.engine.ports.providers import ProviderState
from flowpark.runtime.app import create_app
from flowpark.samples.registry import sample_flows
from flowpark.samples.settings import SampleSettings
from flowpark.settings import Settings
from flowpark.store import SqlStore, make_async_engine
from tests.support.server import TOKEN, LiveServer, live_server

REASON = "429 from ocr.status; Retry-After 30 s"
#: The node's engine clock, which stands still: 30 s into a minute.
NOW = datetime(2026, 12, 6, 10, 0, 30, tzinfo=UTC)


async def _seed(database: Path) -> None:
    """The ocr provider at 50 calls/s: 40/s three minutes before :data:`NOW`, 50/s two
    minutes before, 20/s and a pushback in the last complete minute (the effective rate
    halves)."""
    engine = make_async_engine(f"sqlite:///{database}")
    try:
        limits = SqlStore(engine).providers
        minute = NOW.replace(second=0, microsecond=0)
        state = ProviderState("ocr", 50, 5, None, 50, None, None, 0, NOW, "declared")
        await limits.declare([state], NOW)
        for back, ok, pushback in ((3, 2400, 0), (2, 3000, 0), (1, 1170, 30)):
            at = minute - timedelta(minutes=back) + timedelta(seconds=1)
            await limits.grant(GrantRequest("ocr", "n-1", 1, at, ok=ok, pushback=pushback))
        await limits.pushback(PushbackReport("ocr", NOW, NOW + timedelta(seconds=30), REASON))
    finally:
        await engine.dispose()


def _on_the_fixed_clock(settings: Settings, sample: SampleSettings) -> FastAPI:
    """The samples' node with its engine clock standing at :data:`NOW`."""
    return create_app(settings, clock=VirtualClock(NOW), flows=[sample_flows(sample)])


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    database = tmp_path_factory.mktemp("providers-browser") / "flowpark.db"
    shutil.copyfile(_sqlite_template, database)
    with live_server(
        f"sqlite:///{database}", app_factory=_on_the_fixed_clock, run_sweeper=False
    ) as server:
        with ThreadPoolExecutor(1) as seeding:  # a loop of its own, off the fixture's
            seeding.submit(asyncio.run, _seed(database)).result()
        yield server


@pytest.mark.slow
def test_an_operator_sees_the_calls_against_the_limit_and_why_it_was_lowered(
    page: Page, seeded: LiveServer
) -> None:
    base = seeded.base_url
    page.goto(f"{base}/ui/providers")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base}/ui/providers")
    page.get_by_role("link", name="Providers").click()
    ocr = page.locator('section[data-provider="ocr"]')
    expect(ocr.get_by_test_id("limit")).to_contain_text("50 calls/s, burst 5")
    expect(ocr.get_by_test_id("effective")).to_contain_text("25 calls/s")
    expect(ocr.get_by_test_id("lowered")).to_contain_text(REASON)
    expect(ocr.get_by_test_id("last-minute")).to_contain_text("1170 ok, 30 pushback")

    chart = ocr.get_by_test_id("calls-chart")
    expect(chart).to_be_visible()
    bars = chart.locator("rect.bar")
    expect(bars).to_have_count(3)
    assert chart.locator("rect.bar.pushback").count() == 1
    # the minute at 50 calls/s reaches the limit line; the one at 40/s stays below it
    limit_y = float(chart.get_by_test_id("limit-line").get_attribute("y1") or "nan")
    tops = sorted(float(bars.nth(i).get_attribute("y") or "nan") for i in range(3))
    assert tops[0] == pytest.approx(limit_y, abs=0.2)
    assert tops[1] > limit_y + 10
    effective_y = float(chart.get_by_test_id("effective-line").get_attribute("y1") or "nan")
    assert effective_y > limit_y  # 25/s is drawn lower than 50/s
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 60
    assert "calls per second" in (chart.get_attribute("aria-label") or "")
    # the legend says what the amber bars are, drawn in the bars' own colour
    legend = ocr.get_by_test_id("calls-legend")
    expect(legend).to_be_visible()
    pushback = legend.get_by_test_id("legend-pushback")
    expect(pushback).to_be_visible()
    expect(pushback).to_contain_text("pushback")
    amber = chart.locator("rect.bar.pushback").evaluate("e => getComputedStyle(e).fill")
    swatch = pushback.locator(".swatch").evaluate("e => getComputedStyle(e).backgroundColor")
    assert amber == swatch, (amber, swatch)
    expect(legend).to_contain_text("limit")
    expect(legend).to_contain_text("effective rate")

    # the flows page names each flow's providers, linked to this page
    page.get_by_role("link", name="Flows").click()
    row = page.locator("tr", has=page.get_by_role("link", name="document.process"))
    row.get_by_role("link", name="ocr").click()
    expect(page).to_have_url(f"{base}/ui/providers#ocr")
    expect(page.locator("section#ocr")).to_be_visible()
