"""Real flowpark nodes on one PostgreSQL losing nodes: nothing is lost, nothing runs twice.

Real processes on loopback (:mod:`tests.e2e.cluster`), as in ``test_multinode``:

* one node SIGKILLed mid-way: its leased instances are taken over within one lease
  (+ scan interval), all documents complete, none twice;
* every node stopped while documents are parked (the provider finishes their jobs
  meanwhile), new nodes started (one serve, two workers): all resume and complete.

``FLOWPARK_MULTINODE_VARIANT_N`` sets the number of documents of each (default 300).
Figures (durations, takeover time) are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.e2e.cluster import (
    LEASE,
    SCAN,
    SLACK,
    Cluster,
    Proc,
    Starts,
    all_completed,
    assert_exactly_once,
    attempts_and_rows,
    claims_by_node,
    documents,
    migrated_cluster,
    provider_calls,
    reader,
    report,
    rows,
    scalar,
    states,
    stop,
)
from tests.support.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

N_VARIANT = int(os.environ.get("FLOWPARK_MULTINODE_VARIANT_N", "300"))


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    """The test's processes on a fresh PostgreSQL database migrated with
    ``flowpark db upgrade``; all stopped afterwards."""
    with migrated_cluster(pg_url, tmp_path) as nodes:
        yield nodes


@pytest.fixture
async def db(pg_url: str) -> AsyncIterator[AsyncEngine]:
    """The test's own connection to the nodes' database (reads only)."""
    async with reader(pg_url) as engine:
        yield engine


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
