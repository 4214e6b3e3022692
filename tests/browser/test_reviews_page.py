"""The review queue in a real browser: a document whose OCR budget ran out (its escalation
asked for a review) is found on ``/ui/reviews``, claimed and resolved there by form posts,
and the change shows on the list, the review's page and the instance's page; the page fits a
390 px phone screen (its table scrolls, the page does not)."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from flowpark.engine.records import InstanceState
from flowpark.samples.document_processing import (
    NOT_READ_IN_TIME,
    OcrClient,
    OcrJob,
    OcrStatus,
    build_document_flow,
)
from flowpark.testing import FlowHarness, Scripted
from tests.browser.conftest import start_server
from tests.support.server import TOKEN, SubprocessServer

pytestmark = pytest.mark.slow

DOC = "doc-review-42"
#: a second document's review, left open for the phone's test
PHONE_DOC = "doc-phone-7"


async def _timed_out_document(database_url: str, doc: str = DOC, hours_ago: float = 5) -> str:
    """A document whose OCR never finishes, run on the virtual clock (from ``hours_ago``)
    until its budget ran out: it failed and asked for a review. (Another document runs from
    after the one before it ended: the provider's shared slots are as that run left them.)"""
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))
    pending = OcrStatus(job_id="job-1", status="pending")
    subs = {
        "ocr.upload": Scripted(OcrJob(job_id="job-1")),
        "ocr.status": Scripted(pending),
        "ocr.cancel": Scripted(None),
    }
    start = datetime.now(UTC) - timedelta(hours=hours_ago)
    async with FlowHarness.open(
        [flow], database_url=database_url, substitutes=subs, start=start, migrate=False
    ) as h:
        inst = (await h.start("document.process", {"documentId": doc, "pages": 1})).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == NOT_READ_IN_TIME
        return inst.id


@pytest.fixture(scope="module")
def reviewed(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[tuple[SubprocessServer, str]]:
    folder = tmp_path_factory.mktemp("reviews")
    seeded = folder / "seeded.db"
    shutil.copyfile(_sqlite_template, seeded)
    # in a thread of its own: Playwright's sync API runs an event loop on this one
    with ThreadPoolExecutor(1) as pool:
        instance_id = pool.submit(asyncio.run, _timed_out_document(f"sqlite:///{seeded}")).result()
        phone = _timed_out_document(f"sqlite:///{seeded}", PHONE_DOC, hours_ago=2.5)
        pool.submit(asyncio.run, phone).result()
    with start_server(folder / "flowpark.db", folder / "server.log", seeded) as server:
        yield server, instance_id


def _sign_in(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/ui")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base_url}/ui")


def test_a_person_finds_claims_and_resolves_a_review(
    page: Page, reviewed: tuple[SubprocessServer, str]
) -> None:
    server, instance_id = reviewed
    _sign_in(page, server.base_url)
    me = page.get_by_test_id("principal").inner_text().split(" (")[0].strip()
    expect(page.get_by_test_id("reviews-waiting")).to_have_text("2")  # this one, the phone's

    page.get_by_role("link", name="Reviews", exact=True).click()
    row = page.locator("tr[data-review]", has_text=DOC)
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("review-state")).to_have_text("open")
    expect(row).to_contain_text("OCR did not finish within")
    expect(row.get_by_test_id("instance-link")).to_have_attribute(
        "href", f"/ui/instances/{instance_id}"
    )

    row.get_by_test_id("claim").click()
    expect(page).to_have_url(re.compile(r"/ui/reviews\?done="))
    expect(page.get_by_role("status")).to_contain_text(f"Claimed by {me}: {DOC}.")
    row = page.locator("tr[data-review]", has_text=DOC)
    expect(row.get_by_test_id("review-state")).to_have_text("claimed")
    expect(row.get_by_test_id("who")).to_contain_text(f"claimed by {me}")

    row.get_by_test_id("note").fill("uploaded the scan again by hand")
    row.get_by_test_id("resolve").click()
    expect(page.get_by_role("status")).to_contain_text(f"Resolved by {me}")
    # resolved: gone from the default list (open or claimed), listed with state=resolved
    expect(page.locator("tr[data-review]", has_text=DOC)).to_have_count(0)
    page.goto(f"{server.base_url}/ui/reviews?state=resolved")
    row = page.locator("tr[data-review]", has_text=DOC)
    expect(row.get_by_test_id("review-state")).to_have_text("resolved")
    expect(row.get_by_test_id("who")).to_contain_text(f"resolved by {me}")
    expect(row.get_by_test_id("who")).to_contain_text("uploaded the scan again by hand")
    expect(row.get_by_test_id("review-forms")).to_have_count(0)

    row.get_by_test_id("subject").click()
    expect(page.get_by_test_id("review-note")).to_have_text("uploaded the scan again by hand")
    expect(page.get_by_test_id("closed")).to_contain_text(f"by {me}")
    page.get_by_test_id("instance-link").click()
    expect(page).to_have_url(f"{server.base_url}/ui/instances/{instance_id}")
    panel = page.get_by_test_id("instance-reviews")
    expect(panel.get_by_test_id("review-state")).to_have_text("resolved")
    expect(page.get_by_test_id("journal-review")).to_have_count(1)


