"""The browser-test set-up itself: Debian's Chromium, driven by Playwright, reaches a real
server process."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Browser, Page

from tests.support.server import SubprocessServer


@pytest.mark.slow
def test_chromium_reads_a_real_server(
    browser: Browser, page: Page, server: SubprocessServer
) -> None:
    assert "HeadlessChrome" in page.evaluate("navigator.userAgent")
    assert browser.version.split(".")[0].isdigit()

    response = page.goto(f"{server.base_url}/healthz")

    assert response is not None and response.status == 200
    health = json.loads(page.inner_text("body"))
    assert health["status"] == "ok"
    assert health["node"]  # the node's id, from the child's settings
