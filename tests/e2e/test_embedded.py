"""flowpark inside a team's FastAPI app (:mod:`tests.support.embedded_host`), served by a
real uvicorn, on SQLite and PostgreSQL: the host's own lifespan, state, routes and error
handler beside flowpark's; a start inside the host's transaction (rollback: nothing, no
provider call; commit: it completes, once, also across a SIGKILL right after the commit
and across two uvicorn workers); shutdown within the grace; the mistakes a host can make
answered at once with a clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from flowpark.client.errors import ServerError
from flowpark.embedding import Flowpark
from flowpark.errors import EmbeddingInvalid
from flowpark.settings import Settings
from tests.support.embedded_host import create_host, flows
from tests.support.eventually import eventually, eventually_sync
from tests.support.server import TOKEN, free_port, live_server

AUTH = {"Authorization": f"Bearer {TOKEN}"}
ROOT = Path(__file__).resolve().parents[2]


def _order() -> str:
    return f"order-{uuid.uuid4().hex[:10]}"


async def _state(http: httpx.AsyncClient, instance_id: str) -> str:
    answer = await http.get(f"/flowpark/api/v1/instances/{instance_id}", headers=AUTH)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["state"])


async def _completed(http: httpx.AsyncClient, instance_id: str) -> None:
    assert await _state(http, instance_id) == "completed"


async def _charges(http: httpx.AsyncClient, order_id: str) -> int:
    return int((await http.get(f"/charges/{order_id}")).json()["charges"])


async def _instances_of(http: httpx.AsyncClient, order_id: str) -> list[dict[str, Any]]:
    listed = await http.get(
        "/flowpark/api/v1/instances", params={"flow": "order.charge", "limit": 1000}, headers=AUTH
    )
    assert listed.status_code == 200, listed.text
    ids = [row["instanceId"] for row in listed.json()["instances"]]
    found = []
    for instance_id in ids:
        view = (await http.get(f"/flowpark/api/v1/instances/{instance_id}", headers=AUTH)).json()
        if view["input"]["order_id"] == order_id:
            found.append(view)
    return found


@pytest.fixture(scope="module")
def host(module_store_url: str) -> Iterator[Any]:
    with live_server(module_store_url, app_factory=create_host, shutdown_grace_seconds=2.0) as s:
        yield s


async def test_the_hosts_lifespan_state_routes_and_handlers_work_beside_flowparks(
    host: Any,
) -> None:
    async with httpx.AsyncClient(base_url=host.base_url, timeout=30) as http:
        hello = (await http.get("/hello")).json()
        assert hello == {
            "state": "from the host's app.state",
            "lifespan": "from the host's lifespan",
        }
        boom = await http.get("/boom")  # the host's handler, untouched
        assert (boom.status_code, boom.json()) == (418, {"host": "the host's own handler"})
        missing = await http.get("/no-such-route")  # the host's 404, not a problem
        assert missing.status_code == 404
        assert missing.headers["content-type"] == "application/json"
        ours = await http.get("/flowpark/api/v1/instances/not-an-id", headers=AUTH)
        assert ours.status_code == 404
        assert ours.headers["content-type"] == "application/problem+json"
        assert ours.json()["code"] == "instance_not_found"
        no_route = await http.get("/flowpark/api/v1/no-such-route", headers=AUTH)
        assert no_route.headers["content-type"] == "application/problem+json"
        assert no_route.json()["flows"] == "/flowpark/api/v1/flows"  # under the prefix
        assert "GET /flowpark/api/v1/flows lists" in no_route.json()["detail"]
        ready = await http.get("/flowpark/readyz")
        assert ready.status_code == 200, ready.text
        spec = (await http.get("/openapi.json")).json()
        assert "/hello" in spec["paths"]
        listed = spec["paths"]["/flowpark/api/v1/instances"]["get"]
        assert listed["tags"] == ["flowpark: instances"]
        assert "flowpark: instances" in {t["name"] for t in spec.get("tags", [])} | set(
            listed["tags"]
        )
        docs = await http.get("/docs")
        assert docs.status_code == 200


async def test_a_start_in_a_rolled_back_transaction_leaves_nothing_and_calls_nobody(
    host: Any,
) -> None:
    rolled_back, committed = _order(), _order()
    async with httpx.AsyncClient(base_url=host.base_url, timeout=30) as http:
        refused = await http.post(f"/orders/{rolled_back}", params={"fail": 1})
        assert refused.status_code == 422 and refused.json() == {"rolledBack": True}
        started = (await http.post(f"/orders/{committed}")).json()
        assert started["status"] == "running"  # written, not yet run: after the commit
        await eventually(lambda: _completed(http, started["instanceId"]), timeout=30)
        assert await _charges(http, committed) == 1
        # the committed order, started after, has run: the rolled-back one never will
        assert await _instances_of(http, rolled_back) == []
        assert await _charges(http, rolled_back) == 0


async def test_a_start_in_a_blocking_session_commits_and_completes(host: Any) -> None:
    order = _order()
    async with httpx.AsyncClient(base_url=host.base_url, timeout=30) as http:
        started = await http.post(f"/sync-orders/{order}")
        assert started.status_code == 200, started.text
        await eventually(lambda: _completed(http, started.json()["instanceId"]), timeout=30)
        assert await _charges(http, order) == 1


async def test_a_session_of_another_database_is_refused_with_a_code(host: Any) -> None:
    order = _order()
    async with httpx.AsyncClient(base_url=host.base_url, timeout=30) as http:
        refused = await http.post(f"/orders/{order}", params={"other": 1})
        assert refused.status_code == 422
        assert refused.json() == {"code": "transaction_not_shared"}


def test_including_twice_or_under_a_bad_prefix_is_a_clear_error(tmp_path: Path) -> None:
    fp = Flowpark(Settings(database_url=f"sqlite:///{tmp_path}/x.db"), flows=[flows])
    fp.include_in(FastAPI())
    with pytest.raises(EmbeddingInvalid, match="included in an application already") as info:
        fp.include_in(FastAPI())
    assert info.value.code == "embedding_invalid"
    other = Flowpark(Settings(database_url=f"sqlite:///{tmp_path}/x.db"), flows=[flows])
    for bad in ("flowpark/", "/", "/a?b", "/a#b", "/a b", "/x/../y", "/%2e%2e", "/a\x00"):
        with pytest.raises(EmbeddingInvalid, match="not a path"):
            other.include_in(FastAPI(), prefix=bad)
    served = FastAPI()

    @served.get("/flowpark/mine")
    def mine() -> None:
        """A host route under the prefix."""

    with pytest.raises(EmbeddingInvalid, match="/flowpark/mine under /flowpark"):
        other.include_in(served)


async def test_a_host_route_added_under_the_prefix_after_including_stops_the_startup(
    tmp_path: Path,
) -> None:
    fp = Flowpark(Settings(database_url=f"sqlite:///{tmp_path}/x.db"), flows=[flows])
    app = FastAPI()
    fp.include_in(app, prefix="/flowpark")

    @app.get("/flowpark-admin")  # beside the prefix, not under it: reached
    def admin() -> None:
        """A host route beside the prefix."""

    @app.get("/flowpark/mine")  # flowpark's mount would answer it: never reached
    def mine() -> None:
        """A host route under the prefix."""

    with pytest.raises(EmbeddingInvalid, match="route /flowpark/mine is under") as info:
        async with app.router.lifespan_context(app):
            pass
    assert info.value.code == "embedding_invalid"


async def test_the_client_before_the_lifespan_answers_not_ready_at_once(tmp_path: Path) -> None:
    fp = Flowpark(Settings(database_url=f"sqlite:///{tmp_path}/x.db"), flows=[flows])
    fp.include_in(FastAPI())
    with pytest.raises(ServerError) as info:
        await fp.client.start("order.charge", {"order_id": "o-1"})
    assert info.value.code == "not_ready"
    with pytest.raises(ServerError):
        await fp.client.get(str(uuid.uuid4()))


def test_shutdown_within_the_grace_releases_the_lease_of_a_run_cut_off(
    sqlite_template_copy: str, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from sqlalchemy import create_engine, text

    from flowpark.store.db import sync_url

    with live_server(
        sqlite_template_copy,
        app_factory=create_host,
        shutdown_grace_seconds=1.0,
        start_wait_seconds=0.2,
    ) as server:

        async def start() -> str:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
                answer = (await http.post(f"/slow/{_order()}")).json()
                assert answer["status"] == "running"
                return str(answer["instanceId"])

        instance_id = asyncio.run(start())
        began = time.monotonic()
    took = time.monotonic() - began
    assert took < 1.0 + 5.0, took  # the grace, plus the server's own stopping
    engine = create_engine(sync_url(sqlite_template_copy))
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, lease_owner, wake_at FROM flow_instance WHERE id = :id"),
            {"id": instance_id},
        ).one()
    engine.dispose()
    assert row.state == "suspended" and row.lease_owner is None and row.wake_at is not None
    assert instance_id in caplog.text and "unfinished" in caplog.text


@pytest.fixture
def sqlite_template_copy(_sqlite_template: Path, tmp_path: Path) -> str:
    import shutil

    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    return f"sqlite:///{path}"


@contextmanager
def _host_process(
    database_url: str, log: Path, *, workers: int = 1
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The host under ``uvicorn --factory`` in a child process (its own workers)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(
        FLOWPARK_DATABASE_URL=database_url,
        FLOWPARK_API_TOKENS=TOKEN,
        FLOWPARK_SELF_URL=base,
        FLOWPARK_TIMER_SCAN_INTERVAL="0.2",
        FLOWPARK_CONSOLE_ENABLED="false",
        PYTHONPATH=str(ROOT),
    )
    with log.open("ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.support.embedded_host:create_host_from_env",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:

        def serving() -> None:
            assert process.poll() is None, log.read_text(errors="replace")
            try:
                assert httpx.get(f"{base}/hello", timeout=2).status_code == 200
            except httpx.TransportError as exc:
                raise AssertionError(str(exc)) from exc

        eventually_sync(serving, timeout=60)
        yield process, base
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.slow
async def test_a_start_committed_right_before_a_sigkill_completes_once_in_the_next_process(
    store_url: str, tmp_path: Path
) -> None:
    order = _order()
    log = tmp_path / "host.log"
    with _host_process(store_url, log) as (process, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            with pytest.raises(httpx.TransportError):  # the process died mid-answer
                await http.post(f"/orders/{order}", params={"die": 1})
        assert process.wait(timeout=30) == -signal.SIGKILL
    with _host_process(store_url, log) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            found = await eventually(lambda: _one_instance(http, order), timeout=30)
            await eventually(lambda: _completed(http, found), timeout=30)
            assert await _charges(http, order) == 1


async def _one_instance(http: httpx.AsyncClient, order: str) -> str:
    found = await _instances_of(http, order)
    assert len(found) == 1, found
    return str(found[0]["instanceId"])


@pytest.mark.slow
async def test_two_uvicorn_workers_run_each_instance_once(store_url: str, tmp_path: Path) -> None:
    orders = [_order() for _ in range(12)]
    with _host_process(store_url, tmp_path / "host.log", workers=2) as (_, base):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            started = []
            for order in orders:
                answer = await http.post(f"/orders/{order}")
                assert answer.status_code == 200, answer.text
                started.append(answer.json()["instanceId"])
            for instance_id in started:

                async def done(i: str = instance_id) -> None:
                    await _completed(http, i)

                await eventually(done, timeout=60)
            for order in orders:
                assert await _charges(http, order) == 1


@pytest.mark.postgres
async def test_a_start_in_the_hosts_transaction_lands_in_flowparks_own_schema(
    pg_url: str,
) -> None:
    from sqlalchemy import create_engine, text

    from flowpark.migrations import upgrade
    from flowpark.store.db import sync_url

    upgrade(pg_url, schema="flowpark")
    order = _order()
    with live_server(pg_url, app_factory=create_host, database_schema="flowpark") as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as http:
            started = (await http.post(f"/orders/{order}")).json()
            await eventually(lambda: _completed(http, started["instanceId"]), timeout=30)
            assert await _charges(http, order) == 1
    engine = create_engine(sync_url(pg_url))
    with engine.connect() as conn:
        where: dict[str, str] = dict(
            conn.execute(
                text(
                    "SELECT table_name, table_schema FROM information_schema.tables "
                    "WHERE table_name IN ('flow_instance', 'test_order', 'outbox_event')"
                )
            ).all()
        )
        ours = conn.execute(
            text("SELECT count(*) FROM flowpark.flow_instance WHERE id = :id"),
            {"id": started["instanceId"]},
        ).scalar_one()
    engine.dispose()
    # the team's tables in its schema, flowpark's in its own (a team's outbox_event beside)
    assert where == {"flow_instance": "flowpark", "test_order": "public", "outbox_event": "public"}
    assert ours == 1
