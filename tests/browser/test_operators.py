"""What an operator reads and does in the console, in a real browser (Debian's Chromium)
against ``flowpark serve`` over real documents: the nodes and the notice that nothing
sweeps overdue work."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import start_server
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
