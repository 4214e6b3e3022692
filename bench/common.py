"""Shared pieces of the benchmarks: fresh stores, subprocess servers, statistics, output.

Everything here is bench-only. Timings use ``time.perf_counter``; instants compared with
what the engine recorded use the engine's own clock (``SystemClock``, aware UTC).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench.compat import name_of

sync_url = name_of("flowpark.store.db", "sync_url")
upgrade = name_of("flowpark.store.migrate", "upgrade")
metadata = name_of("flowpark.store.tables", "metadata")


__all__ = [
    "API_TOKEN",
    "DEFAULT_PG_ADMIN_URL",
    "LIFTED_OCR_LIMIT",
    "BenchStore",
    "Result",
    "Server",
    "bench_store",
    "err_console",
    "free_port",
    "machine",
    "percentiles",
    "progress",
    "rss_mb",
    "spawn_fake_ocr",
    "spawn_server",
    "store_size_bytes",
]

DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
API_TOKEN = "bench-token"
#: A server's environment that lifts the sample's declared OCR limit (100 calls/s): a
#: figure of the engine's cost is then not the sample provider's pace (a side without
#: provider limits ignores it). :func:`bench.flows.node_engine` lifts it the same way.
LIFTED_OCR_LIMIT = {
    "FLOWPARK_PROVIDER_LIMITS": json.dumps(
        {"ocr": {"rate_per_second": 1_000_000, "burst": 1_000_000}}
    )
}
REPO = Path(__file__).resolve().parents[1]

#: progress bars and logs go to stderr, so ``--json`` leaves stdout to the one JSON object
err_console = Console(stderr=True)


def pg_admin_url() -> str:
    """The PostgreSQL server the benches create their databases on."""
    return os.environ.get("FLOWPARK_BENCH_PG_URL", DEFAULT_PG_ADMIN_URL)


# -- stores ------------------------------------------------------------------------------
@dataclass
class BenchStore:
    """A fresh database migrated to head: ``url`` (plain form), ``kind`` (sqlite|postgres),
    and for SQLite the file ``path``."""

    kind: str
    url: str
    path: Path | None = None


@contextmanager
def bench_store(kind: str, *, keep: bool = False) -> Iterator[BenchStore]:
    """Create a fresh, migrated database of ``kind``; drop it afterwards (unless ``keep``).

    PostgreSQL: ``CREATE DATABASE flowpark_bench_<random>`` on ``FLOWPARK_BENCH_PG_URL``.
    SQLite: a file in a new temporary folder.
    """
    if kind == "sqlite":
        folder = Path(tempfile.mkdtemp(prefix="flowpark-bench-"))
        path = folder / "flowpark.db"
        url = f"sqlite:///{path}"
        upgrade(url)
        try:
            yield BenchStore("sqlite", url, path)
        finally:
            if keep:
                err_console.print(f"[dim]kept {url}[/dim]")
            else:
                shutil.rmtree(folder, ignore_errors=True)
        return
    if kind != "postgres":
        raise ValueError(f"unknown store {kind!r} (sqlite or postgres)")
    admin_url = pg_admin_url()
    admin = create_engine(sync_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"flowpark_bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield BenchStore("postgres", url)
    finally:
        if keep:
            err_console.print(f"[dim]kept {url}[/dim]")
        else:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def flowpark_tables() -> list[str]:
    return sorted(metadata.tables)


def store_size_bytes(store: BenchStore) -> dict[str, int]:
    """On-disk size of the flowpark tables.

    PostgreSQL: ``pg_total_relation_size`` (heap, TOAST, indexes, free-space and visibility
    maps) of each flowpark table. SQLite: the database file after a WAL checkpoint
    (``TRUNCATE``), so everything committed is in the one file.
    """
    eng = create_engine(sync_url(store.url))
    try:
        with eng.connect() as conn:
            if store.kind == "postgres":
                sizes = {}
                for name in flowpark_tables():
                    sizes[name] = int(
                        conn.execute(
                            text("SELECT pg_total_relation_size(CAST(:t AS regclass))"), {"t": name}
                        ).scalar_one()
                    )
                return sizes
            conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        eng.dispose()
    assert store.path is not None
    return {"(file)": store.path.stat().st_size}


def sql(store: BenchStore, statement: str, params: dict[str, Any] | None = None) -> Any:
    """Run one statement on the store (bench setup only), committed; returns all rows."""
    eng = create_engine(sync_url(store.url))
    try:
        with eng.begin() as conn:
            result = conn.execute(text(statement), params or {})
            return result.all() if result.returns_rows else result.rowcount
    finally:
        eng.dispose()


# -- processes ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int | None = None) -> float:
    """Resident set size of ``pid`` (default this process) in MiB."""
    return psutil.Process(pid or os.getpid()).memory_info().rss / 2**20


@dataclass
class Server:
    """A subprocess serving HTTP on loopback."""

    proc: subprocess.Popen[bytes]
    base_url: str
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_mb(self) -> float:
        return rss_mb(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(
        f"server at {url} did not answer within {timeout}s:\n{log.read_text()[-4000:]}"
    )


def _log_file(name: str) -> Path:
    return Path(tempfile.mkstemp(prefix=f"flowpark-bench-{name}-", suffix=".log")[1])


@contextmanager
def spawn_fake_ocr(
    *, pending_reads: int | None = None, unknown_completed: bool = False
) -> Iterator[Server]:
    """The fake OCR provider (``flowpark.samples.fakes``) in its own uvicorn process on loopback.

    ``pending_reads``: a job answers ``pending`` to that many status reads, then
    ``completed`` (None: pending until completed by the ``complete`` route).
    ``unknown_completed``: a job id it never made answers as a completed job, not 404
    (:mod:`bench.fakeocr`).
    """
    port = free_port()
    log = _log_file("ocr")
    cmd = [sys.executable, "-m", "bench.serve", "--fake-ocr", "--port", str(port)]
    if pending_reads is not None:
        cmd += ["--pending-reads", str(pending_reads)]
    if unknown_completed:
        cmd.append("--unknown-completed")
    env = dict(os.environ)
    provider = os.environ.get("FLOWPARK_BENCH_PROVIDER_PATH")
    if provider:  # bench compare: the same provider (the newest samples) for both sides
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), provider])
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{server.base_url}/fake/ocr/jobs/none", proc, log)
        yield server
    finally:
        server.stop()
        log.unlink(missing_ok=True)


@contextmanager
def spawn_server(
    database_url: str,
    ocr_url: str,
    *,
    sweeper: bool = False,
    scan_interval: float = 10.0,
    extra_env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """The flowpark server (``create_app``) under uvicorn in its own process on loopback,
    with the samples, the OCR at ``ocr_url`` and no OCR callbacks; without its sweeper
    unless ``sweeper`` (so parked instances stay parked while a bench measures starts)."""
    port = free_port()
    log = _log_file("server")
    env = dict(os.environ)
    env.update(
        {
            "FLOWPARK_DATABASE_URL": database_url,
            "FLOWPARK_OCR_BASE_URL": ocr_url,
            "FLOWPARK_OCR_CALLBACKS": "false",
            "FLOWPARK_API_TOKENS": API_TOKEN,
            "FLOWPARK_SELF_URL": f"http://127.0.0.1:{port}",
            "FLOWPARK_TIMER_SCAN_INTERVAL": str(scan_interval),
            "FLOWPARK_RUN_SWEEPER": "true" if sweeper else "false",
            "FLOWPARK_NODE_ID": "bench-server",
            **(extra_env or {}),
        }
    )
    cmd = [sys.executable, "-m", "bench.serve", "--app", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    try:
        _wait_http(f"{server.base_url}/healthz", proc, log)
        yield server
    finally:
        server.stop()
        log.unlink(missing_ok=True)


@asynccontextmanager
async def api_client(base_url: str, concurrency: int = 32) -> AsyncIterator[httpx.AsyncClient]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=base_url,
        timeout=60,
        limits=limits,
        headers={"Authorization": f"Bearer {API_TOKEN}"},
    ) as client:
        yield client


# -- statistics and output ---------------------------------------------------------------
def percentiles(values: Sequence[float], points: Sequence[float] = (50, 99)) -> dict[str, float]:
    """Nearest-rank percentiles (``p50``, ``p99``...) plus ``max`` of ``values``."""
    if not values:
        return {**{f"p{p:g}": float("nan") for p in points}, "max": float("nan")}
    ordered = sorted(values)
    out = {}
    for p in points:
        rank = max(1, int(-(-p * len(ordered) // 100)))  # ceil(p/100 * n)
        out[f"p{p:g}"] = ordered[min(rank, len(ordered)) - 1]
    out["max"] = ordered[-1]
    return out


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
        disable=not err_console.is_terminal and os.environ.get("BENCH_PROGRESS") != "1",
    )


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _pg_version(store: BenchStore | None) -> str | None:
    if store is None or store.kind != "postgres":
        return None
    eng = create_engine(sync_url(store.url))
    try:
        with eng.connect() as conn:
            return str(conn.execute(text("SHOW server_version")).scalar_one())
    finally:
        eng.dispose()


def machine(store: BenchStore | None = None) -> dict[str, Any]:
    """What the figures were measured on."""
    import sqlite3

    return {
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgresql": _pg_version(store),
        # other work on the machine during the run shows here (1-minute load average)
        "loadavg_1m_at_end": round(os.getloadavg()[0], 2),
    }


@dataclass
class Result:
    """One scenario's outcome: ``figures`` (the JSON keys), plus notes for the table;
    ``data``: more of ``details`` for the JSON only (too long for the table's caption)."""

    scenario: str
    store: str
    n: int
    figures: dict[str, Any]
    params: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    targets: dict[str, tuple[str, bool]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "store": self.store,
            "n": self.n,
            **self.figures,
            "params": self.params,
            "details": {**self.details, **self.data},
            "machine": self.machine,
            "targets": {k: {"target": t, "met": met} for k, (t, met) in self.targets.items()},
        }

    def emit(self, *, as_json: bool) -> None:
        table = Table(title=f"flowpark bench: {self.scenario} on {self.store} (n={self.n})")
        table.add_column("figure")
        table.add_column("value", justify="right")
        table.add_column("target")
        for key, value in self.figures.items():
            target, met = self.targets.get(key, ("", True))
            shown = (
                f"{value:,.3f}"
                if isinstance(value, float)
                else f"{value:,}"
                if isinstance(value, int) and not isinstance(value, bool)
                else str(value)
            )
            mark = "" if not target else ("[green]met[/green] " if met else "[red]missed[/red] ")
            table.add_row(key, shown, f"{mark}{target}")
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        details = "".join(f"\n{k}: {v}" for k, v in self.details.items())
        table.caption = (
            f"{params}{details}\n{self.machine.get('cpu_model')} x{self.machine.get('cpus')}"
        )
        if as_json:
            err_console.print(table)
            sys.stdout.write(json.dumps(self.as_json(), default=str) + "\n")
            sys.stdout.flush()
        else:
            Console().print(table)


async def run_concurrently(
    n: int, concurrency: int, job: Any, *, label: str, start: int = 0, rate: float | None = None
) -> list[float]:
    """Run ``await job(i)`` for i in ``start..start+n-1`` with ``concurrency`` workers and a
    progress bar (at most ``rate`` calls begun per second when given); returns each call's
    latency (seconds), in completion order."""
    import asyncio

    latencies: list[float] = []
    counter = iter(range(start, start + n))
    began = time.perf_counter()
    with progress() as bar:
        task = bar.add_task(label, total=n)

        async def worker() -> None:
            for i in counter:
                if rate:
                    delay = began + (i - start) / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                t0 = time.perf_counter()
                await job(i)
                latencies.append(time.perf_counter() - t0)
                bar.advance(task)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, max(n, 1)))))
    return latencies


class CpuMeter:
    """CPU seconds spent by this process and the given helper processes (the server, the
    fake OCR) between :meth:`start` and :meth:`stop`. PostgreSQL's backends are not
    counted (their per-process accounting did not add up under the pool)."""

    def __init__(self, store: BenchStore, helpers: dict[str, int] | None = None) -> None:
        self.store = store
        self.helpers = {"bench": os.getpid(), **(helpers or {})}
        self._t0: dict[str, float] = {}
        self.used: dict[str, float] = {}
        self.wall = 0.0

    @staticmethod
    def _cpu(pid: int) -> float:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            return t.user + t.system
        return 0.0

    def snapshot(self) -> dict[str, float]:
        return {name: self._cpu(pid) for name, pid in self.helpers.items()}

    def start(self) -> None:
        self._t0 = self.snapshot()
        self._wall0 = time.perf_counter()

    def stop(self) -> dict[str, float]:
        end = self.snapshot()
        self.used = {k: end[k] - self._t0.get(k, 0.0) for k in end}
        self.wall = time.perf_counter() - self._wall0
        return self.used
