"""A PostgreSQL failover under load: nothing acknowledged is lost, nothing runs twice.

A primary and a synchronous streaming-replication standby of the test's own
(:mod:`tests.support.replicated_postgres`), migrated with ``flowpark db upgrade`` through
the multi-host URL that names both (``target_session_attrs=read-write``); the fake
providers, a ``flowpark serve`` and a ``flowpark worker`` node on that URL
(:mod:`tests.e2e.cluster`). Documents are in flight when the primary goes: parked in their
OCR poll, mid-call, still arriving. Then either

* ``switchover``: the primary stopped cleanly (fast shutdown), the standby promoted; or
* ``kill``: the primary SIGKILLed (postmaster and every backend), the standby promoted,

each after :data:`DETECTION_SECONDS` with no primary (an HA manager's detection time),
while clients keep starting, signalling and reading. Passes when every answer meanwhile
is 503 ``store_unavailable`` with ``Retry-After`` (never a 500, no traceback logged) and
``/readyz`` says the database is unavailable, every start answered before the switch exists
on the new primary, every document completes, no execution (instance, step, scope, kind)
succeeded twice, and the provider holds one job per document. The figures (``pytest -s``)
include the seconds from the primary's loss to the first instance advanced on the new
primary.

Each run takes 20-40 s with :data:`DOCUMENTS_IN_FLIGHT` = 300 on a 2-core machine, with its
load (servers up 2-4 s, nodes ~5 s, the switch ~3 s, the rest 11-15 s).
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.store.db import make_async_engine
from tests.e2e.cluster import (
    DOCUMENTS,
    Cluster,
    Starter,
    documents,
    no_duplicate_rows,
    ocr_jobs,
    report,
    rows,
    scalar,
    states,
)
from tests.support.eventually import eventually
from tests.support.replicated_postgres import ReplicatedPostgres, replicated_postgres
from tests.support.server import TOKEN, flowpark_command

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

DOCUMENTS_IN_FLIGHT = 300
#: seconds without a primary before the standby is promoted (failure detection)
DETECTION_SECONDS = 3.0
#: answers allowed to the probes, besides 503 ``store_unavailable``: a start (202, or 200
#: for a repeat), a read (200), a signal (202: stored; 409 once the probed document ended)
ALLOWED = {
    ("start", 202, ""),
    ("start", 200, ""),
    ("read", 200, ""),
    ("signal", 202, ""),
    ("signal", 409, "instance_ended"),
}
UNAVAILABLE = (503, "store_unavailable")


class Probes:
    """Clients starting, signalling and reading on a serve node until told to stop; every
    answer recorded as (method, status, code, Retry-After)."""

    def __init__(self, url: str, names: list[str], known: str) -> None:
        self.url = url
        self.names = names
        self.known = known
        self.answers: list[tuple[str, int, str, str | None]] = []
        self.started: dict[str, str] = {}
        self.done = asyncio.Event()

    async def _one(
        self, http: httpx.AsyncClient, method: str, call: object, name: str = ""
    ) -> None:
        assert asyncio.iscoroutine(call)
        try:
            resp = await call
        except httpx.TransportError as exc:  # the node itself must answer throughout
            raise AssertionError(f"{method}: the node did not answer: {exc!r}") from exc
        json_body = resp.headers.get("content-type", "").endswith("json")
        code = resp.json().get("code", "") if json_body and resp.status_code >= 400 else ""
        self.answers.append((method, resp.status_code, code, resp.headers.get("retry-after")))
        if method == "start" and resp.status_code in (200, 202):
            self.started[name] = resp.json()["instanceId"]

    async def run(self, clients: int = 4) -> None:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=self.url, headers=headers, timeout=60) as http:

            async def client(index: int) -> None:
                turn = 0
                while not self.done.is_set():
                    name = self.names[(index + turn * clients) % len(self.names)]
                    turn += 1
                    await self._one(
                        http,
                        "start",
                        http.post(
                            DOCUMENTS,
                            json={"documentId": name, "pages": 1},
                            headers={"Idempotency-Key": name},
                        ),
                        name,
                    )
                    await self._one(
                        http,
                        "signal",
                        http.post(
                            f"{DOCUMENTS}/{self.known}/signals/ocr.completed",
                            json={"jobId": "failover-probe"},
                            headers={"Idempotency-Key": f"{name}-{turn}-signal"},
                        ),
                    )
                    await self._one(http, "read", http.get(f"/api/v1/instances/{self.known}"))
                    await asyncio.sleep(0.1)

            await asyncio.gather(*(client(i) for i in range(clients)))


async def first_advance(direct: str, gone_at: datetime, lost: float) -> float:
    """Seconds from ``lost`` (monotonic: the primary's loss began) until the new primary,
    read directly, holds a journal row committed after ``gone_at`` (the old primary had
    ended by then: every such row was committed on the new one)."""
    engine = make_async_engine(direct, pool_size=1, pool_pre_ping=True)
    try:

        async def advanced() -> None:
            n = await scalar(
                engine, "SELECT count(*) FROM flow_step WHERE committed_at > :t", t=gone_at
            )
            assert n > 0

        await eventually(advanced, timeout=60, interval=0.05, what="a step on the new primary")
    finally:
        await engine.dispose()
    return time.monotonic() - lost


async def readiness(url: str) -> httpx.Response:
    """``GET /readyz`` of the node at ``url``."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        return await http.get("/readyz")


async def no_execution_succeeded_twice(db: AsyncEngine) -> None:
    twice = await rows(
        db,
        "SELECT instance_id, step_id, scope, kind, count(*) FROM flow_step "
        "WHERE outcome = 'success' GROUP BY instance_id, step_id, scope, kind "
        "HAVING count(*) > 1",
    )
    assert twice == [], twice[:10]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("how", ["switchover", "kill"])
async def test_a_primary_failover_loses_no_acknowledged_start_and_runs_nothing_twice(
    how: str, tmp_path: Path
) -> None:
    began = time.monotonic()
    with replicated_postgres() as pair:
        up = time.monotonic() - began
        subprocess.run(
            [*flowpark_command(), "db", "upgrade", "--url", pair.url],
            check=True,
            capture_output=True,
            timeout=120,
        )
        nodes = Cluster(pair.url, tmp_path)
        db = make_async_engine(pair.url, pool_size=2)
        try:
            await run_through_failover(how, pair, nodes, db, began, up)
        finally:
            await db.dispose()
            nodes.stop_all()


async def run_through_failover(
    how: str,
    pair: ReplicatedPostgres,
    nodes: Cluster,
    db: AsyncEngine,
    began: float,
    up: float,
) -> None:
    fakes = await nodes.start_fakes()
    (serve,) = await nodes.start_nodes("serve-a")
    await nodes.start_nodes("worker-b", role="worker")
    names = documents(DOCUMENTS_IN_FLIGHT, how)
    half = DOCUMENTS_IN_FLIGHT // 2
    before = Starter([serve.url], pages=4)  # ~2 s of OCR: parked in the poll at the switch
    await before.run(names[: half // 2])
    arriving = Starter([serve.url], pages=2, clients=4)
    still_arriving = asyncio.create_task(arriving.run(names[half // 2 : half], within=120))
    await eventually(
        lambda: len(arriving.instance_ids) >= 5, timeout=30, interval=0.05, what="arrivals"
    )
    known = next(iter(before.instance_ids.values()))
    probes = Probes(serve.url, names[half:], known)
    probing = asyncio.create_task(probes.run())
    in_flight = await states(db)
    # an acknowledged commit is on the standby too
    assert pair.replication() == [("standby", "streaming", "sync")]
    assert in_flight["suspended"] > 0, dict(in_flight)  # parked in their poll

    # the primary goes; DETECTION_SECONDS later the standby is promoted
    acknowledged = {**before.instance_ids, **arriving.instance_ids, **probes.started}
    lost = time.monotonic()
    if how == "kill":
        pair.kill_primary()
    else:
        pair.stop_primary()
    # a row committed after this instant was committed on the new primary
    gone_at = datetime.now(UTC)
    advance = asyncio.create_task(first_advance(pair.standby.url, gone_at, lost))
    await asyncio.sleep(DETECTION_SECONDS)  # the outage an HA manager takes to decide
    during = len(probes.answers)
    not_ready = await readiness(serve.url)
    pair.promote()
    promoted = time.monotonic() - lost
    to_first_advance = await advance
    probes.done.set()
    await probing
    await still_arriving
    await db.dispose()  # the test's own connections were to the old primary

    # the rest arrive on the new primary (a start refused meanwhile is repeated)
    after = Starter([serve.url], pages=1)
    await after.run([n for n in names[half:] if n not in probes.started])
    answered = {**before.instance_ids, **arriving.instance_ids, **probes.started}
    answered.update(after.instance_ids)

    async def every_document_completed() -> None:
        now = await states(db)
        assert now == Counter({"completed": DOCUMENTS_IN_FLIGHT}), dict(now)

    await eventually(every_document_completed, timeout=60, interval=0.5, what="all completed")
    drained = time.monotonic() - lost
    # readiness said so meanwhile (without the driver's words), and says ready again
    assert not_ready.status_code == 503, not_ready.text
    assert not_ready.json()["checks"]["database"] == "store_unavailable", not_ready.text

    async def ready_again() -> None:
        answer = await readiness(serve.url)
        assert answer.status_code == 200, answer.text

    await eventually(ready_again, timeout=30, interval=0.2, what="ready on the new primary")

    # every start answered before the switch (and after it) is on the new primary
    stored = {str(r.id) for r in await rows(db, "SELECT id FROM flow_instance")}
    assert set(acknowledged.values()) <= stored, set(acknowledged.values()) - stored
    assert set(answered.values()) == stored
    assert await scalar(db, "SELECT inet_server_port()") == pair.standby.port
    await no_execution_succeeded_twice(db)
    await no_duplicate_rows(db)
    jobs = await ocr_jobs(fakes)
    per_document = Counter(j["documentId"] for j in jobs)
    assert set(per_document) == set(names) and set(per_document.values()) == {1}, (
        per_document.most_common(3)
    )

    # while there was no primary: 503 store_unavailable with Retry-After, never a 500
    kinds = Counter((m, s, c) for m, s, c, _ in probes.answers)
    assert all(k in ALLOWED or k[1:] == UNAVAILABLE for k in kinds), kinds
    refused = [a for a in probes.answers if a[1] == 503]
    assert refused and all(a[3] for a in refused), kinds
    assert during > 0 and all(s == 503 for _, s, _, _ in probes.answers[during // 2 : during]), (
        kinds
    )
    outputs = "".join(p.output() for p in nodes.procs)
    assert "internal_error" not in outputs, outputs[-3000:]
    assert "Traceback" not in outputs, outputs[-5000:]
    # an expected outage: a few warning lines per node and kind, not one per request
    lines = Counter(
        (proc.name, line.split("store unavailable (", 1)[1].split(")", 1)[0])
        for proc in nodes.procs
        for line in proc.output().splitlines()
        if "store unavailable (" in line
    )
    assert lines and max(lines.values()) <= 4, lines
    assert (before.answers | arriving.answers | after.answers).keys() <= {200, 202, 503}
    report(
        f"database failover ({how})",
        documents=DOCUMENTS_IN_FLIGHT,
        in_flight=dict(in_flight),
        acknowledged_before=len(acknowledged),
        completed=DOCUMENTS_IN_FLIGHT,
        duplicates=0,
        provider_jobs_per_document=1,
        answers_500=0,
        answers_503=len(refused),
        promoted_after_s=promoted,
        loss_to_first_advance_s=to_first_advance,
        promotion_to_first_advance_s=to_first_advance - promoted,
        all_completed_after_s=drained,
        servers_up_s=up,
        test_s=time.monotonic() - began,
    )
