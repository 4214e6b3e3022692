"""The console of a flowpark that a host application mounts under ``/flowpark``
(:meth:`flowpark.embedding.Flowpark.include_in` with ``console=True``): every link, form,
script, style, htmx call, redirect and the session cookie stay under ``/flowpark/ui``,
never the host's own ``/ui``.

The pages are read as HTML (every ``href``, ``src``, ``action``, ``formaction``,
``hx-get``, ``hx-post`` and ``data-stream-url``), by following the console's own links
from the overview over instances in every state.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi import FastAPI

from flowpark.embedding import Flowpark
from flowpark.engine.ports import ReviewFilter
from flowpark.flows import Flow
from flowpark.samples.registry import sample_flows
from flowpark.samples.settings import SampleSettings
from flowpark.settings import Settings
from flowpark.testing import FlowHarness, Scripted
from tests.api.operator_support import provider
from tests.engine.flows import poll_flow
from tests.support.seed import Seeded
from tests.support.server import TOKEN, LiveServer, live_server

PREFIX = "/flowpark"
UI = f"{PREFIX}/ui"
#: The attributes that name a URL the browser fetches, posts to or follows.
URL_ATTRIBUTES = frozenset(
    {"href", "src", "action", "formaction", "hx-get", "hx-post", "data-stream-url"}
)
#: A page the host serves itself at its own ``/ui``: a console link that lost the prefix
#: would land here.
HOSTS_UI = {"page": "the host's own /ui"}


def _in_console(value: str) -> bool:
    return value == UI or value.startswith((f"{UI}/", f"{UI}?"))


class _Urls(HTMLParser):
    """Every URL attribute of a page, as ``(tag, attribute, value)``."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in URL_ATTRIBUTES and value is not None:
                self.found.append((tag, name, value))


def _urls(html: str) -> list[tuple[str, str, str]]:
    parser = _Urls()
    parser.feed(html)
    parser.close()
    return parser.found


def _check_page(where: str, html: str) -> list[str]:
    """Assert that every URL of the page is under ``/flowpark/ui`` (or this page's own
    ``#fragment`` / ``?query``); returns the links (``<a href>``) to follow."""
    found = _urls(html)
    assert found, f"{where}: no URL at all (not a console page?)"
    astray = [f for f in found if not (_in_console(f[2]) or f[2].startswith(("#", "?")))]
    assert astray == [], f"{where}: URLs outside {UI}: {astray}"
    return [value for tag, name, value in found if tag == "a" and name == "href"]


def _host(flows: Any, **flowpark: Any) -> FastAPI:
    """A host application with a ``/ui`` of its own and flowpark's console at
    ``/flowpark/ui`` (role ``api``: no sweep, the data stays as it is)."""
    host = FastAPI(title="a host")

    @host.get("/ui")
    async def hosts_own_ui() -> dict[str, str]:
        return HOSTS_UI

    fp = Flowpark(flows=flows, role="api", **flowpark)
    fp.include_in(host, prefix=PREFIX, console=True)
    return host


@pytest.fixture(scope="module")
def mounted(seeded_db: tuple[str, Seeded]) -> Iterator[LiveServer]:
    """The host over the seeded database (instances in every state; nothing changes them)."""

    def factory(settings: Settings, sample: SampleSettings) -> FastAPI:
        return _host([sample_flows(sample)], settings=settings)

    with live_server(seeded_db[0], app_factory=factory, timer_scan_interval=60.0) as server:
        yield server


@pytest.fixture
async def http(mounted: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=mounted.base_url, timeout=30.0) as client:
        yield client


