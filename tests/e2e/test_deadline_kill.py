"""SIGKILL the node in the middle of the call a deadline bounds: the end instant is unchanged
and honoured within one scan interval, by the other node that takes the instance over.

Two nodes share one store, so the store is PostgreSQL, the multi-node store (SQLite serves
one process: docs/several-nodes.md); a killed single SQLite node that restarts and finishes
its parked documents is test_default_restart's.

Two real node processes (``tests/e2e/deadline_node.py``) share the store; the provider runs
in this test process (it outlives the killed node) and answers each scenario's calls in
turn from a script: ``hang`` (held until the caller goes away), ``fail`` (500) or
``pending`` (``{"done": false}``, the default once the script is used up). The node that
holds the instance while its call hangs is killed; the other one takes over once the lease
(2 s) lapses.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading
import uuid
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.e2e.deadline_node import BUDGET, WINDOW
from tests.support.api import instant
from tests.support.eventually import eventually
from tests.support.server import TOKEN, LiveServer, SubprocessServer, free_port, live_server

SCAN = 0.5
LEASE = 2.0
#: Work between the end instant and the ending write (a claim, a run), on a loaded machine.
SLACK = timedelta(seconds=1.5)
#: The same after a retry window: the ending write follows a last try's claim, its call to
#: the provider and its failure's commit, each delayed on a loaded machine (4.6 s seen on
#: two cores running the whole suite).
TRY_SLACK = 4 * SLACK
NODE = Path(__file__).with_name("deadline_node.py")
#: The store the two nodes share (``store_url``'s PostgreSQL kind only).
TWO_NODES_STORE = pytest.mark.parametrize(
    "store_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


class Provider:
    """Scripted answers per scenario, shared with the provider's server thread."""

    def __init__(self) -> None:
        self.scripts: dict[str, list[str]] = {}
        self.after: dict[str, str] = {}
        self.calls: defaultdict[str, int] = defaultdict(int)
        self.hanging: set[str] = set()
        self.lock = threading.Lock()

    def app(self) -> Starlette:
        async def probe(request: Request) -> JSONResponse:
            scenario = request.path_params["scenario"]
            with self.lock:
                self.calls[scenario] += 1
                script = self.scripts.get(scenario, [])
                what = script.pop(0) if script else self.after.get(scenario, "pending")
            if what == "hang":
                self.hanging.add(scenario)
                try:
                    while not await request.is_disconnected():
                        await asyncio.sleep(0.05)
                finally:
                    self.hanging.discard(scenario)
                return JSONResponse({"done": False})
            if what == "fail":
                return JSONResponse({"error": "down"}, status_code=500)
            return JSONResponse({"done": False})

        return Starlette(routes=[Route("/probe/{scenario}", probe)])


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[tuple[LiveServer, Provider]]:
    scripted = Provider()
    with live_server(
        f"sqlite:///{tmp_path}/unused.db",
        app_factory=lambda _s: scripted.app(),  # type: ignore[arg-type]
    ) as server:
        yield server, scripted


