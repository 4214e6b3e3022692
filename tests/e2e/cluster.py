"""Real flowpark processes on one PostgreSQL database, for the multi-node tests
(``test_multinode``, ``test_multinode_failover``, ``test_chaos``).

``flowpark fakes`` (the fake OCR every node calls, so a job uploaded through one node is
read by another) and ``flowpark serve`` / ``flowpark worker`` nodes share a fresh PostgreSQL
database migrated with ``flowpark db upgrade``; documents are started over HTTP, spread
across the serve nodes; the OCR webhook is off, so only parked polls and sweeps finish them.
The journal is read from PostgreSQL directly, and the fake's request counts are compared
with it.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.db import make_async_engine
from tests.support.eventually import eventually
from tests.support.server import TOKEN, flowpark_command, free_port

LEASE = 3.0  # seconds
SCAN = 0.5  # seconds between sweeps
PER_PAGE = 0.5  # seconds the fake OCR takes per page
SLACK = 2.0  # seconds of scheduling noise allowed on a loaded machine
CLIENTS = 24  # start requests in flight at once
POOL = 8  # database connections per node (no overflow): the server is shared
CONCURRENCY = 8  # runs per node: no more than its connections
DOCUMENTS = "/api/v1/documents"


# -- processes ---------------------------------------------------------------------------
@dataclass
class Proc:
    """One child process (``flowpark ...``) with its output in a log file."""

    name: str
    args: list[str]
    env: dict[str, str]
    log_path: Path
    port: int | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Proc:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*flowpark_command(), *self.args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self, timeout: float = 30) -> None:
        """SIGINT, as an operator stops a node; SIGKILL if it hangs."""
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Cluster:
    """The fakes server and the nodes of one test, on one PostgreSQL database."""

    database_url: str
    folder: Path
    procs: list[Proc] = field(default_factory=list)
    fakes: Proc | None = None
    #: more ``FLOWPARK_*`` settings of every node, over the defaults (lowercase names
    #: without the prefix)
    node_settings: dict[str, str] = field(default_factory=dict)

    def _env(self, **values: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.update({f"FLOWPARK_{k.upper()}": v for k, v in values.items()})
        return env

    async def start_fakes(self, per_page: float = PER_PAGE) -> Proc:
        port = free_port()
        self.fakes = Proc(
            "fakes",
            [
                "fakes",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--per-page",
                str(per_page),
                "--log-level",
                "warning",
            ],
            self._env(api_tokens=TOKEN),
            self.folder / "fakes.log",
            port,
        ).start()
        self.procs.append(self.fakes)
        fakes = self.fakes
        await eventually(lambda: healthy(fakes), timeout=30, what="fakes up")
        return fakes

    async def start_nodes(self, *names: str, role: str = "serve") -> list[Proc]:
        """Start nodes (``serve`` on a free loopback port, or ``worker``); wait until up."""
        assert self.fakes is not None
        nodes = []
        for name in names:
            port = free_port() if role == "serve" else None
            args = (
                ["serve", "--host", "127.0.0.1", "--port", str(port)]
                if role == "serve"
                else ["worker"]
            )
            env = self._env(
                database_url=self.database_url,
                node_id=name,
                api_tokens=TOKEN,
                ocr_base_url=self.fakes.url,
                jobs_base_url=self.fakes.url,
                ocr_callbacks="false",
                timer_scan_interval=str(SCAN),
                lease_seconds=str(LEASE),
                sample_ocr_per_page=str(PER_PAGE),
                db_pool_size=str(POOL),
                concurrency=str(CONCURRENCY),
                **({"self_url": f"http://127.0.0.1:{port}"} if port else {}),
            )
            env.update({f"FLOWPARK_{k.upper()}": v for k, v in self.node_settings.items()})
            node = Proc(
                name, [*args, "--log-level", "info"], env, self.folder / f"{name}.log", port
            ).start()
            self.procs.append(node)
            nodes.append(node)
        for node in nodes:
            await eventually(
                partial(healthy if node.port is not None else worker_ready, node),
                timeout=60,
                what=f"{node.name} up",
            )
        return nodes

    def stop_all(self) -> None:
        stop(*reversed(self.procs))


def stop(*procs: Proc, timeout: float = 30) -> None:
    """SIGINT every process at once (as an operator stops nodes), then wait for each;
    SIGKILL one that hangs."""
    running = [p for p in procs if p.alive()]
    for proc in running:
        assert proc.process is not None
        proc.process.send_signal(signal.SIGINT)
    for proc in running:
        proc.stop(timeout)


async def healthy(proc: Proc) -> None:
    assert proc.alive(), f"{proc.name} exited:\n{proc.output()[-3000:]}"
    async with httpx.AsyncClient(base_url=proc.url, timeout=5) as http:
        try:
            assert (await http.get("/healthz")).status_code == 200
        except httpx.TransportError as exc:
            raise AssertionError(f"{proc.name} not up: {exc}") from exc


async def worker_ready(proc: Proc) -> None:
    assert proc.alive(), f"{proc.name} exited:\n{proc.output()[-3000:]}"
    assert f"flowpark worker {proc.name} sweeping" in proc.output()


@contextmanager
def migrated_cluster(pg_url: str, folder: Path) -> Iterator[Cluster]:
    """A :class:`Cluster` on ``pg_url`` (an empty database, migrated here with
    ``flowpark db upgrade``); every process started through it is stopped afterwards."""
    subprocess.run(
        [*flowpark_command(), "db", "upgrade", "--url", pg_url],
        check=True,
        capture_output=True,
        timeout=120,
    )
    nodes = Cluster(pg_url, folder)
    try:
        yield nodes
    finally:
        nodes.stop_all()


@asynccontextmanager
async def reader(pg_url: str) -> AsyncIterator[AsyncEngine]:
    """The test's own connection to the nodes' database (reads only)."""
    engine = make_async_engine(pg_url, pool_size=2)
    try:
        yield engine
    finally:
        await engine.dispose()


# -- the database, read directly ---------------------------------------------------------
async def scalar(db: AsyncEngine, sql: str, **params: Any) -> Any:
    async with db.connect() as conn:
        return (await conn.execute(text(sql), params)).scalar_one()


async def rows(db: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with db.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def states(db: AsyncEngine) -> Counter[str]:
    return Counter(
        {
            r.state: r.n
            for r in await rows(db, "SELECT state, count(*) AS n FROM flow_instance GROUP BY state")
        }
    )


async def all_completed(db: AsyncEngine, n: int) -> None:
    now = await states(db)
    assert now["completed"] == n, dict(now)


async def assert_exactly_once(db: AsyncEngine, n: int) -> Counter[str]:
    """Every document completed once; one execution row per (instance, step, scope) and at
    most one stored window per bound, all successful; one ``document.processed`` event each.
    Returns rows by capability."""
    assert await states(db) == Counter({"completed": n})
    assert await scalar(db, "SELECT count(DISTINCT input->>'documentId') FROM flow_instance") == n
    # one execution per (instance, step, scope); beside it at most one stored window
    # (a poll's budget, a call's retry window: kind deadline) per bound
    repeated = await rows(
        db,
        "SELECT instance_id, step_id, scope, count(*) FROM flow_step WHERE kind <> 'deadline' "
        "GROUP BY instance_id, step_id, scope HAVING count(*) <> 1",
    )
    assert repeated == [], repeated[:10]
    windows = await rows(
        db,
        "SELECT instance_id, step_id, scope, capability_id, count(*) FROM flow_step "
        "WHERE kind = 'deadline' GROUP BY instance_id, step_id, scope, capability_id "
        "HAVING count(*) <> 1",
    )
    assert windows == [], windows[:10]
    failed = await rows(
        db,
        "SELECT instance_id, capability_id, error_type FROM flow_step WHERE outcome <> 'success'",
    )
    assert failed == [], failed[:10]
    per_instance = await rows(
        db,
        """
        SELECT i.id,
               count(*) FILTER (WHERE s.capability_id = 'ocr.upload') AS uploads,
               count(*) FILTER (WHERE s.capability_id = 'document.extract') AS extracts,
               count(*) FILTER (WHERE s.kind = 'emit') AS emits
        FROM flow_instance i LEFT JOIN flow_step s ON s.instance_id = i.id GROUP BY i.id""",
    )
    wrong = [r for r in per_instance if (r.uploads, r.extracts, r.emits) != (1, 1, 1)]
    assert wrong == [], wrong[:10]
    events = await rows(
        db,
        "SELECT instance_id, count(*) FROM flow_outbox_event "
        "WHERE name = 'document.processed' GROUP BY instance_id",
    )
    assert len(events) == n and all(count == 1 for _, count in events)
    return Counter(
        {
            r.capability_id: r.n
            for r in await rows(
                db, "SELECT capability_id, count(*) AS n FROM flow_step GROUP BY capability_id"
            )
        }
    )


async def provider_calls(fakes: Proc) -> Counter[str]:
    async with httpx.AsyncClient(base_url=fakes.url, timeout=10) as http:
        resp = await http.get("/fake/stats")
        assert resp.status_code == 200, resp.text
        return Counter(resp.json()["ocr"])


def attempts_and_rows(calls: Counter[str], by_capability: Counter[str]) -> tuple[int, int]:
    """(capability executions the provider saw, journal rows of those capabilities):
    ``ocr.upload`` uploads once, ``ocr.status`` and ``document.extract`` read the job."""
    attempts = calls["upload"] + calls["status"]
    journal = (
        by_capability["ocr.upload"]
        + by_capability["ocr.status"]
        + by_capability["document.extract"]
    )
    return attempts, journal


def lapses(nodes: list[Proc]) -> int:
    """Runs a node stopped because its lease had lapsed and another node held the instance
    (each logged once by the engine as a stale fencing token)."""
    return sum(n.output().count("is stale on node") for n in nodes)


def claims_by_node(nodes: list[Proc]) -> dict[str, int]:
    """Instances each node's sweeps claimed, from its log lines."""
    pattern = re.compile(r"sweep on \S+: claimed (\d+)")
    return {n.name: sum(int(m) for m in pattern.findall(n.output())) for n in nodes}