async def _sign_in(http: httpx.AsyncClient, next_url: str | None = None) -> httpx.Response:
    data = {"token": TOKEN} if next_url is None else {"token": TOKEN, "next": next_url}
    resp = await http.post(f"{UI}/sign-in", data=data)
    assert resp.status_code == 303, resp.text[:500]
    return resp


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def test_signing_in_and_out_stays_under_the_prefix(http: httpx.AsyncClient) -> None:
    away = await http.get(f"{UI}/instances", params={"state": "failed"})
    assert away.status_code == 303
    location = away.headers["location"]
    assert location.startswith(f"{UI}/sign-in?"), location
    assert parse_qs(urlsplit(location).query)["next"] == [f"{UI}/instances?state=failed"]

    form = await http.get(location)
    assert form.status_code == 200
    _check_page("sign-in", form.text)
    assert f'name="next" value="{UI}/instances?state=failed"' in form.text

    signed = await _sign_in(http, f"{UI}/instances?state=failed")
    assert signed.headers["location"] == f"{UI}/instances?state=failed"
    [cookie] = signed.headers.get_list("set-cookie")
    assert f"Path={UI}" in cookie and "HttpOnly" in cookie
    assert (await http.get(signed.headers["location"])).status_code == 200  # the cookie is sent

    # the host's console path, another site, a look-alike path: back to the overview
    for target in (
        "/ui",
        "/ui/instances",
        "https://evil.example/flowpark/ui",
        "//evil.example/flowpark/ui",
        "/\\evil.example/flowpark/ui",
        f"{UI}x",
        "/flowpark/api/v1/flows",
        "",
    ):
        resp = await _sign_in(http, target)
        assert resp.headers["location"] == UI, target

    overview = await http.get(UI)
    out = await http.post(f"{UI}/sign-out", data={"csrf": _csrf(overview.text)})
    assert out.status_code == 303 and out.headers["location"] == f"{UI}/sign-in"
    [expired] = out.headers.get_list("set-cookie")
    assert f"Path={UI}" in expired and "Max-Age=0" in expired
    assert (await http.get(UI)).status_code == 303


async def test_the_redirects_of_the_root_and_of_a_trailing_slash_keep_the_prefix(
    http: httpx.AsyncClient,
) -> None:
    browser = {"Accept": "text/html"}
    root = await http.get(f"{PREFIX}/", headers=browser)
    assert root.status_code == 307 and root.headers["location"] == UI
    await _sign_in(http)
    slash = await http.get(f"{UI}/instances/", params={"state": "failed"})
    assert slash.status_code == 308
    assert slash.headers["location"] == f"{UI}/instances?state=failed"
    bare = await http.get(f"{UI}/")
    assert bare.status_code == 308 and bare.headers["location"] == UI
    missing = await http.get(f"{UI}/nowhere")
    assert missing.status_code == 404 and 'data-code="not_found"' in missing.text
    _check_page("a missing page", missing.text)
    # the host's own /ui is still the host's
    assert (await http.get("/ui")).json() == HOSTS_UI


async def test_every_page_a_link_reaches_points_under_the_prefix(
    http: httpx.AsyncClient, seeded: Seeded
) -> None:
    await _sign_in(http)
    # the sections first: the instance list unfiltered, so every instance page is reached
    queue = [UI, f"{UI}/instances", f"{UI}/flows", f"{UI}/providers", f"{UI}/reviews"]
    visited: set[str] = set()
    statics: set[str] = set()
    while queue:
        url = queue.pop(0)
        path = urlsplit(url).path
        if path in visited:
            continue
        visited.add(path)
        assert len(visited) < 300, "the crawl does not end"
        page = await http.get(url)
        assert page.status_code == 200, (url, page.status_code, page.text[:300])
        assert page.headers["content-type"].startswith("text/html"), url
        links = _check_page(url, page.text)
        statics |= {v for _, _, v in _urls(page.text) if v.startswith(f"{UI}/static/")}
        queue += [link for link in links if _in_console(link) and "/static/" not in link]

    every = {f"{UI}/instances/{i}" for i in seeded.every()}
    assert every <= visited, every - visited
    assert f"{UI}/flows/document.process/1.0.0" in visited
    assert any("/actions/" in p for p in visited), "no action's confirmation page reached"

    # the overview's live part asks the overview again, under the prefix
    overview = (await http.get(UI)).text
    assert ("div", "hx-get", UI) in _urls(overview)

    # the styles, scripts and icon come from the mounted app's static files
    assert {f"{UI}/static/{n}" for n in ("console.css", "console.js", "htmx.min.js")} <= statics
    for asset in sorted(statics):
        resp = await http.get(asset)
        assert resp.status_code == 200, asset
    css = await http.get(f"{UI}/static/console.css")
    assert css.headers["content-type"].startswith("text/css")


