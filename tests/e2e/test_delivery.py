"""Event delivery against a real subscriber process (``tests/e2e/subscriber.py``), which
verifies every delivery's Standard Webhooks signature with the ``standardwebhooks``
library and records what it accepted.

* a subscriber that is down while events are emitted receives every event once it is
  back, in order per instance; a delivery whose sends ran out is listed as failed and
  delivered once retried over the API;
* two node processes on one PostgreSQL database deliver 1,000 events to the subscriber
  once each; a node SIGKILLed mid-delivery loses none.
"""

from __future__ import annotations

import base64
import functools
import shutil
import signal
import subprocess
import sys
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import create_engine, insert

from flowpark.flows import Bag, Flow, HttpTrigger
from flowpark.runtime.app import create_app
from flowpark.runtime.loading import Deps
from flowpark.store.db import sync_url
from flowpark.store.tables import OutboxEventRow
from tests.conftest import _pg_database
from tests.support.eventually import eventually
from tests.support.server import SubprocessServer, free_port, live_server, serve_subprocess

SECRET = "whsec_" + base64.b64encode(b"flowpark-delivery-test-secret-32b").decode()
SUBSCRIBER = Path(__file__).with_name("subscriber.py")
FAST_RETRIES = {
    "delivery_scan_seconds": 0.2,
    "delivery_backoff_seconds": 0.2,
    "delivery_max_backoff_seconds": 1.0,
}


class Batch(BaseModel):
    label: str = "x"


def _event(n: int, bag: Bag) -> dict[str, Any]:
    return {"n": n, "label": bag.input.label}


def emitter_flows(deps: Deps) -> list[Flow]:
    """``emit.three``: emits ``seq.event`` with ``n`` = 1, 2, 3, then completes."""
    flow = Flow(
        "emit.three",
        "1.0.0",
        input=Batch,
        trigger=HttpTrigger("POST", "/api/v1/emit-three", idempotent=False),
    )
    for n in (1, 2, 3):
        flow.emit("seq.event", functools.partial(_event, n))
    return [flow]