# -- starting documents ------------------------------------------------------------------
@dataclass
class Starts:
    """Documents started over HTTP, round-robin over serve nodes; a start whose node does
    not answer is repeated on the next node with the same Idempotency-Key and body."""

    urls: list[str]
    pages: int = 1
    instance_ids: dict[str, str] = field(default_factory=dict)
    retried: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    async def run(
        self, documents: list[str], progress: asyncio.Event | None = None, at: int = 0
    ) -> None:
        gate = asyncio.Semaphore(CLIENTS)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        limits = httpx.Limits(max_connections=CLIENTS)
        clients = [
            httpx.AsyncClient(base_url=u, headers=headers, timeout=60, limits=limits)
            for u in self.urls
        ]

        async def start(index: int, document: str) -> None:
            async with gate:
                for turn in range(len(clients)):
                    client = clients[(index + turn) % len(clients)]
                    try:
                        resp = await client.post(
                            DOCUMENTS,
                            json={"documentId": document, "pages": self.pages},
                            headers={"Idempotency-Key": document},
                        )
                    except httpx.TransportError as exc:  # e.g. a keep-alive race, a dead node
                        self.retried += 1
                        self.errors[type(exc).__name__] += 1
                        continue
                    assert resp.status_code in (200, 202), resp.text
                    self.instance_ids[document] = resp.json()["instanceId"]
                    if progress is not None and len(self.instance_ids) >= at:
                        progress.set()
                    return
                raise AssertionError(f"no node answered the start of {document}")

        try:
            await asyncio.gather(*(start(i, d) for i, d in enumerate(documents)))
        finally:
            for client in clients:
                await client.aclose()


