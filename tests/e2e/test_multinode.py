"""Several real flowpark nodes on one PostgreSQL: every document completes exactly once.

Each test runs real processes on loopback: ``flowpark fakes`` (the fake OCR every node
calls, so a job uploaded through one node is read by another) and ``flowpark serve`` /
``flowpark worker`` nodes sharing a fresh PostgreSQL database migrated with
``flowpark db upgrade``. Documents are started over HTTP, spread across the serve nodes;
the OCR webhook is off, so only parked polls and sweeps finish them. The journal is then
read from PostgreSQL directly, and the fake's request counts are compared with it.

* all nodes up: N documents complete once each, one row per (instance, step, scope),
  the provider saw exactly as many calls as there are rows;
* one node SIGKILLed mid-way: its leased instances are taken over within one lease
  (+ scan interval), all documents complete, none twice;
* every node stopped while documents are parked (the provider finishes their jobs
  meanwhile), new nodes started (one serve, two workers): all resume and complete.

``FLOWPARK_MULTINODE_N`` sets the number of documents of the first test (default 2,000:
about 45 s on a two-CPU machine, over two minutes when other heavy jobs share it; lower it
there), ``FLOWPARK_MULTINODE_VARIANT_N`` those of the other two (default 300).
Figures (durations, documents/s, takeover time) are printed (``pytest -s``).
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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from app.store.db import make_async_engine
from tests.support.eventually import eventually
from tests.support.server import TOKEN, flowpark_command, free_port

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

N = int(os.environ.get("FLOWPARK_MULTINODE_N", "2000"))
N_VARIANT = int(os.environ.get("FLOWPARK_MULTINODE_VARIANT_N", "300"))
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


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """A fresh PostgreSQL database migrated with ``flowpark db upgrade``; every process the
    test starts is stopped afterwards."""
    subprocess.run(
        [*flowpark_command(), "db", "upgrade", "--url", pg_url],
        check=True,
        capture_output=True,
        timeout=120,
    )
    nodes = Cluster(pg_url, tmp_path)
    try:
        yield nodes
    finally:
        nodes.stop_all()


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[AsyncEngine]:
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
        "SELECT instance_id, count(*) FROM outbox_event "
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


# -- the tests ---------------------------------------------------------------------------
@pytest.mark.timeout(600)
async def test_documents_over_three_nodes_complete_exactly_once(
    cluster: Cluster,
    db: AsyncEngine,
) -> None:
    fakes = await cluster.start_fakes()
    nodes = await cluster.start_nodes("node-1", "node-2", "node-3")
    began = time.monotonic()
    starts = Starts([n.url for n in nodes])
    await starts.run(documents(N, "doc"))
    started_in = time.monotonic() - began
    assert len(starts.instance_ids) == N
    await eventually(
        lambda: all_completed(db, N),
        timeout=60 + N * 0.1,
        interval=0.5,
        what=f"{N} documents completed",
    )
    took = time.monotonic() - began

    by_capability = await assert_exactly_once(db, N)
    attempts, journal = attempts_and_rows(await provider_calls(fakes), by_capability)
    # a call beyond its row only where a lease lapsed under load (logged, fenced)
    lapsed = lapses(nodes)
    assert journal <= attempts <= journal + lapsed, (attempts, journal, lapsed)
    assert by_capability["ocr.upload"] == N
    claimed = claims_by_node(nodes)
    assert all(claimed.values()), claimed  # every node swept some of the work
    for node in nodes:
        out = node.output()
        assert f"[{node.name}]" in out
        assert " ERROR " not in out, out[-5000:]
    report(
        "all nodes up",
        documents=N,
        started_s=started_in,
        completed_s=took,
        documents_per_s=N / took,
        attempts=attempts,
        rows=journal,
        lapsed=lapsed,
        claims=claimed,
        starts_retried=dict(starts.errors),
    )


@pytest.mark.timeout(600)
async def test_a_killed_node_loses_nothing_and_its_leases_are_taken_over_in_one_lease(
    cluster: Cluster,
    db: AsyncEngine,
) -> None:
    fakes = await cluster.start_fakes()
    nodes = await cluster.start_nodes("node-1", "node-2", "node-3")
    began = time.monotonic()
    halfway = asyncio.Event()
    starts = Starts([n.url for n in nodes])
    starting = asyncio.create_task(
        starts.run(documents(N_VARIANT, "kill"), halfway, at=N_VARIANT // 2)
    )
    await asyncio.wait_for(halfway.wait(), 120)

    async def busiest() -> Proc:
        """A node advancing several instances right now (holding their leases), frozen
        (SIGSTOP) while it holds them, so none is released between the look and the kill."""
        owners = await rows(
            db,
            "SELECT lease_owner, count(*) AS n FROM flow_instance "
            "WHERE state = 'running' GROUP BY lease_owner "
            "ORDER BY n DESC LIMIT 1",
        )
        assert owners and owners[0].n >= 2, owners
        node = next(n for n in nodes if n.name == owners[0].lease_owner)
        assert node.process is not None
        node.process.send_signal(signal.SIGSTOP)
        still = await rows(
            db,
            "SELECT id FROM flow_instance WHERE state = 'running' AND lease_owner = :node",
            node=node.name,
        )
        if not still:  # it let them go before it stopped: let it run, look again
            node.process.send_signal(signal.SIGCONT)
        assert still, f"{node.name} released its leases before it was stopped"
        return node

    victim = await eventually(busiest, timeout=60, interval=0.01, what="a busy node")
    victim.kill()
    killed_at = time.monotonic()
    held = await rows(
        db,
        "SELECT id FROM flow_instance WHERE state = 'running' AND lease_owner = :node",
        node=victim.name,
    )
    assert held, "the killed node held no lease: nothing to take over"

    async def taken_over() -> None:
        still = await scalar(
            db,
            "SELECT count(*) FROM flow_instance WHERE state = 'running' AND lease_owner = :node",
            node=victim.name,
        )
        assert still == 0, f"{still} instances still leased to the dead node"

    await eventually(
        taken_over,
        timeout=LEASE + SCAN + 30,
        interval=0.1,
        what="the dead node's leases taken over",
    )
    takeover = time.monotonic() - killed_at
    await starting
    assert len(starts.instance_ids) == N_VARIANT
    await eventually(
        lambda: all_completed(db, N_VARIANT),
        timeout=60 + N_VARIANT * 0.1,
        interval=0.5,
        what=f"{N_VARIANT} documents completed",
    )
    took = time.monotonic() - began

    by_capability = await assert_exactly_once(db, N_VARIANT)
    attempts, journal = attempts_and_rows(await provider_calls(fakes), by_capability)
    # a call the dead node made for an instance it held may have no row: at most one each
    assert journal <= attempts <= journal + len(held), (attempts, journal, len(held))
    assert takeover <= LEASE + SCAN + SLACK, takeover
    report(
        "one node SIGKILLed",
        victim=victim.name,
        documents=N_VARIANT,
        held_at_kill=len(held),
        takeover_s=takeover,
        completed_s=took,
        starts_retried=dict(starts.errors),
        attempts=attempts,
        rows=journal,
    )


@pytest.mark.timeout(600)
async def test_every_node_stopped_while_documents_are_parked_new_nodes_finish_them(
    cluster: Cluster,
    db: AsyncEngine,
) -> None:
    fakes = await cluster.start_fakes(per_page=3600)  # no job ends by itself
    first = await cluster.start_nodes("node-1", "node-2", "node-3")
    starts = Starts([n.url for n in first])
    await starts.run(documents(N_VARIANT, "park"))
    stop(*first)
    stopped_at = await scalar(db, "SELECT now()")
    at_stop = await states(db)
    assert at_stop["completed"] == 0, dict(at_stop)
    parked = await scalar(
        db,
        "SELECT count(*) FROM flow_instance WHERE state = 'suspended' "
        "AND lease_owner IS NULL AND wake_at IS NOT NULL",
    )
    assert parked >= N_VARIANT - at_stop["running"] > 0, dict(at_stop)
    # while no node runs, the provider finishes every job
    async with httpx.AsyncClient(base_url=fakes.url, timeout=30) as http:
        jobs = (await http.get("/fake/ocr/jobs")).json()
        for job in jobs:
            resp = await http.post(f"/fake/ocr/jobs/{job['jobId']}/complete")
            assert resp.status_code == 200, resp.text

    began = time.monotonic()
    second = [
        *await cluster.start_nodes("node-4"),
        *await cluster.start_nodes("node-5", "node-6", role="worker"),
    ]
    await eventually(
        lambda: all_completed(db, N_VARIANT),
        timeout=90 + N_VARIANT * 0.1,
        interval=0.5,
        what=f"{N_VARIANT} documents resumed and completed",
    )
    took = time.monotonic() - began
    await assert_exactly_once(db, N_VARIANT)
    finished_late = await scalar(
        db,
        "SELECT count(*) FROM flow_step "
        "WHERE capability_id = 'document.extract' "
        "AND committed_at > :t",
        t=stopped_at,
    )
    assert finished_late == N_VARIANT  # every document finished on a new node
    claimed = claims_by_node(second)
    assert sum(claimed.values()) >= N_VARIANT, claimed
    report(
        "all nodes restarted",
        documents=N_VARIANT,
        parked_at_stop=parked,
        running_at_stop=at_stop["running"],
        resumed_in_s=took,
        claims=claimed,
    )
