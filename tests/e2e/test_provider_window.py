"""A vendor's "10 requests per second", as the vendor counts it: three real nodes on one
PostgreSQL call the fake OCR provider under the limit ``Provider(limit=10, per="PT1S",
burst=10)`` declares (set here with ``FLOWPARK_PROVIDER_LIMITS``: 10 calls over 1 s plus
the 100 ms margin, the burst of 10), and the provider never sees more than 10 calls in any
window of one second, whichever instant the window starts at. (The schedule used to place a
burst's slots in the past and go on at the rate after it: 19 calls in a second.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from flowpark import Provider
from tests.e2e.cluster import Cluster, Starts, documents, migrated_cluster
from tests.support.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

#: The vendor's limit, as a flow would declare it.
VENDOR = Provider("ocr", limit=10, per="PT1S", burst=10)
#: Documents started: each makes an upload and status reads, far more than 10 a second.
N = 60


@pytest.fixture
def cluster(pg_url: str, tmp_path: Path) -> Iterator[Cluster]:
    with migrated_cluster(pg_url, tmp_path) as nodes:
        limit = {"rate_per_second": VENDOR.rate_per_second, "burst": VENDOR.burst}
        nodes.node_settings["provider_limits"] = json.dumps({"ocr": limit})
        yield nodes


def most_in_a_second(instants_ms: list[int]) -> int:
    """The most calls in any window of 1,000 ms (half-open), wherever it starts."""
    ordered = sorted(instants_ms)
    most, first = 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= 1000:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.timeout(300)
async def test_three_nodes_never_put_more_than_10_calls_in_any_second(cluster: Cluster) -> None:
    fakes = await cluster.start_fakes()
    nodes = await cluster.start_nodes("node-1", "node-2", "node-3")
    since_ms = int(time.time() * 1000)
    starts = Starts([n.url for n in nodes])
    await starts.run(documents(N, "win"))
    async with httpx.AsyncClient(base_url=fakes.url, timeout=10) as http:

        async def served() -> list[int]:
            """The instants of the calls the provider served, once 15 s' worth at the
            limit (raises AssertionError before)."""
            resp = await http.get("/fake/ocr/admin/load", params={"since": since_ms})
            assert resp.status_code == 200, resp.text
            instants: list[int] = resp.json()["servedMs"]
            assert len(instants) >= 150, len(instants)
            return instants

        calls = await eventually(served, timeout=120, interval=1, what="15 s of calls")
    ordered = sorted(calls)
    dense = max(
        ([at for at in ordered if first <= at < first + 1000] for first in ordered), key=len
    )
    assert len(dense) <= 10, [at - dense[0] for at in dense]