# -- forms that post and come back: reviews and an operator action, on a store of their own


def _escalate(ctx: Any) -> None:
    ctx.request_review(ctx.input.order_id, "the check did not finish in time")


@pytest.fixture
async def acting(store_url: str) -> AsyncIterator[tuple[FlowHarness, LiveServer]]:
    """A harness on a fresh store and the host over it, sharing the harness's clock."""
    chosen: list[Flow] = [poll_flow()]
    subs = {**provider(), "t.escalate": Scripted(_escalate)}
    async with FlowHarness.open(
        chosen, database_url=store_url, migrate=False, substitutes=subs
    ) as h:

        def factory(settings: Settings) -> FastAPI:
            return _host([lambda _deps: chosen], settings=settings, clock=h.clock)

        with live_server(store_url, app_factory=factory) as server:
            yield h, server


@asynccontextmanager
async def _signed_in(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30.0) as client:
        await _sign_in(client)
        yield client


async def test_review_forms_and_actions_post_and_return_under_the_prefix(
    acting: tuple[FlowHarness, LiveServer],
) -> None:
    h, server = acting
    reviewed = (await h.start("t.poll", {"order_id": "o-review"}, version="1.0.0")).instance
    await h.wait_until(lambda i: i.state.ended, reviewed.id)
    [item] = await h.store.reviews.find_reviews(ReviewFilter(instance_id=reviewed.id))
    parked = (await h.start("t.poll", {"order_id": "o-parked"}, version="1.0.0")).instance

    async with _signed_in(server) as http:
        queue = await http.get(f"{UI}/reviews")
        _check_page("reviews", queue.text)
        assert f'name="back" value="{UI}/reviews"' in queue.text
        page = await http.get(f"{UI}/reviews/{item.id}")
        _check_page("a review", page.text)
        forms = {v for _, name, v in _urls(page.text) if name in ("action", "formaction")}
        assert forms >= {f"{UI}/reviews/{item.id}/{verb}" for verb in ("claim", "dismiss")}
        here = f"{UI}/reviews/{item.id}"
        assert f'name="back" value="{here}"' in page.text

        csrf = _csrf(page.text)
        claimed = await http.post(
            f"{UI}/reviews/{item.id}/claim", data={"csrf": csrf, "back": here}
        )
        assert claimed.status_code == 303
        assert claimed.headers["location"].startswith(f"{here}?done="), claimed.headers
        shown = await http.get(claimed.headers["location"])
        assert "Claimed by token-1" in shown.text
        # a way back outside the mounted console (the host's /ui): the queue instead
        resolved = await http.post(
            f"{UI}/reviews/{item.id}/resolve", data={"csrf": csrf, "back": "/ui/reviews"}
        )
        assert resolved.status_code == 303
        assert resolved.headers["location"].startswith(f"{UI}/reviews?done=")

        instance = await http.get(f"{UI}/instances/{parked.id}")
        links = _check_page("a parked instance", instance.text)
        cancel = f"{UI}/instances/{parked.id}/actions/cancel"
        assert cancel in links
        confirm = await http.get(cancel)
        _check_page("the cancel confirmation", confirm.text)
        assert ("form", "action", cancel) in _urls(confirm.text)
        key = re.search(r'name="key" value="([^"]+)"', confirm.text)
        assert key
        done = await http.post(cancel, data={"csrf": _csrf(confirm.text), "key": key.group(1)})
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"{UI}/instances/{parked.id}?done="), done
        after = await http.get(done.headers["location"])
        assert after.status_code == 200
        _check_page("the cancelled instance", after.text)
