"""Console sessions end server-side, on every node (both stores, two real servers on one
database): sign-out ends the session, so a copy of its cookie opens nothing on either node;
a session idle for ``console_idle_seconds`` is over; a removed token ends its sessions."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from flowpark.engine.clock import VirtualClock
from flowpark.runtime.app import create_app
from flowpark.samples.registry import sample_flows
from flowpark.samples.settings import SampleSettings
from flowpark.settings import Settings
from tests.support.server import TOKEN, LiveServer, live_server


@pytest.fixture
def nodes(store_url: str) -> Iterator[tuple[LiveServer, LiveServer]]:
    with (
        live_server(store_url, run_sweeper=False) as first,
        live_server(store_url, run_sweeper=False) as second,
    ):
        yield first, second


async def _sign_in(node: LiveServer) -> str:
    async with httpx.AsyncClient(base_url=node.base_url) as http:
        resp = await http.post("/ui/sign-in", data={"token": TOKEN})
        assert resp.status_code == 303, resp.text
        return str(http.cookies["flowpark_session"])


async def _opens(node: LiveServer, cookie: str) -> bool:
    async with httpx.AsyncClient(base_url=node.base_url) as http:
        http.cookies.set("flowpark_session", cookie, path="/ui")
        resp = await http.get("/ui")
        assert resp.status_code in (200, 303), resp.status_code
        return resp.status_code == 200


async def test_sign_out_ends_the_session_on_every_node(
    nodes: tuple[LiveServer, LiveServer],
) -> None:
    first, second = nodes
    cookie = await _sign_in(first)
    assert await _opens(first, cookie) and await _opens(second, cookie)
    async with httpx.AsyncClient(base_url=second.base_url) as http:
        http.cookies.set("flowpark_session", cookie, path="/ui")
        page = await http.get("/ui")
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf is not None, page.text[:2000]
        out = await http.post("/ui/sign-out", data={"csrf": csrf.group(1)})
        assert out.status_code == 303
    # the copy of the cookie a browser (or anyone) kept opens nothing, on either node
    assert not await _opens(first, cookie)
    assert not await _opens(second, cookie)
    # another sign-in is a session of its own
    assert await _opens(second, await _sign_in(first))


async def test_an_idle_session_is_over_and_a_used_one_is_not(store_url: str) -> None:
    clock = VirtualClock(datetime.now(UTC))

    def app_factory(settings: Settings, sample: SampleSettings) -> FastAPI:
        return create_app(settings, clock=clock, flows=[sample_flows(sample)])

    with live_server(
        store_url, app_factory=app_factory, run_sweeper=False, console_idle_seconds=600.0
    ) as node:
        idle = await _sign_in(node)
        used = await _sign_in(node)
        for _ in range(3):  # 3 x 5 minutes: the used one is seen every 5 minutes
            clock.advance(timedelta(minutes=5))
            assert await _opens(node, used)
        # the idle one was last seen 15 minutes ago, past its 10-minute idle timeout
        assert not await _opens(node, idle)
        assert await _opens(node, used)
        clock.advance(timedelta(minutes=11))
        assert not await _opens(node, used)
