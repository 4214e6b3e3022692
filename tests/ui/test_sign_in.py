"""Console sign-in: a token for a signed, HttpOnly, SameSite=Strict cookie; CSRF on posts."""

from __future__ import annotations

import re

import httpx

from tests.support.seed import Seeded
from tests.support.server import TOKEN, LiveServer, live_server


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF field on the page"
    return match.group(1)


async def test_pages_send_a_visitor_without_a_session_to_sign_in(
    browser_less: httpx.AsyncClient,
) -> None:
    for path in ("/ui", "/ui/flows", "/ui/flows/document.process/1.0.0"):
        resp = await browser_less.get(path)
        assert resp.status_code == 303, path
        assert resp.headers["location"].startswith("/ui/sign-in?next="), resp.headers
    page = await browser_less.get("/ui/sign-in")
    assert page.status_code == 200 and 'name="token"' in page.text


async def test_a_wrong_token_is_refused_and_sets_no_cookie(browser_less: httpx.AsyncClient) -> None:
    resp = await browser_less.post("/ui/sign-in", data={"token": "not-a-token"})
    assert resp.status_code == 401
    assert "not one of this node" in resp.text
    assert "set-cookie" not in resp.headers
    assert (await browser_less.get("/ui")).status_code == 303


async def test_the_session_cookie_is_signed_httponly_strict_and_holds_no_token(
    browser_less: httpx.AsyncClient,
) -> None:
    resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN, "next": "/ui/flows"})
    assert resp.status_code == 303 and resp.headers["location"] == "/ui/flows"
    cookie = resp.headers["set-cookie"]
    assert cookie.startswith("flowpark_session=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert TOKEN not in cookie
    assert (await browser_less.get("/ui")).status_code == 200

    # an altered cookie is no session
    value = browser_less.cookies["flowpark_session"]
    browser_less.cookies.clear()
    browser_less.cookies.set(
        "flowpark_session", value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1], path="/ui"
    )
    assert (await browser_less.get("/ui")).status_code == 303


async def test_sign_in_only_returns_inside_the_console(browser_less: httpx.AsyncClient) -> None:
    for target in ("https://evil.example/", "//evil.example/ui", "/api/v1/flows"):
        resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN, "next": target})
        assert resp.headers["location"] == "/ui", target


async def test_sign_out_needs_the_sessions_csrf_token(signed_in: httpx.AsyncClient) -> None:
    page = await signed_in.get("/ui")
    csrf = _csrf(page.text)

    refused = await signed_in.post("/ui/sign-out", data={"csrf": "forged"})
    assert refused.status_code == 403 and 'data-code="csrf_invalid"' in refused.text
    assert (await signed_in.get("/ui")).status_code == 200

    out = await signed_in.post("/ui/sign-out", data={"csrf": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/ui/sign-in"
    assert (await signed_in.get("/ui")).status_code == 303


async def test_a_token_removed_from_the_settings_ends_its_sessions(
    browser_less: httpx.AsyncClient, console: LiveServer, seeded_db: tuple[str, Seeded]
) -> None:
    resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN})
    cookie = browser_less.cookies["flowpark_session"]
    # the same secret, another token list: the session's token is gone
    with (
        live_server(
            seeded_db[0], run_sweeper=False, api_tokens="other-token", console_secret="s3cret"
        ) as other,
        live_server(
            seeded_db[0],
            run_sweeper=False,
            api_tokens=f"{TOKEN},other-token",
            console_secret="s3cret",
        ) as both,
    ):
        async with httpx.AsyncClient(base_url=both.base_url) as http:
            await http.post("/ui/sign-in", data={"token": TOKEN})
            kept = http.cookies["flowpark_session"]
            assert (await http.get("/ui")).status_code == 200
        async with httpx.AsyncClient(base_url=other.base_url) as http:
            http.cookies.set("flowpark_session", kept, path="/ui")
            assert (await http.get("/ui")).status_code == 303
    assert resp.status_code == 303 and cookie


async def test_the_console_can_be_turned_off(seeded_db: tuple[str, Seeded]) -> None:
    with live_server(seeded_db[0], run_sweeper=False, console_enabled=False) as server:
        async with httpx.AsyncClient(base_url=server.base_url) as http:
            assert (await http.get("/ui")).status_code == 404
            assert (await http.get("/ui/static/htmx.min.js")).status_code == 404
            assert (await http.get("/healthz")).status_code == 200


async def test_a_form_posted_from_another_site_is_refused(browser_less: httpx.AsyncClient) -> None:
    foreign = {"Origin": "https://evil.example"}
    resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN}, headers=foreign)
    assert resp.status_code == 403 and "set-cookie" not in resp.headers
    own = {"Origin": str(browser_less.base_url).rstrip("/")}
    resp = await browser_less.post("/ui/sign-in", data={"token": TOKEN}, headers=own)
    assert resp.status_code == 303


async def test_pages_are_not_cached_framed_or_open_to_other_scripts(
    signed_in: httpx.AsyncClient,
) -> None:
    for path in ("/ui", "/ui/sign-in", "/ui/instances", "/ui/flows/document.process/1.0.0"):
        resp = await signed_in.get(path, follow_redirects=True)
        assert resp.headers["cache-control"] == "no-store", path
        assert resp.headers["x-frame-options"] == "DENY", path
        policy = resp.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy, path


async def test_a_browser_at_the_root_is_sent_to_the_console_an_api_client_gets_a_problem(
    browser_less: httpx.AsyncClient,
) -> None:
    page = await browser_less.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
    assert page.status_code == 307 and page.headers["location"] == "/ui"
    api = await browser_less.get("/", headers={"Accept": "application/json"})
    assert api.status_code == 404
    assert api.headers["content-type"] == "application/problem+json"
    assert api.json()["code"] == "not_found"
