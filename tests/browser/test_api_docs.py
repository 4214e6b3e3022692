"""The API's documentation pages in a real browser with no network beyond the node: Swagger
UI lists the operations and its Authorize button works (a "Try it out" with the token
answers 200); ReDoc renders the operations too, with no image from elsewhere and an intro
that says how to authenticate. Every request the pages make goes to the node itself: any
other is blocked and fails the test, and so does a request the page's CSP refuses (it never
reaches the network, so only the page sees it)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import BrowserContext, Page, Route, expect

from tests.support.server import TOKEN, SubprocessServer

#: Records, in the page, every request its Content-Security-Policy refused.
CSP_WATCH = """
window.__refused = [];
document.addEventListener("securitypolicyviolation", (e) => window.__refused.push(e.blockedURI));
"""


@pytest.fixture
def offline(context: BrowserContext, server: SubprocessServer) -> Iterator[list[str]]:
    """Block every request that does not go to the node; yields the blocked URLs."""
    node = urlsplit(server.base_url).netloc
    blocked: list[str] = []

    def only_the_node(route: Route) -> None:
        url = route.request.url
        if urlsplit(url).netloc == node or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            blocked.append(url)
            route.abort("internetdisconnected")

    context.route("**/*", only_the_node)
    yield blocked


@pytest.mark.slow
def test_swagger_ui_lists_the_operations_and_authorize_works(
    page: Page, server: SubprocessServer, offline: list[str]
) -> None:
    page.goto(f"{server.base_url}/docs")

    operations = page.locator(".opblock")
    # Swagger UI renders the whole document first: on a busy machine that takes seconds
    expect(operations.first).to_be_visible(timeout=30_000)
    assert operations.count() >= 15
    expect(
        page.locator(".opblock-summary-path", has_text="/api/v1/documents").first
    ).to_be_visible()
    authorize = page.locator("button.authorize").first
    expect(authorize).to_be_visible()

    # Authorize with the token, then try GET /api/v1/flows
    authorize.click()
    dialog = page.locator(".dialog-ux .modal-ux")
    expect(dialog).to_be_visible()
    dialog.locator("input").first.fill(TOKEN)
    dialog.locator("button.auth.authorize").click()
    expect(dialog.locator("button", has_text="Logout")).to_be_visible()
    dialog.locator("button.close-modal").click()

    flows = page.locator("#operations-flows-list_flows")
    flows.locator(".opblock-summary").click()
    flows.locator("button.try-out__btn").click()
    flows.locator("button.execute").click()
    status = flows.locator(".live-responses-table .response .response-col_status").first
    expect(status).to_have_text("200")
    expect(flows.locator(".live-responses-table")).to_contain_text("document.process")

    assert offline == []


@pytest.mark.slow
def test_redoc_renders_the_operations(
    page: Page, server: SubprocessServer, offline: list[str]
) -> None:
    page.add_init_script(CSP_WATCH)
    page.goto(f"{server.base_url}/redoc")

    expect(page.get_by_role("heading", name="Start document.process@1.0.0")).to_be_visible()
    expect(page.get_by_role("heading", name="Get Instance")).to_be_visible()
    assert page.get_by_role("heading", level=2).count() >= 15  # one per operation
    assert page.evaluate("window.__refused") == []
    # the sidebar footer's logo is inline, not the vendor's CDN image
    footer = page.get_by_role("link", name="API docs by Redocly")
    expect(footer).to_be_visible()
    node = urlsplit(server.base_url).netloc
    sources = page.eval_on_selector_all(
        "img, script[src], link[href]", "els => els.map(e => e.src || e.href)"
    )
    assert sources and all(s.startswith("data:") or urlsplit(s).netloc == node for s in sources), (
        sources
    )
    # the intro says how to send the token, and names no button ReDoc does not have
    intro = page.locator(".api-info")
    expect(intro).to_contain_text("Authorization: Bearer <token>")
    expect(intro).to_contain_text("ReDoc at /redoc is a read-only reference")
    assert page.get_by_role("button", name="Authorize", exact=True).count() == 0
    assert offline == []