def _inside(page: Page, locator: Locator, width: int = 390) -> None:
    """``locator`` is on the screen, within its width (no sideways scroll to reach it)."""
    box = locator.bounding_box()
    assert box is not None, locator
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (locator, box)
    expect(locator).to_be_in_viewport()


def test_the_review_actions_are_on_a_phone_screen(
    browser: Browser, reviewed: tuple[SubprocessServer, str]
) -> None:
    server, _ = reviewed
    phone = browser.new_context(viewport={"width": 390, "height": 800}, locale="en-GB")
    try:
        page = phone.new_page()
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/reviews")
        row = page.locator("tr[data-review]", has_text=PHONE_DOC)
        expect(row).to_have_count(1)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        # one card per review, each cell under its column's name: nothing to scroll to
        table = page.get_by_test_id("reviews")
        assert table.evaluate("t => t.scrollWidth <= t.clientWidth + 1")
        for action in ("claim", "note", "resolve", "dismiss"):
            found = row.get_by_test_id(action)
            found.scroll_into_view_if_needed()
            _inside(page, found)
        row.get_by_test_id("claim").click()
        expect(page.get_by_role("status")).to_contain_text(f"{PHONE_DOC}.")
        row = page.locator("tr[data-review]", has_text=PHONE_DOC)
        expect(row.get_by_test_id("review-state")).to_have_text("claimed")
        resolve = row.get_by_test_id("resolve")
        resolve.scroll_into_view_if_needed()
        _inside(page, resolve)
        # the review's own page: its actions fit too
        row.get_by_test_id("subject").click()
        _inside(page, page.get_by_test_id("resolve"))
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        phone.close()


def test_a_table_wider_than_a_phone_says_it_scrolls(
    browser: Browser, reviewed: tuple[SubprocessServer, str]
) -> None:
    server, _ = reviewed
    phone = browser.new_context(viewport={"width": 390, "height": 800}, locale="en-GB")
    try:
        page = phone.new_page()
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/instances")
        table = page.get_by_test_id("instances")
        expect(table.locator("tbody tr").first).to_be_visible()
        # it scrolls sideways inside its box, and shows it: a line above, a shadow at its edge
        assert table.evaluate("t => t.scrollWidth > t.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        hint = page.locator("p.scroll-hint + table[data-testid='instances']")
        expect(hint).to_have_count(1)
        line = page.locator("p.scroll-hint:has(+ table[data-testid='instances'])")
        expect(line).to_be_visible()
        expect(line).to_contain_text("scroll sideways")
        _inside(page, line)
        shadow = table.evaluate("t => getComputedStyle(t).backgroundImage")
        assert "radial-gradient" in shadow, shadow
    finally:
        phone.close()
    # on a wide screen the same table fits: no line
    wide = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-GB")
    try:
        page = wide.new_page()
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/instances")
        expect(page.get_by_test_id("instances").locator("tbody tr").first).to_be_visible()
        expect(page.locator("p.scroll-hint:visible")).to_have_count(0)
    finally:
        wide.close()


def test_the_timeline_and_the_graph_scroll_rather_than_shrink_at_390_px(
    browser: Browser, reviewed: tuple[SubprocessServer, str]
) -> None:
    server, instance_id = reviewed
    phone = browser.new_context(viewport={"width": 390, "height": 800}, locale="en-GB")
    try:
        page = phone.new_page()
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/instances/{instance_id}")
        timeline = page.get_by_test_id("timeline")
        expect(timeline).to_be_visible()
        box = timeline.bounding_box()
        assert box is not None and box["width"] >= 640, box  # readable: not shrunk to 390
        scroller = page.get_by_test_id("timeline-scroll")
        assert scroller.evaluate("e => e.scrollWidth > e.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.goto(f"{server.base_url}/ui/flows/document.process/1.0.0")
        graph = page.get_by_test_id("flow-graph")
        declared = float(graph.get_attribute("width") or 0)
        shown = graph.bounding_box()
        assert shown is not None and abs(shown["width"] - declared) < 1, (shown, declared)
        assert page.get_by_test_id("graph-scroll").evaluate("e => e.scrollWidth > e.clientWidth")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        phone.close()