@contextmanager
def node(database_url: str, log: Path, name: str, provider_url: str) -> Iterator[SubprocessServer]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(
        {
            "FLOWPARK_DATABASE_URL": database_url,
            "FLOWPARK_API_TOKENS": TOKEN,
            "FLOWPARK_SELF_URL": f"http://127.0.0.1:{port}",
            "FLOWPARK_OCR_BASE_URL": provider_url,
            "FLOWPARK_NODE_ID": name,
            "FLOWPARK_LEASE_SECONDS": str(LEASE),
            "FLOWPARK_TIMER_SCAN_INTERVAL": str(SCAN),
            "FLOWPARK_START_WAIT_SECONDS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, str(NODE), str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield SubprocessServer(f"http://127.0.0.1:{port}", process, log)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _up(server: SubprocessServer) -> None:
    assert server.process.poll() is None, server.output()
    async with server.client() as http:
        try:
            assert (await http.get("/healthz")).status_code == 200
        except httpx.TransportError as exc:
            raise AssertionError(f"{server.base_url} not up: {exc}") from exc


async def _view(server: SubprocessServer, instance_id: str) -> dict[str, Any]:
    async with server.client() as http:
        resp = await http.get(f"/api/v1/instances/{instance_id}")
        assert resp.status_code == 200, resp.text
        return resp.json()  # type: ignore[no-any-return]


@contextmanager
def two_nodes(store_url: str, tmp_path: Path, provider_url: str) -> Iterator[dict[str, Any]]:
    with ExitStack() as stack:
        nodes = {
            name: stack.enter_context(node(store_url, tmp_path / f"{name}.log", name, provider_url))
            for name in ("a", "b")
        }
        yield nodes


async def _kill_holder_mid_call(
    nodes: dict[str, SubprocessServer], provider: Provider, route: str, scenario: str
) -> tuple[str, dict[str, Any], SubprocessServer]:
    """Start ``scenario`` on node a, wait until a call of it hangs, read the instance, and
    SIGKILL the node that holds it. Returns (instance id, its view then, the survivor)."""
    for server in nodes.values():
        await eventually(functools.partial(_up, server), timeout=30, what="node up")
    async with nodes["a"].client() as http:
        resp = await http.post(route, json={"scenario": scenario})
    assert resp.status_code == 202, resp.text
    instance_id = resp.json()["instanceId"]

    async def hanging() -> dict[str, Any]:
        assert scenario in provider.hanging
        view = await _view(nodes["b"], instance_id)
        assert view["lease"] is not None and view["budget"] is not None, view
        return view

    before = await eventually(hanging, timeout=20, what="a call hangs")
    holder = before["lease"]["owner"]
    victim = nodes[holder]
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait(10)
    survivor = nodes["b" if holder == "a" else "a"]
    return instance_id, before, survivor


async def _ended(survivor: SubprocessServer, instance_id: str) -> dict[str, Any]:
    async def ended() -> dict[str, Any]:
        view = await _view(survivor, instance_id)
        assert view["state"] in ("completed", "failed", "cancelled"), view["state"]
        return view

    return await eventually(ended, timeout=60, what="instance ended")


def _checks(before: dict[str, Any], after: dict[str, Any], span: timedelta) -> datetime:
    ends = instant(before["budget"]["endsAt"])
    assert ends == instant(before["budget"]["startedAt"]) + span
    assert after["budget"]["endsAt"] == before["budget"]["endsAt"]  # unchanged by the kill
    return ends


@pytest.mark.slow
@pytest.mark.timeout(120)
@TWO_NODES_STORE
async def test_killed_in_attempt_zeros_call_the_poll_budget_holds(
    store_url: str, tmp_path: Path, provider: tuple[LiveServer, Provider]
) -> None:
    server, scripted = provider
    scenario = f"poll-{uuid.uuid4().hex[:8]}"
    scripted.scripts[scenario] = ["hang"]
    with two_nodes(store_url, tmp_path, server.base_url) as nodes:
        instance_id, before, survivor = await _kill_holder_mid_call(
            nodes, scripted, "/api/v1/kill-poll", scenario
        )
        assert [r["kind"] for r in before["journal"]] == ["deadline"]  # before attempt 0

        async def resumed() -> dict[str, Any]:
            view = await _view(survivor, instance_id)
            assert any(r["kind"] == "step" for r in view["journal"]), view["journal"]
            assert view["budget"] is not None
            return view

        after = await eventually(resumed, timeout=20, what="attempt 0 re-run by the survivor")
        ends = _checks(before, after, BUDGET)
        final = await _ended(survivor, instance_id)
        assert final["state"] == "failed"
        assert final["error"]["code"] == "flow.poll_not_satisfied"
        ended_at = instant(final["updatedAt"])
        assert ends <= ended_at <= ends + timedelta(seconds=SCAN) + SLACK, (ended_at, ends)
        attempts = [r for r in final["journal"] if r["kind"] == "step"]
        assert all(instant(r["startedAt"]) < ends for r in attempts)


@pytest.mark.slow
@pytest.mark.timeout(120)
@TWO_NODES_STORE
async def test_killed_in_a_retry_the_poll_budget_holds(
    store_url: str, tmp_path: Path, provider: tuple[LiveServer, Provider]
) -> None:
    server, scripted = provider
    scenario = f"retry-{uuid.uuid4().hex[:8]}"
    scripted.scripts[scenario] = ["fail", "hang"]
    with two_nodes(store_url, tmp_path, server.base_url) as nodes:
        instance_id, before, survivor = await _kill_holder_mid_call(
            nodes, scripted, "/api/v1/kill-poll", scenario
        )
        tries = [(r["try"], r["outcome"]) for r in before["journal"] if r["kind"] == "step"]
        assert tries == [(1, "failure")]  # try 2 is the call in flight

        async def resumed() -> dict[str, Any]:
            view = await _view(survivor, instance_id)
            assert any(
                r["kind"] == "step" and r["outcome"] == "success" for r in view["journal"]
            ), view["journal"]
            return view

        after = await eventually(resumed, timeout=20, what="try 2 re-run by the survivor")
        ends = _checks(before, after, BUDGET)
        final = await _ended(survivor, instance_id)
        assert final["error"]["code"] == "flow.poll_not_satisfied"
        ended_at = instant(final["updatedAt"])
        assert ends <= ended_at <= ends + timedelta(seconds=SCAN) + SLACK, (ended_at, ends)


@pytest.mark.slow
@pytest.mark.timeout(120)
@TWO_NODES_STORE
async def test_killed_in_a_heartbeating_try_the_retry_window_holds(
    store_url: str, tmp_path: Path, provider: tuple[LiveServer, Provider]
) -> None:
    server, scripted = provider
    scenario = f"watch-{uuid.uuid4().hex[:8]}"
    scripted.scripts[scenario] = ["hang"]
    scripted.after[scenario] = "fail"
    with two_nodes(store_url, tmp_path, server.base_url) as nodes:
        instance_id, before, survivor = await _kill_holder_mid_call(
            nodes, scripted, "/api/v1/kill-heartbeat", scenario
        )
        assert before["budget"]["kind"] == "retry.total"

        async def taken_over() -> dict[str, Any]:
            view = await _view(survivor, instance_id)
            lost = [r for r in view["journal"] if r["kind"] == "step"]
            assert lost and lost[0]["errorType"] == "heartbeat_timeout", view["journal"]
            assert view["budget"] is not None
            return view

        after = await eventually(taken_over, timeout=30, what="the lost try recorded")
        ends = _checks(before, after, WINDOW)
        final = await _ended(survivor, instance_id)
        assert final["state"] == "failed"
        assert final["error"]["code"] == "flow.step_failed"
        tries = [r for r in final["journal"] if r["kind"] == "step"]
        assert len(tries) >= 3  # the lost one, then retries on the survivor
        called = [r for r in tries if r["errorType"] != "retry_window_ended"]
        assert all(instant(r["startedAt"]) <= ends for r in called)  # none after the window
        ended_at = instant(final["updatedAt"])
        assert ended_at <= ends + timedelta(seconds=SCAN) + TRY_SLACK, (ended_at, ends, tries)
        # the last try was refused a successor because it would start past the end
        assert instant(tries[-1]["committedAt"]) + timedelta(seconds=0.5) > ends
