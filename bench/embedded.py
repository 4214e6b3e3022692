"""``embedded``: what a start costs in a team's FastAPI app that embeds flowpark, on
PostgreSQL (the default store), the host (:mod:`bench.embedded_host`) in a uvicorn process
of its own. Each path runs ``--n`` requests over real HTTP with ``--concurrency`` clients
(httpx) after a warm-up; its start parks at once on a signal (its write and its park, no
call):

* ``http``: ``POST /flowpark/api/v1/orders``, flowpark's HTTP start through the route the
  host mounts (bearer token, ``Idempotency-Key``); answered once parked;
* ``local``: ``POST /local/{key}``, a host route starting in-process (``client.start``);
  answered once parked;
* ``tx``: ``POST /tx/{key}``, a host route writing its order row and the start in one
  transaction (``session=``); the runs after the commit are measured until every instance
  parked;
* ``order-only``: the same route's transaction without the start (the host's own cost);
* ``bare``: a host route that does nothing (the HTTP layer's cost).

For each: starts (requests) per second and the host process's CPU per request (psutil;
PostgreSQL's backends not counted). The targets: an in-process start costs at most the
HTTP start less the HTTP layer (``local - bare <= http - bare``; and ``tx - order-only <=
http - bare`` for the start in the caller's transaction). On the ``tx`` path the host's
engine counts the statements: flowpark's inside each caller transaction (one), any after
its commit on its connection (none), and the caller transactions per start (one: flowpark
opens none on the caller's engine).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from rich.table import Table
from sqlalchemy import create_engine, text

from bench.common import (
    API_TOKEN,
    REPO,
    BenchStore,
    CpuMeter,
    Result,
    Server,
    _log_file,
    _wait_http,
    api_client,
    err_console,
    free_port,
    percentiles,
    run_concurrently,
    sync_url,
)

__all__ = ["QUICK_N", "run"]

QUICK_N = 100
FLOW = "bench.order"


@contextmanager
def spawn_host(database_url: str) -> Iterator[Server]:
    """The host app (:mod:`bench.embedded_host`) in its own uvicorn process on loopback."""
    port = free_port()
    log = _log_file("embedded-host")
    env = dict(os.environ)
    env.update(
        {
            "FLOWPARK_DATABASE_URL": database_url,
            "FLOWPARK_API_TOKENS": API_TOKEN,
            "FLOWPARK_SELF_URL": f"http://127.0.0.1:{port}",
            "FLOWPARK_NODE_ID": "bench-host",
            # nothing falls due during the bench: a sweep now and then, not every 10 s
            "FLOWPARK_TIMER_SCAN_INTERVAL": "30",
        }
    )
    cmd = [sys.executable, "-m", "bench.embedded_host", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{server.base_url}/flowpark/healthz", proc, log)
        yield server
    finally:
        server.stop()
        log.unlink(missing_ok=True)


@dataclass
class Route:
    """One measured route: its name, the request it sends, and whether it starts."""

    name: str
    what: str
    starts: bool


PATHS = (
    Route("bare", "POST /bare (nothing)", False),
    Route("http", "POST /flowpark/api/v1/orders (HTTP start)", True),
    Route("local", "POST /local/{key} (client.start)", True),
    Route("tx", "POST /tx/{key} (order row + start, one transaction)", True),
    Route("order-only", "POST /order-only/{key} (order row alone)", False),
)


def _request(client: httpx.AsyncClient, path: str, key: str) -> Awaitable[httpx.Response]:
    if path == "bare":
        return client.post("/bare")
    if path == "http":
        return client.post(
            "/flowpark/api/v1/orders", json={"order_id": key}, headers={"Idempotency-Key": key}
        )
    return client.post(f"/{path}/{key}")


_EXPECTED = {"bare": 200, "http": 202, "local": 200, "tx": 200, "order-only": 200}


class Parked:
    """Counts the bench flow's parked instances (a connection of the bench's own)."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(sync_url(url), pool_size=1)

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    text(
                        "SELECT count(*) FROM flow_instance "
                        "WHERE flow_name = :f AND state = 'suspended'"
                    ),
                    {"f": FLOW},
                ).scalar_one()
            )

    async def until(self, expected: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while (seen := await asyncio.to_thread(self.count)) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{seen} of {expected} instances parked after {timeout}s")
            await asyncio.sleep(0.05)


async def _measure(
    client: httpx.AsyncClient,
    path: Route,
    n: int,
    concurrency: int,
    run_id: str,
    server: Server,
    store: BenchStore,
    parked: Parked,
    before: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    async def one(i: int) -> None:
        answer = await _request(client, path.name, f"{run_id}-{path.name}-{i}")
        if answer.status_code != _EXPECTED[path.name]:
            raise RuntimeError(f"{path.what} answered {answer.status_code}: {answer.text}")

    warm = min(100, max(n // 5, 10))
    await run_concurrently(warm, concurrency, one, label=f"{path.name} warm-up", start=n)
    expected = parked.count() if path.starts else 0
    if before is not None:
        await before()
    meter = CpuMeter(store, {"server": server.pid})
    meter.start()
    latencies = await run_concurrently(n, concurrency, one, label=path.what)
    if path.starts:  # the tx path's runs go on after its answers
        await parked.until(expected + n)
    meter.stop()
    stats = percentiles([x * 1000 for x in latencies], (50, 99))
    return {
        "per_s": round(n / meter.wall, 1),
        "cpu_ms": round(meter.used["server"] * 1000 / n, 3),
        "p50_ms": round(stats["p50"], 2),
        "p99_ms": round(stats["p99"], 2),
    }


async def run(store: BenchStore, n: int, *, concurrency: int = 32, **_: Any) -> Result:
    if store.kind != "postgres":
        raise SystemExit("embedded runs on PostgreSQL: --store postgres (its default)")
    run_id = uuid.uuid4().hex[:6]
    parked = Parked(store.url)
    measured: dict[str, dict[str, Any]] = {}
    statements: dict[str, Any] = {}
    try:
        with spawn_host(store.url) as server:
            async with api_client(server.base_url, concurrency) as client:

                async def reset() -> None:
                    (await client.post("/bench/statements")).raise_for_status()

                for path in PATHS:
                    measured[path.name] = await _measure(
                        client,
                        path,
                        n,
                        concurrency,
                        run_id,
                        server,
                        store,
                        parked,
                        before=reset if path.name == "tx" else None,
                    )
                    if path.name == "tx":
                        statements = (await client.get("/bench/statements")).json()
    finally:
        parked.engine.dispose()
    return _result(store, n, concurrency, measured, statements)


def _result(
    store: BenchStore,
    n: int,
    concurrency: int,
    measured: dict[str, dict[str, Any]],
    statements: dict[str, Any],
) -> Result:
    cpu = {name: figures["cpu_ms"] for name, figures in measured.items()}
    http_beyond_bare = round(cpu["http"] - cpu["bare"], 3)
    local_beyond_bare = round(cpu["local"] - cpu["bare"], 3)
    tx_beyond_order = round(cpu["tx"] - cpu["order-only"], 3)
    committed = statements.get("committed", 0)
    per_tx = statements.get("flowpark_in_tx", 0) / committed if committed else float("nan")
    figures = {
        "http_start_per_s": measured["http"]["per_s"],
        "http_start_cpu_ms": cpu["http"],
        "local_start_per_s": measured["local"]["per_s"],
        "local_start_cpu_ms": cpu["local"],
        "tx_start_per_s": measured["tx"]["per_s"],
        "tx_start_cpu_ms": cpu["tx"],
        "order_only_cpu_ms": cpu["order-only"],
        "bare_route_per_s": measured["bare"]["per_s"],
        "bare_route_cpu_ms": cpu["bare"],
        "http_start_beyond_bare_cpu_ms": http_beyond_bare,
        "in_process_start_cpu_ms": local_beyond_bare,
        "tx_start_beyond_order_cpu_ms": tx_beyond_order,
        "flowpark_statements_per_caller_tx": round(per_tx, 3),
        "statements_after_commit": statements.get("after_commit", -1),
        "caller_transactions_per_start": round(committed / n, 3),
    }
    targets = {
        "in_process_start_cpu_ms": (
            f"<= http - bare = {http_beyond_bare}",
            local_beyond_bare <= http_beyond_bare,
        ),
        "tx_start_beyond_order_cpu_ms": (
            f"<= http - bare = {http_beyond_bare}",
            tx_beyond_order <= http_beyond_bare,
        ),
        "flowpark_statements_per_caller_tx": ("1", per_tx == 1),
        "statements_after_commit": ("0", statements.get("after_commit") == 0),
        "caller_transactions_per_start": ("1", committed == n),
    }
    table = Table(title=f"embedded start paths (n={n} each, concurrency {concurrency})")
    for column in ("path", "starts/s", "server CPU ms/start", "p50 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "path" else "right")
    for path in PATHS:
        got = measured[path.name]
        table.add_row(
            path.what,
            f"{got['per_s']:,.1f}",
            f"{got['cpu_ms']:.3f}",
            f"{got['p50_ms']}",
            f"{got['p99_ms']}",
        )
    err_console.print(table)
    return Result(
        "embedded",
        store.kind,
        n,
        figures,
        {
            "concurrency": concurrency,
            "client": "httpx",
            "host": "uvicorn (1 proc), flowpark embedded (role both)",
        },
        targets=targets,
        details={"paths": measured, "statements_on_tx_path": statements},
    )
