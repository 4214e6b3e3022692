"""The console in a real browser (Debian's Chromium, headless) against ``flowpark serve`` in
a child process, over real documents: parked, overdue, completed, failed.

One operator's path: sign in, filter the list to overdue, open an instance, read its
timeline and budget bar, wake it and see the next attempt appear, open the flow graph and
find every node of ``document.process``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import start_server
from tests.browser.graph_checks import graph_problems
from tests.support.console_data import Populated, populate
from tests.support.server import TOKEN, SubprocessServer

#: The node's sweep never runs (wakes stay overdue until someone wakes them); a wake is
#: overdue one second after its instant (two scan intervals).
VIEWER = "viewer-secret-1"
SETTINGS = {
    "api_tokens": f"{TOKEN},viewer:{VIEWER}:read",
    "run_sweeper": "false",
    "timer_scan_interval": "0.5",
    "sample_ocr_per_page": "60",
    "ocr_callbacks": "false",
    # a job reports RUNNING after 2 s and runs for a minute: its page is open meanwhile
    "job_queued_seconds": "2",
    "job_succeed_seconds": "60",
}


@pytest.fixture(scope="module")
def documents(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[tuple[SubprocessServer, Populated]]:
    folder = tmp_path_factory.mktemp("console-browser")
    with start_server(
        folder / "flowpark.db", folder / "server.log", _sqlite_template, **SETTINGS
    ) as server:
        yield server, populate(server.base_url, TOKEN)


def _sign_in(page: Page, base_url: str, token: str = TOKEN) -> None:
    page.goto(f"{base_url}/ui")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base_url}/ui")


@pytest.mark.slow
def test_an_operator_finds_an_overdue_document_wakes_it_and_reads_its_flow(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    problems: list[str] = []  # script errors and content-policy violations
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    _sign_in(page, server.base_url)

    # the overview counts the overdue and the failed document
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    row = page.locator('tr[data-flow="document.process"][data-version="1.0.0"]')
    expect(row).to_contain_text("document.ocr_failed")
    assert int(page.get_by_test_id("overdue-total").inner_text()) >= 1

    # the list, filtered to overdue with the form: the filter lands in the URL
    page.get_by_role("link", name="Instances").click()
    filters = page.get_by_test_id("filters")
    filters.get_by_label("overdue").check()
    filters.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/ui/instances\?.*overdue=1"))
    rows = page.locator("table[data-testid=instances] tbody tr[data-instance]")
    expect(rows.first).to_be_visible()
    listed = rows.evaluate_all("rows => rows.map(r => r.dataset.instance)")
    assert listed and set(listed) <= set(docs.parked)
    expect(rows.first.locator(".countdown")).to_contain_text("late")  # the live countdown

    # one overdue instance: its wait, budget bar and attempt timeline
    rows.first.locator("a").first.click()
    instance_id = listed[0]
    expect(page).to_have_url(f"{server.base_url}/ui/instances/{instance_id}")
    expect(page.get_by_test_id("state")).to_have_text("suspended")
    expect(page.get_by_test_id("countdown")).to_contain_text("late")
    budget = page.get_by_test_id("budget")
    expect(budget).to_be_visible()
    expect(budget.get_by_test_id("budget-end")).to_contain_text("ends 20")
    assert budget.locator(".used").evaluate("el => el.getBoundingClientRect().width") >= 0
    timeline = page.get_by_test_id("timeline")
    expect(timeline).to_be_visible()
    expect(timeline.locator('g[data-attempt="0"][data-outcome="success"]')).to_have_count(1)
    expect(timeline.locator('g[data-attempt="1"][data-outcome="next"]')).to_have_count(1)
    expect(timeline.locator('g[data-attempt="1"][data-outcome="success"]')).to_have_count(0)

    # wake now, behind its confirmation: attempt 1 runs and appears on the timeline
    page.get_by_role("link", name="Wake now").click()
    expect(page.get_by_role("heading", name="Wake now?")).to_be_visible()
    page.get_by_test_id("confirm-wake").click()
    expect(page).to_have_url(re.compile(rf"/ui/instances/{instance_id}\?done=Woken"))
    expect(page.get_by_role("status")).to_contain_text("Woken")
    expect(timeline.locator('g[data-attempt="1"][data-outcome="success"]')).to_have_count(1)
    expect(timeline.locator('g[data-attempt="2"][data-outcome="next"]')).to_have_count(1)
    attempt_1 = page.locator('details.attempt[data-attempt="1"]')
    attempt_1.locator("summary").click()
    expect(attempt_1.locator("table")).to_contain_text("success")

    # the flow graph: every node of document.process, with the poll's waiting count
    page.get_by_role("link", name="document.process@1.0.0").click()
    graph = page.get_by_test_id("flow-graph")
    expect(graph).to_be_visible()
    titles = {
        "0": "ocr.upload",
        "1": "poll ocr.status",
        "2": "ocr.status",
        "3": "document.escalate",
        "4": "fail document.not_read_in_time",
        "5": "document.extract",
        "6": "emit document.processed",
        "end": "completed",
        "comp-0": "ocr.cancel",
    }
    for key, title in titles.items():
        node = graph.locator(f'g[data-box="{key}"]')
        expect(node).to_be_visible()
        expect(node.locator("text.title")).to_have_text(title)
    waiting = int(graph.locator('g[data-box="1"]').get_attribute("data-waiting") or -1)
    assert waiting == len(docs.parked)
    for kind in ("attempt", "loop", "satisfied", "signal", "timeout", "compensation"):
        expect(graph.locator(f'g.edge[data-edge="{kind}"]')).to_have_count(1)
    assert graph_problems(graph) == []
    assert problems == []


@pytest.mark.slow
def test_sign_out_ends_the_session(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    _sign_in(page, server.base_url)
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{server.base_url}/ui/sign-in")
    page.goto(f"{server.base_url}/ui/instances")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next=%2Fui%2Finstances"))
    cookies = page.context.cookies()
    assert not [c for c in cookies if c["name"] == "flowpark_session"]


@pytest.mark.slow
def test_a_read_only_token_sees_no_action_buttons(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    _sign_in(page, server.base_url, VIEWER)
    expect(page.get_by_test_id("principal")).to_contain_text("read only")
    page.goto(f"{server.base_url}/ui/instances/{docs.parked[-1]}")
    expect(page.get_by_test_id("budget")).to_be_visible()
    expect(page.get_by_role("link", name="Wake now")).to_have_count(0)
    expect(page.get_by_role("link", name="Cancel")).to_have_count(0)
    page.goto(f"{server.base_url}/ui/instances/{docs.parked[-1]}/actions/wake")
    expect(page.get_by_role("alert")).to_contain_text("lacks the 'operate' scope")


@pytest.mark.slow
def test_an_open_instance_page_follows_the_instance_live(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    target = docs.parked[1]
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances/{target}")
    timeline = page.get_by_test_id("timeline")
    due = timeline.locator('g[data-outcome="next"]').get_attribute("data-attempt")
    assert due is not None
    # htmx (served from the package) is loaded and refreshes the page's live part
    assert page.evaluate("typeof htmx") == "object"

    # someone else wakes it through the API; the open page shows the attempt, unreloaded
    woken = httpx.post(
        f"{server.base_url}/api/v1/instances/{target}/wake",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert woken.status_code == 200 and woken.json()["woken"], woken.text
    expect(timeline.locator(f'g[data-attempt="{due}"][data-outcome="success"]')).to_have_count(1)
    assert page.url == f"{server.base_url}/ui/instances/{target}"


@pytest.mark.slow
def test_stream_messages_arrive_live_on_the_instance_page(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    api = httpx.Client(
        base_url=server.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )
    with api:
        started = api.post(
            "/api/v1/jobs", json={}, headers={"Idempotency-Key": f"job-{uuid.uuid4().hex}"}
        )
        assert started.status_code == 202, started.text
        instance_id = started.json()["instanceId"]
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/instances/{instance_id}")
        stream = page.locator('ol[data-stream="JobProgress"]')
        expect(stream).to_have_attribute("data-stream-url", re.compile(r"/streams/JobProgress"))
        expect(page.get_by_test_id("state")).to_have_text("running")
        # the job reports RUNNING after it was QUEUED: the message comes over SSE
        expect(stream.locator("li", has_text='"RUNNING"')).to_have_count(1, timeout=20_000)
        expect(stream.locator("li", has_text='"QUEUED"')).to_have_count(1)


@pytest.mark.slow
def test_the_instance_page_fits_a_phone_screen(
    browser: Browser, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    phone = browser.new_context(viewport={"width": 390, "height": 800}, locale="en-GB")
    try:
        page = phone.new_page()
        _sign_in(page, server.base_url)
        page.goto(f"{server.base_url}/ui/instances/{docs.parked[0]}")
        expect(page.get_by_test_id("state")).to_be_visible()
        facts, waiting = (p.bounding_box() for p in page.locator(".grid2 > .panel").all()[:2])
        assert facts is not None and waiting is not None
        assert waiting["y"] >= facts["y"] + facts["height"], (facts, waiting)  # stacked
        for button in page.locator("#live .actions button, #live .actions .button").all():
            box = button.bounding_box()
            assert box is not None and box["x"] + box["width"] <= 390, box
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        phone.close()


@pytest.mark.slow
def test_a_cancelled_instance_is_listed_as_cancelled_only(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.base_url, headers=auth, timeout=30) as http:
        started = http.post(
            "/api/v1/documents",
            json={"documentId": f"gone-{uuid.uuid4().hex[:8]}", "pages": 1},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        assert started.status_code == 202, started.text
        instance_id = started.json()["instanceId"]
        cancelled = http.post(f"/api/v1/instances/{instance_id}/cancel")
        assert cancelled.json()["state"] == "cancelled", cancelled.text
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances?state=cancelled")
    row = page.locator("tr", has=page.locator(f'a[href="/ui/instances/{instance_id}"]'))
    expect(row).to_contain_text("cancelled")
    expect(row).not_to_contain_text("cancel requested")  # it no longer waits for the cancel
