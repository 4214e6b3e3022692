"""``flowpark.Client`` and ``AsyncClient`` against a real ``flowpark serve`` process with
the samples and their fakes, on both stores: a start with a key twice is one instance,
``wait()`` returns a completed document (by reads) and a completed job (by its stream), a
signal ends a wait, the node's problems raise their exceptions, ``list()`` pages through
several pages, and ``events()`` reads the outbox."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark import AsyncClient, Client
from flowpark.client import (
    Forbidden,
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceNotFound,
    InstanceView,
    InvalidRequest,
    NotFound,
    StartAnswer,
    TransportError,
    Unauthorized,
    WaitTimeout,
)
from tests.support.eventually import eventually_sync
from tests.support.server import TOKEN, SubprocessServer, free_port, serve_subprocess
from tests.support.stores import module_store

pytestmark = pytest.mark.slow

VIEWER = "viewer-secret"
MANY_PAGES = 10_000  # the fake OCR takes 0.05 s a page: such a document waits
DOCUMENTS = "/api/v1/documents"
README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("client")
    with (
        module_store(request, folder) as url,
        serve_subprocess(
            url,
            folder / "serve.log",
            api_tokens=f"{TOKEN},viewer:{VIEWER}:read",
            sample_ocr_per_page="0.05",
            ocr_callbacks="false",
            job_queued_seconds="0.2",
            job_succeed_seconds="1.5",
            timer_scan_interval="0.2",
        ) as server,
    ):

        def up() -> None:
            try:
                status = httpx.get(f"{server.base_url}/healthz", timeout=2).status_code
            except httpx.HTTPError as exc:
                raise AssertionError(f"not up yet: {exc}\n{server.output()}") from None
            assert status == 200

        eventually_sync(up, timeout=30, what="flowpark serve answers")
        yield server


@pytest.fixture
def client(node: SubprocessServer) -> Iterator[Client]:
    with Client(node.base_url, token=TOKEN) as client:
        yield client


def document(pages: int = 2, doc_id: str | None = None) -> dict[str, Any]:
    return {"documentId": doc_id or f"doc-{uuid.uuid4().hex[:10]}", "pages": pages}


def test_a_start_with_one_key_twice_is_one_instance(client: Client) -> None:
    key, body = f"key-{uuid.uuid4().hex}", document(pages=MANY_PAGES)

    first = client.start("document.process", body, idempotency_key=key)
    again = client.start(DOCUMENTS, body, idempotency_key=key)  # by route this time

    assert isinstance(first, StartAnswer)
    assert again.instance_id == first.instance_id
    assert [a.signal for a in first.awaiting or []] == ["ocr.completed"]
    same_key = [
        row.instance_id
        for row in client.list(flow="document.process", state=["suspended"])
        if row.instance_id == first.instance_id
    ]
    assert same_key == [first.instance_id]
    client.cancel(first.instance_id)


def test_wait_returns_the_completed_document(client: Client) -> None:
    started = client.start("document.process", document(), idempotency_key=uuid.uuid4().hex)

    done = client.wait(started.instance_id, timeout=60)

    assert isinstance(done, InstanceView)
    assert done.state == "completed", done.error
    assert done.result is not None and done.result["documentId"].startswith("doc-")
    assert client.get(started.instance_id).state == "completed"


def test_wait_follows_the_stream_of_a_job_to_its_end(node: SubprocessServer) -> None:
    paths: list[str] = []
    http = httpx.Client(
        base_url=node.base_url, event_hooks={"request": [lambda r: paths.append(r.url.path)]}
    )
    with http, Client(token=TOKEN, http=http) as client:
        started = client.start("job.await", {}, idempotency_key=uuid.uuid4().hex)
        assert started.status == "running"

        done = client.wait(started.instance_id, timeout=60)

    assert done.state == "completed", done.error
    stream = f"/api/v1/instances/{started.instance_id}/streams/JobProgress"
    assert stream in paths
    # followed, not polled: the first read, the stream, the read after its end
    assert paths.count(f"/api/v1/instances/{started.instance_id}") <= 3, paths


async def test_the_async_wait_follows_the_stream_of_a_job_too(node: SubprocessServer) -> None:
    paths: list[str] = []

    async def record(request: httpx.Request) -> None:
        paths.append(request.url.path)

    http = httpx.AsyncClient(base_url=node.base_url, event_hooks={"request": [record]})
    async with http, AsyncClient(token=TOKEN, http=http) as client:
        started = await client.start("job.await", {}, idempotency_key=uuid.uuid4().hex)

        done = await client.wait(started.instance_id, timeout=60)

    assert done.state == "completed", done.error
    assert f"/api/v1/instances/{started.instance_id}/streams/JobProgress" in paths
    assert paths.count(f"/api/v1/instances/{started.instance_id}") <= 3, paths


def test_a_wait_that_runs_out_raises_wait_timeout_with_the_last_view(client: Client) -> None:
    started = client.start(
        "document.process", document(pages=MANY_PAGES), idempotency_key=uuid.uuid4().hex
    )
    begun = time.monotonic()

    with pytest.raises(WaitTimeout) as caught:
        client.wait(started.instance_id, timeout=1.0)

    assert time.monotonic() - begun < 1.0 + 2.5
    assert caught.value.instance.state == "suspended"
    client.cancel(started.instance_id)


async def test_a_signal_ends_a_wait(node: SubprocessServer) -> None:
    async with AsyncClient(node.base_url, token=TOKEN) as client:
        body = document(pages=MANY_PAGES)
        started = await client.start(DOCUMENTS, body, idempotency_key=uuid.uuid4().hex)
        waiting = asyncio.create_task(client.wait(started.instance_id, timeout=60))
        async with httpx.AsyncClient(base_url=node.base_url, timeout=30) as fakes:
            jobs = (await fakes.get("/fake/ocr/jobs")).json()
            job_id = next(j["jobId"] for j in jobs if j["documentId"] == body["documentId"])
            assert (await fakes.post(f"/fake/ocr/jobs/{job_id}/complete")).status_code == 200
        assert not waiting.done()  # the document waits: its OCR job ran no page yet

        answer = await client.signal(
            started.instance_id, "ocr.completed", {"jobId": job_id}, idempotency_key="cb-1"
        )
        done = await asyncio.wait_for(waiting, timeout=60)

        assert answer.created is True
        assert done.state == "completed", done.error
        assert [s.name for s in done.signals or []] == ["ocr.completed"]
        again = await client.signal(
            started.instance_id, "ocr.completed", {"jobId": job_id}, idempotency_key="cb-1"
        )
        assert again.created is False and again.signal_id == answer.signal_id


def test_the_nodes_problems_raise_their_exceptions(node: SubprocessServer, client: Client) -> None:
    with pytest.raises(InstanceNotFound) as missing:
        client.get(str(uuid.uuid4()))
    assert missing.value.status == 404
    assert missing.value.problem.code == "instance_not_found"
    assert missing.value.problem["instanceId"]

    body = document(pages=MANY_PAGES)
    started = client.start(DOCUMENTS, body, idempotency_key="k-" + body["documentId"])
    with pytest.raises(IdempotencyKeyReused):
        client.start(DOCUMENTS, document(), idempotency_key="k-" + body["documentId"])
    with pytest.raises(InvalidRequest) as no_key:
        client.start(DOCUMENTS, document())
    assert no_key.value.code == "idempotency_key_missing"
    with pytest.raises(InvalidRequest) as invalid:
        client.start(DOCUMENTS, {"pages": "many"}, idempotency_key=uuid.uuid4().hex)
    assert invalid.value.code == "input_invalid" and invalid.value.problem.errors
    with pytest.raises(NotFound) as undeclared:
        client.signal(started.instance_id, "no.such.signal", {})
    assert undeclared.value.code == "signal_not_declared"
    with pytest.raises(NotFound) as no_flow:
        client.start("no.such.flow", {})
    assert no_flow.value.code == "flow_not_found"

    with Client(node.base_url, token=VIEWER) as viewer:
        assert viewer.get(started.instance_id).state == "suspended"
        with pytest.raises(Forbidden) as forbidden:
            viewer.cancel(started.instance_id)
        assert forbidden.value.problem["missingScope"] == "operate"
    with Client(node.base_url, token="not-a-token") as stranger, pytest.raises(Unauthorized):
        stranger.get(started.instance_id)

    assert client.cancel(started.instance_id).state == "cancelled"
    with pytest.raises(InstanceEnded) as ended:
        client.cancel(started.instance_id)
    assert ended.value.status == 409


def test_list_pages_through_more_than_one_page(client: Client) -> None:
    marker = uuid.uuid4().hex[:8]
    started = {
        client.start(
            DOCUMENTS,
            document(pages=MANY_PAGES),
            idempotency_key=f"{marker}-{n}",
            instance_key=f"{marker}-{n}",
        ).instance_id
        for n in range(5)
    }
    pages = list(client.list_pages(flow="document.process", page_size=2))
    seen = [row.instance_id for row in client.list(flow="document.process", page_size=2)]

    assert len(pages) >= 3 and all(len(p.instances) <= 2 for p in pages)
    assert pages[-1].next_cursor is None
    assert started <= set(seen)
    assert len(seen) == len(set(seen))  # no row twice across pages
    assert [r.instance_key for r in client.list(instance_key=f"{marker}-3")] == [f"{marker}-3"]
    for instance_id in started:
        client.cancel(instance_id)


def test_events_reads_the_outbox_after_a_sequence(client: Client) -> None:
    started = client.start("document.process", document(), idempotency_key=uuid.uuid4().hex)
    assert client.wait(started.instance_id, timeout=60).state == "completed"

    events = list(client.events(page_size=1))
    mine = [e for e in events if e.instance_id == started.instance_id]

    assert [e.name for e in mine] == ["document.processed"]
    assert [e.sequence for e in events] == sorted({e.sequence for e in events})
    later = list(client.events(after=mine[0].sequence))
    assert all(e.sequence > mine[0].sequence for e in later)


def test_the_callers_own_httpx_client_is_used_and_left_open(node: SubprocessServer) -> None:
    seen: list[str] = []
    http = httpx.Client(
        base_url=node.base_url, event_hooks={"request": [lambda r: seen.append(r.url.path)]}
    )
    with http, Client(token=TOKEN, http=http) as client:
        started = client.start(
            DOCUMENTS, document(pages=MANY_PAGES), idempotency_key=uuid.uuid4().hex
        )
        client.close()
        assert client.get(started.instance_id).state == "suspended"  # http still open
        client.cancel(started.instance_id)
    assert seen[:2] == [DOCUMENTS, f"/api/v1/instances/{started.instance_id}"]


def test_an_unreachable_node_is_a_transport_error_after_the_safe_retries() -> None:
    begun = time.monotonic()
    with (
        Client(f"http://127.0.0.1:{free_port()}", token=TOKEN, timeout=3) as client,
        pytest.raises(TransportError),
    ):
        client.get(str(uuid.uuid4()))
    assert time.monotonic() - begun < 3 + 1


def test_the_readmes_client_example_runs_as_written(
    node: SubprocessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    example = blocks[1]
    assert len(example.strip().splitlines()) <= 8
    doc_id = f"doc-{uuid.uuid4().hex[:10]}"
    source = (
        example.replace("http://127.0.0.1:8000", node.base_url)
        .replace('"dev-token"', repr(TOKEN))
        .replace("invoice-43", doc_id)
    )

    exec(compile(source, "README.md", "exec"), {"__name__": "readme_client"})

    assert capsys.readouterr().out.startswith(f"completed {{'documentId': '{doc_id}'")
