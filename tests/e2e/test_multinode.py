"""Three real flowpark nodes on one PostgreSQL: every document completes exactly once.

Real processes on loopback (:mod:`tests.e2e.cluster`): ``flowpark fakes`` and three
``flowpark serve`` nodes on a fresh PostgreSQL database. N documents are started over HTTP,
spread across the nodes; the OCR webhook is off, so only parked polls and sweeps finish them.
Every document completes once, with one row per (instance, step, scope); the provider saw
exactly as many calls as there are rows (a call beyond its row only where a lease lapsed
under load, logged and fenced); every node swept some of the work.

``FLOWPARK_MULTINODE_N`` sets N (default 1,000: 24 starts in flight over three nodes of 8
runs each, about 25 s on an idle two-CPU machine; 2,000 makes it a longer load run).
The failure variants (a node killed, every node stopped) are in ``test_multinode_failover``.
Figures (durations, documents/s) are printed (``pytest -s``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.e2e.cluster import (
    Cluster,
    Starts,
    all_completed,
    assert_exactly_once,
    attempts_and_rows,
    claims_by_node,
    documents,
    lapses,
    migrated_cluster,
    provider_calls,
    reader,
    report,
)
from tests.support.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

N = int(os.environ.get("FLOWPARK_MULTINODE_N", "1000"))


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