@contextmanager
def subscriber(tmp_path: Path, port: int, delay: float = 0.0) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / f"subscriber-{port}.out").open("wb")
    process = subprocess.Popen(
        [sys.executable, str(SUBSCRIBER), str(port), SECRET, str(tmp_path / "received.jsonl")]
        + ([str(delay)] if delay else []),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()


async def received(port: int) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        try:
            resp = await http.get("/received")
            rejected = (await http.get("/rejected")).json()["rejected"]
        except httpx.TransportError as exc:
            raise AssertionError(f"subscriber not up: {exc}") from exc
        assert resp.status_code == 200
        assert rejected == 0, "a delivery did not verify with the library"
        return resp.json()  # type: ignore[no-any-return]


def in_order_per_instance(entries: list[dict[str, Any]]) -> dict[str, list[int]]:
    """``n`` of each instance's events in arrival order (first arrival of each event)."""
    seen: set[str] = set()
    order: defaultdict[str, list[int]] = defaultdict(list)
    for entry in entries:
        if entry["webhookId"] in seen:
            continue
        seen.add(entry["webhookId"])
        assert entry["webhookId"] == entry["eventId"]
        order[entry["instanceId"]].append(entry["data"]["n"])
    return dict(order)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_subscriber_down_for_a_while_gets_every_event_in_order_once_back(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    port = free_port()
    subscribers = [{"name": "audit", "url": f"http://127.0.0.1:{port}/hook", "secret": SECRET}]
    with live_server(
        f"sqlite:///{db}",
        app_factory=lambda s: create_app(s, flows=[emitter_flows]),
        subscribers=subscribers,
        delivery_max_tries=1000,
        **FAST_RETRIES,
    ) as node:
        async with node.client() as http:
            ids = []
            for i in range(5):
                resp = await http.post("/api/v1/emit-three", json={"label": f"b{i}"})
                assert resp.status_code == 202, resp.text
                ids.append(resp.json()["instanceId"])

            async def retrying() -> None:
                rows = (await http.get("/api/v1/deliveries", params={"limit": 1000})).json()
                assert len(rows) == 15 and all(r["state"] == "pending" for r in rows)
                by_instance: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
                for row in rows:
                    by_instance[row["instanceId"]].append(row)
                for first, *later in by_instance.values():
                    # each instance's first event is retried; the later ones wait behind it
                    assert first["tries"] >= 2 and first["lastError"], first
                    assert first["nextTryAt"] is not None
                    assert [r["tries"] for r in later] == [0, 0]

            await eventually(retrying, timeout=30, what="deliveries retried while down")

            with subscriber(tmp_path, port):

                async def all_in() -> list[dict[str, Any]]:
                    got = await received(port)
                    assert len({e["eventId"] for e in got}) == 15, len(got)
                    return got

                got = await eventually(all_in, timeout=30, what="every event received")
                order = in_order_per_instance(got)
                assert order == {i: [1, 2, 3] for i in ids}
                assert all(e["type"] == "seq.event" for e in got)

                async def all_delivered() -> None:
                    rows = (await http.get("/api/v1/deliveries", params={"limit": 1000})).json()
                    assert [r["state"] for r in rows] == ["delivered"] * 15
                    assert all(r["deliveredAt"] and r["lastStatus"] == 204 for r in rows)

                await eventually(all_delivered, timeout=10, what="deliveries marked delivered")


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_a_delivery_whose_sends_ran_out_is_listed_failed_and_retried(
    tmp_path: Path, _sqlite_template: Path
) -> None:
    db = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, db)
    port = free_port()
    subscribers = [{"name": "audit", "url": f"http://127.0.0.1:{port}/hook", "secret": SECRET}]
    with live_server(
        f"sqlite:///{db}",
        app_factory=lambda s: create_app(s, flows=[emitter_flows]),
        subscribers=subscribers,
        delivery_max_tries=2,
        **FAST_RETRIES,
    ) as node:
        async with node.client() as http:
            resp = await http.post("/api/v1/emit-three", json={"label": "f"})
            instance_id = resp.json()["instanceId"]

            async def failed() -> list[dict[str, Any]]:
                rows = (await http.get("/api/v1/deliveries", params={"state": "failed"})).json()
                assert len(rows) == 3, rows  # one after the other: each waits for the one before
                return rows  # type: ignore[no-any-return]

            dead = await eventually(failed, timeout=30, what="the deliveries failed for good")
            assert all(d["tries"] == 2 and d["instanceId"] == instance_id for d in dead)
            assert all(d["lastError"] and d["nextTryAt"] is None for d in dead)
            missing = await http.post("/api/v1/deliveries/999999/retry")
            assert missing.status_code == 404 and missing.json()["code"] == "delivery_not_found"

            with subscriber(tmp_path, port):
                await eventually(lambda: received(port), timeout=30, what="subscriber up")
                for d in dead:
                    resp = await http.post(f"/api/v1/deliveries/{d['deliveryId']}/retry")
                    assert resp.status_code == 200, resp.text
                    assert resp.json()["state"] == "pending" and resp.json()["tries"] == 0

                async def all_in() -> list[dict[str, Any]]:
                    got = await received(port)
                    assert len(got) == 3
                    return got

                got = await eventually(all_in, timeout=30, what="the retried events delivered")
                assert [e["data"]["n"] for e in got] == [1, 2, 3]

                async def delivered() -> None:
                    rows = (await http.get("/api/v1/deliveries")).json()
                    assert [r["state"] for r in rows] == ["delivered"] * 3

                await eventually(delivered, timeout=10, what="marked delivered")
                again = await http.post(f"/api/v1/deliveries/{dead[0]['deliveryId']}/retry")
                assert again.status_code == 409, again.text
                assert again.json()["code"] == "delivery_not_failed"


def emit_events(database_url: str, instances: int, per_instance: int) -> list[str]:
    """Write ``instances * per_instance`` outbox events (``n`` = 1.. per instance), as emit
    nodes would, interleaved across instances. Returns the instance ids."""
    ids = [str(uuid.uuid4()) for _ in range(instances)]
    now = datetime.now(UTC)
    rows = [
        {
            "id": str(uuid.uuid4()),
            "instance_id": instance_id,
            "name": "bulk.event",
            "payload": {"n": n},
            "created_at": now,
        }
        for n in range(1, per_instance + 1)
        for instance_id in ids
    ]
    engine = create_engine(sync_url(database_url))
    try:
        with engine.begin() as conn:
            conn.execute(insert(OutboxEventRow.__table__), rows)  # type: ignore[attr-defined]
    finally:
        engine.dispose()
    return ids


@contextmanager
def two_delivering_nodes(
    database_url: str, tmp_path: Path, port: int
) -> Iterator[dict[str, SubprocessServer]]:
    subscribers = (
        f'[{{"name": "audit", "url": "http://127.0.0.1:{port}/hook", "secret": "{SECRET}"}}]'
    )
    settings = {
        "subscribers": subscribers,
        "delivery_timeout_seconds": "2",
        **{k: str(v) for k, v in FAST_RETRIES.items()},
    }
    with ExitStack() as stack:
        nodes = {
            name: stack.enter_context(
                serve_subprocess(
                    database_url, tmp_path / f"{name}.log", node_id=name, settings=settings
                )
            )
            for name in ("a", "b")
        }
        for node in nodes.values():  # both answer before a test asks either of them
            node.wait_serving()
        yield nodes


async def _deliveries(node: SubprocessServer, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    async with node.client() as http:
        after = None
        while True:
            query = {"limit": 1000, **params, **({"after": after} if after else {})}
            page = (await http.get("/api/v1/deliveries", params=query)).json()
            rows.extend(page)
            if len(page) < 1000:
                return rows
            after = page[-1]["deliveryId"]


@pytest.fixture
def pg_store(_pg_template: str) -> Iterator[str]:
    with _pg_database(template=_pg_template) as url:
        yield url


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_two_nodes_deliver_1000_events_once_each(pg_store: str, tmp_path: Path) -> None:
    port = free_port()
    ids = emit_events(pg_store, instances=100, per_instance=10)
    with subscriber(tmp_path, port), two_delivering_nodes(pg_store, tmp_path, port) as nodes:

        async def all_in() -> list[dict[str, Any]]:
            got = await received(port)
            assert len(got) >= 1000, len(got)
            return got

        got = await eventually(all_in, timeout=90, what="1,000 events received")
        counts = Counter(e["eventId"] for e in got)
        assert len(counts) == 1000
        assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1][:5]
        assert in_order_per_instance(got) == {i: list(range(1, 11)) for i in ids}

        async def all_delivered() -> list[dict[str, Any]]:
            rows = await _deliveries(nodes["b"])
            assert len(rows) == 1000 and {r["state"] for r in rows} == {"delivered"}
            return rows

        rows = await eventually(all_delivered, timeout=20, what="all marked delivered")
        assert {r["tries"] for r in rows} == {1}
        for node in nodes.values():
            assert "Traceback" not in node.output(), node.output()[-3000:]


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.timeout(180)
async def test_a_node_killed_mid_delivery_loses_no_event(pg_store: str, tmp_path: Path) -> None:
    port = free_port()
    ids = emit_events(pg_store, instances=50, per_instance=10)
    with (
        subscriber(tmp_path, port, delay=0.05),
        two_delivering_nodes(pg_store, tmp_path, port) as nodes,
    ):

        async def some_in() -> None:
            assert len(await received(port)) >= 100

        await eventually(some_in, timeout=60, what="deliveries under way")
        in_flight = [r for r in await _deliveries(nodes["b"], state="pending")]
        nodes["a"].process.send_signal(signal.SIGKILL)
        nodes["a"].process.wait(10)

        async def all_in() -> list[dict[str, Any]]:
            got = await received(port)
            assert len({e["eventId"] for e in got}) == 500, len(got)
            return got

        got = await eventually(all_in, timeout=90, what="every event received after the kill")
        assert in_order_per_instance(got) == {i: list(range(1, 11)) for i in ids}
        repeats = sum(Counter(e["eventId"] for e in got).values()) - 500
        assert repeats <= 50  # at most one batch a's claims held, sent again by b

        async def all_delivered() -> None:
            rows = await _deliveries(nodes["b"])
            assert len(rows) == 500 and {r["state"] for r in rows} == {"delivered"}

        await eventually(all_delivered, timeout=20, what="all marked delivered")
        assert in_flight  # the kill came while deliveries were pending
        print(f"after SIGKILL mid-delivery: 500/500 events received, {repeats} sent twice")
