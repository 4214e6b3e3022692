"""What an operator reads and does in the console, in a real browser (Debian's Chromium)
against ``flowpark serve`` over real documents: the nodes and the notice that nothing
sweeps overdue work."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import start_server
from tests.browser.graph_checks import graph_problems
from tests.browser.test_console import SETTINGS
from tests.support.console_data import Populated, populate
from tests.support.server import TOKEN, SubprocessServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def documents(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[tuple[SubprocessServer, Populated]]:
    folder = tmp_path_factory.mktemp("operators-browser")
    with start_server(
        folder / "flowpark.db", folder / "server.log", _sqlite_template, **SETTINGS
    ) as server:
        yield server, populate(server.base_url, TOKEN)


def _sign_in(page: Page, base_url: str) -> None:
    page.goto(f"{base_url}/ui")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base_url}/ui")


def test_the_overview_says_no_live_node_sweeps_the_overdue_work(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    _sign_in(page, server.base_url)
    notice = page.get_by_test_id("no-sweeper")
    expect(notice).to_be_visible()
    expect(notice).to_contain_text(re.compile(r"No live sweeping node: \d+ overdue instance"))
    overdue = int(page.get_by_test_id("overdue-total").inner_text())
    assert overdue >= 1
    nodes = page.get_by_test_id("nodes-table")
    [row] = nodes.locator("tbody tr[data-node]").all()
    expect(row).to_contain_text("serve")
    expect(row.get_by_test_id("node-state")).to_have_text("live, no sweep")
    expect(row).to_contain_text("document.process@1.0.0")


def test_a_poll_shows_what_each_attempt_put(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances/{docs.parked[0]}")
    journal = page.get_by_test_id("journal")
    status_row = journal.locator("tbody tr", has_text="ocr.status").first
    expect(status_row.get_by_test_id("put")).to_contain_text("OcrStatus")
    expect(status_row.get_by_test_id("put")).to_contain_text('"status"')
    attempt_0 = page.locator('details.attempt[data-attempt="0"]')
    expect(attempt_0.locator("summary").get_by_test_id("attempt-put")).to_contain_text('"status"')


def test_a_failed_instance_shows_the_step_it_failed_at_in_the_journal_and_the_graph(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances/{docs.failed}")
    expect(page.get_by_test_id("state")).to_have_text("failed")
    failed_at = page.get_by_test_id("failed-at")
    expect(failed_at).to_contain_text("document.extract")  # it decided to fail the flow
    step = re.search(r"step (\d+)", failed_at.inner_text())
    assert step is not None
    marked = page.get_by_test_id("journal").locator("tr[data-failed-here]")
    expect(marked.first).to_have_attribute("data-step", step.group(1))
    # no live countdown on an ended instance, and no now line on its timeline
    expect(page.locator("#live .countdown")).to_have_count(0)
    expect(page.locator("svg.timeline line.now")).to_have_count(0)
    failed_at.get_by_role("link", name="in the flow graph").click()
    node = page.locator(f'svg.graph g[data-box="{step.group(1)}"]')
    expect(node).to_have_attribute("data-marked", "failed")
    expect(page.get_by_test_id("marked")).to_contain_text(f"failed at step {step.group(1)}")


def test_the_operator_history_is_on_the_instance_page_and_its_timeline(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    target = docs.parked[-1]
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances/{target}")
    expect(page.get_by_test_id("history")).to_contain_text("No operator action")
    page.get_by_role("link", name="Wake now").click()
    page.get_by_test_id("confirm-wake").click()
    expect(page).to_have_url(re.compile(rf"/ui/instances/{target}\?done=Woken"))
    row = page.get_by_test_id("history").locator('tr[data-action="wake"]')
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("actor")).to_have_text("token-1")
    expect(row).to_contain_text("woken: yes")
    mark = page.locator('svg.timeline g.action-mark[data-action="wake"]')
    expect(mark).to_have_count(1)
    expect(mark.locator("text")).to_contain_text("wake · token-1")


def test_an_operator_sends_the_signal_that_ends_a_wait(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.base_url, headers=auth, timeout=30) as http:
        document = f"signalled-{uuid.uuid4().hex[:8]}"
        started = http.post(
            "/api/v1/documents",
            json={"documentId": document, "pages": 1},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        assert started.status_code == 202, started.text
        instance_id = started.json()["instanceId"]
        job = next(
            j["jobId"] for j in http.get("/fake/ocr/jobs").json() if j["documentId"] == document
        )
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances/{instance_id}")
    expect(page.get_by_test_id("state")).to_have_text("suspended")

    # a job id that is not the document's: the wait's match refuses it, nothing ends
    page.get_by_role("link", name="Send ocr.completed").click()
    expect(page.get_by_role("heading", name="Send signal?")).to_be_visible()
    fields = page.get_by_test_id("signal-fields")
    fields.get_by_label("jobId").fill("someone-elses-job")
    page.get_by_test_id("confirm-signal").click()
    expect(page.get_by_role("status")).to_contain_text("the wait's match refused it")
    expect(page.get_by_test_id("state")).to_have_text("suspended")

    # the form asks for what the payload's schema requires, before sending anything
    page.get_by_role("link", name="Send ocr.completed").click()
    page.get_by_test_id("confirm-signal").click()
    job_field = page.get_by_test_id("signal-fields").get_by_label("jobId")
    assert job_field.evaluate("el => el.validity.valueMissing")
    expect(page.get_by_role("heading", name="Send signal?")).to_be_visible()

    with httpx.Client(base_url=server.base_url, timeout=30) as http:
        assert http.post(f"/fake/ocr/jobs/{job}/complete").status_code == 200

    page.get_by_test_id("signal-fields").get_by_label("jobId").fill(job)
    page.get_by_test_id("confirm-signal").click()
    expect(page).to_have_url(re.compile(rf"/ui/instances/{instance_id}\?done=Signal"))
    expect(page.get_by_test_id("state")).to_have_text("completed")
    history = page.get_by_test_id("history").locator('tr[data-action="signal"]')
    expect(history).to_have_count(2)
    signals = page.get_by_test_id("signals")
    expect(signals.locator("tr", has_text="someone-elses-job")).to_contain_text("refused")


def test_the_flow_graph_counts_each_steps_instances(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, docs = documents
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/flows/document.process/1.0.0")
    graph = page.get_by_test_id("flow-graph")
    poll = graph.get_by_test_id("counts-1")
    parked = int(poll.get_attribute("data-parked") or -1)
    assert parked == int(graph.locator('g[data-box="1"]').get_attribute("data-waiting") or -2)
    assert parked >= 1
    expect(poll).to_contain_text(f"{parked} parked")
    extract = graph.get_by_test_id("counts-5")  # document.extract decided the failure
    assert int(extract.get_attribute("data-failed") or 0) >= 1
    expect(extract).to_contain_text("failed")
    end = graph.get_by_test_id("counts-end")
    assert int(end.get_attribute("data-completed") or 0) >= 1
    expect(end).to_contain_text("completed")
    # every label whole and in its place: no text leaves its box, no edge label sits on a
    # box, a badge or another label, and no edge runs through a box or a label
    assert graph.locator("g.box").count() == 9
    assert graph_problems(graph) == []
    table = page.get_by_test_id("step-table")
    expect(table.locator('tr[data-box="end"]')).to_contain_text(
        end.get_attribute("data-completed") or ""
    )


def test_the_heartbeating_flows_graph_reads_cleanly_too(
    page: Page, documents: tuple[SubprocessServer, Populated]
) -> None:
    server, _ = documents
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/flows/job.await/1.0.0")
    graph = page.get_by_test_id("flow-graph")
    # job.await: start, the heartbeating wait, its on_failure block rejoining the end
    expect(graph.locator('g.edge[data-edge="failure"]')).to_have_count(1)
    expect(
        graph.locator('g.edge[data-edge="next"][data-source="2"][data-target="end"]')
    ).to_have_count(1)
    assert graph.locator("g.box").count() == 4
    assert graph_problems(graph) == []
