"""Node liveness (``GET /api/v1/nodes``, ``/readyz``'s warnings): each node writes its row;
overdue work with no live sweeping node is said so, on both stores."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flowpark.engine.ports.nodes import NodeRecord
from flowpark.store.db import make_async_engine
from flowpark.store.nodes import SqlNodes
from tests.api.operator_support import operated
from tests.support.eventually import eventually
from tests.support.server import live_server

NODES = "/api/v1/nodes"


async def test_overdue_work_with_no_sweeping_node_is_said_so_until_one_sweeps(
    store_url: str,
) -> None:
    async with operated(store_url) as op:
        h = op.h
        started = await h.start("t.poll", {"order_id": "o-1"}, version="1.0.0")
        assert started.instance.state == "suspended"
        async with op.client() as client:
            first = (await client.get(NODES)).json()
            assert first["overdue"] == 0 and first["notice"] is None
            [me] = first["nodes"]
            assert me["id"] == op.server.settings.node_id
            assert me["role"] == "serve"
            assert me["sweeps"] is False and me["sweeping"] is False
            assert "t.poll@1.0.0" in me["flows"] and "t.await@1.0.0" in me["flows"]
            assert me["version"] and me["stoppedAt"] is None

            h.clock.advance(timedelta(minutes=5))  # the wake (a minute on) is long past

            async def said() -> dict[str, Any]:
                body = (await client.get(NODES)).json()
                assert body["notice"] is not None, body
                assert body["nodes"][0]["live"], body  # it beat since the clock moved
                return dict(body)

            body = await eventually(said, timeout=20)
            assert body["overdue"] == 1 and body["sweeping"] == 0 and body["live"] == 1
            assert body["notice"].startswith("no live sweeping node: 1 overdue instance ")
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text  # a warning, not unready
            assert ready.json()["warnings"] == {"sweepers": body["notice"]}

            # another node that sweeps, seen just now: the notice goes
            db = make_async_engine(store_url)
            try:
                now = h.clock.now()
                await SqlNodes(db).beat(
                    NodeRecord(
                        id="worker-9",
                        role="worker",
                        version="0.1.0",
                        flows=("t.poll@1.0.0",),
                        sweeps=True,
                        beat_seconds=10.0,
                        started_at=now,
                        seen_at=now,
                        last_sweep_at=now,
                        last_claimed=4,
                    )
                )
            finally:
                await db.dispose()
            both = (await client.get(NODES)).json()
            assert both["notice"] is None and both["sweeping"] == 1
            worker = next(n for n in both["nodes"] if n["id"] == "worker-9")
            assert worker["sweeping"] and worker["lastClaimed"] == 4
            assert "warnings" not in (await client.get("/readyz")).json()

            # ... until it falls silent for three beats
            h.clock.advance(timedelta(seconds=31))
            silent = (await client.get(NODES)).json()
            worker = next(n for n in silent["nodes"] if n["id"] == "worker-9")
            assert not worker["live"] and not worker["sweeping"]
            assert silent["notice"] is not None


async def test_a_sweeping_node_reports_its_sweeps_and_marks_its_row_stopped(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with live_server(url) as server:
        async with server.client() as client:

            async def swept() -> dict[str, Any]:
                [node] = (await client.get(NODES)).json()["nodes"]
                assert node["lastSweepAt"] is not None, node
                return dict(node)

            node = await eventually(swept, timeout=20)
            assert node["sweeps"] and node["sweeping"] and node["live"]
            assert node["lastClaimed"] == 0
            assert "document.process@1.0.0" in node["flows"]
        async with server.client(token=None) as anonymous:
            assert (await anonymous.get(NODES)).status_code == 401
    db = make_async_engine(url)
    try:
        [row] = await SqlNodes(db).list_nodes()
    finally:
        await db.dispose()
    assert row.id == server.settings.node_id
    assert row.stopped_at is not None and not row.live(row.stopped_at)


@pytest.mark.parametrize("overdue", [0, 3])
def test_the_notice_speaks_only_of_overdue_work(overdue: int) -> None:
    from datetime import UTC, datetime

    from flowpark.engine.ports.nodes import NodesReport

    now = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
    report = NodesReport([], now, overdue)
    if overdue:
        assert report.notice == (
            "no live sweeping node: 3 overdue instances will wait until a node that sweeps runs"
        )
    else:
        assert report.notice is None