def documents(n: int, prefix: str) -> list[str]:
    return [f"{prefix}-{i:05d}" for i in range(n)]


def report(label: str, **figures: Any) -> None:
    shown = ", ".join(
        f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()
    )
    print(f"\n[multinode] {label}: {shown}")


# -- chaos: starts repeated until a node answers ---------------------------------------
async def no_duplicate_rows(db: AsyncEngine) -> None:
    """No journal row twice (per instance, step, scope, kind, try) and no event twice."""
    repeated = await rows(
        db,
        "SELECT instance_id, step_id, scope, kind, try_number, count(*) FROM flow_step "
        "GROUP BY instance_id, step_id, scope, kind, try_number HAVING count(*) > 1",
    )
    assert repeated == [], repeated[:10]
    events = await rows(
        db,
        "SELECT instance_id, count(*) FROM flow_outbox_event GROUP BY instance_id "
        "HAVING count(*) > 1",
    )
    assert events == [], events[:10]


class Starter:
    """Starts documents over HTTP on any serve node; a start no node answers (all being
    restarted) is repeated, with the same Idempotency-Key and body, until one does."""

    def __init__(self, urls: list[str], pages: int = 2, clients: int = 16) -> None:
        self.urls = urls
        self.pages = pages
        self.gate = asyncio.Semaphore(clients)
        self.instance_ids: dict[str, str] = {}
        self.repeated = 0
        self.answers: Counter[int] = Counter()

    async def run(self, names: list[str], within: float = 90.0) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=headers, timeout=30) as http:

            async def start(index: int, document: str) -> None:
                deadline = time.monotonic() + within
                turn = index
                async with self.gate:
                    while True:
                        url = self.urls[turn % len(self.urls)] + DOCUMENTS
                        turn += 1
                        try:
                            resp = await http.post(
                                url,
                                json={"documentId": document, "pages": self.pages},
                                headers={"Idempotency-Key": document},
                            )
                        except httpx.TransportError:
                            resp = None
                        if resp is not None:
                            self.answers[resp.status_code] += 1
                            assert resp.status_code in (200, 202, 503), resp.text
                            if resp.status_code != 503:
                                self.instance_ids[document] = resp.json()["instanceId"]
                                return
                        self.repeated += 1
                        assert time.monotonic() < deadline, f"no node started {document}"
                        await asyncio.sleep(0.2)

            await asyncio.gather(*(start(i, d) for i, d in enumerate(names)))


async def ocr_jobs(fakes: Proc) -> list[dict[str, str]]:
    """The fake OCR's jobs."""
    async with httpx.AsyncClient(base_url=fakes.url, timeout=30) as http:
        resp = await http.get("/fake/ocr/jobs")
        assert resp.status_code == 200, resp.text
        return list(resp.json())


async def provider_stats(fakes: Proc) -> dict[str, dict[str, int]]:
    """The fakes' request counts (``/fake/stats``)."""
    async with httpx.AsyncClient(base_url=fakes.url, timeout=30) as http:
        resp = await http.get("/fake/stats")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())
