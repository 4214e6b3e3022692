"""The console's providers page in a real browser (Debian's Chromium, headless) against
``flowpark serve`` in a child process: a provider's limit, its rate lowered by a pushback and
why, and the chart of its calls per second against the limit over the last hour."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from flowpark.engine.ports import GrantRequest, PushbackReport
from flowpark.engine.ports.providers import ProviderState
from flowpark.store import SqlStore, make_async_engine
from tests.browser.conftest import start_server
from tests.support.server import TOKEN, SubprocessServer

REASON = "429 from ocr.status; Retry-After 30 s"


async def _seed(database: Path) -> None:
    """The ocr provider at 50 calls/s: 40/s three minutes ago, 50/s two minutes ago, 20/s
    and a pushback in the last minute (the effective rate halves)."""
    engine = make_async_engine(f"sqlite:///{database}")
    try:
        limits = SqlStore(engine).providers
        now = datetime.now(UTC)
        minute = now.replace(second=0, microsecond=0)
        state = ProviderState("ocr", 50, 5, None, 50, None, None, 0, now, "declared")
        await limits.declare([state], now)
        for back, ok, pushback in ((3, 2400, 0), (2, 3000, 0), (1, 1170, 30)):
            at = minute - timedelta(minutes=back) + timedelta(seconds=1)
            await limits.grant(GrantRequest("ocr", "n-1", 1, at, ok=ok, pushback=pushback))
        await limits.pushback(PushbackReport("ocr", now, now + timedelta(seconds=30), REASON))
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
def seeded(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("providers-browser")
    with start_server(
        folder / "flowpark.db", folder / "server.log", _sqlite_template, run_sweeper="false"
    ) as server:
        with ThreadPoolExecutor(1) as seeding:  # a loop of its own, off the fixture's
            seeding.submit(asyncio.run, _seed(folder / "flowpark.db")).result()
        yield server


@pytest.mark.slow
def test_an_operator_sees_the_calls_against_the_limit_and_why_it_was_lowered(
    page: Page, seeded: SubprocessServer
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
