"""What a request may carry, on SQLite and on PostgreSQL: path ids that cannot name an
instance are 404 without a look-up; body strings with U+0000 (or a lone surrogate) and
non-finite numbers are 422; bodies over ``max_body_bytes`` are 413 ``body_too_large``; a
body that is not JSON by its ``Content-Type`` is 415 ``unsupported_media_type``; a signal's
``Idempotency-Key`` reused with another payload is 422 ``idempotency_key_reused``; and the
signal answer shows the signal as stored after delivery. None of it is ever a 5xx."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from flowpark.store.db import sync_url
from tests.support.api import DOCUMENTS, assert_problem, start_document, wait_for_state
from tests.support.db import count_instances
from tests.support.server import LiveServer, live_server

JOBS = "/api/v1/jobs"
NEVER = 10_000  # pages: at 0.05 s/page the OCR job stays pending for the whole test
MiB = 1 << 20


@pytest.fixture(scope="module")
def server(module_store_url: str) -> Iterator[LiveServer]:
    """The module's server of each store, on a fresh SQLite file or PostgreSQL database
    (the tests use fresh ids and count what they stored themselves: they share it)."""
    with live_server(module_store_url) as live:
        yield live


@pytest.fixture
async def http(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as client:
        yield client


def _count(url: str, sql: str, **params: str) -> int:
    """One ``count(*)`` on either database (what is really stored)."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), params).scalar_one())
    finally:
        engine.dispose()


def _signals(url: str, instance_id: str) -> int:
    """The signals stored for ``instance_id``."""
    sql = "SELECT count(*) FROM flow_signal WHERE CAST(instance_id AS TEXT) = :id"
    return _count(url, sql, id=instance_id)


async def _parked_document(http: httpx.AsyncClient) -> str:
    resp = await start_document(http, pages=NEVER)
    assert resp.status_code == 202, resp.text
    return str(resp.json()["instanceId"])


# -- path ids ----------------------------------------------------------------------------
#: Refused before routing (422 input_invalid): a control character, or bytes not UTF-8.
UNSTORABLE_IDS = [
    "%00",
    "a%00b",
    "01900000-0000-7000-8000-00000000000%00",
    "%01",
    "a%0Ab",
    "%7F",
    "%C2%85",
    "%ED%A0%80",
]
#: Well-formed text that cannot be an id (404 instance_not_found, without a look-up).
ILL_FORMED_IDS = ["x" * 101, "%F0%9F%93%84" * 30]


def _id_routes(http: httpx.AsyncClient, bad: str) -> list[Any]:
    return [
        http.get(f"/api/v1/instances/{bad}"),
        http.post(f"/api/v1/instances/{bad}/cancel"),
        http.post(f"/api/v1/instances/{bad}/signals/ocr.completed", json={"jobId": "j"}),
        http.post(
            f"{DOCUMENTS}/{bad}/signals/ocr.completed",
            json={"jobId": "j"},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        ),
        http.get(f"/api/v1/instances/{bad}/streams/JobProgress"),
        http.get(
            f"/api/v1/instances/{bad}/streams/JobProgress",
            headers={"Accept": "text/event-stream"},
        ),
    ]


async def test_unstorable_instance_ids_are_422_on_every_route(http: httpx.AsyncClient) -> None:
    for bad in UNSTORABLE_IDS:
        for request in _id_routes(http, bad):
            body = assert_problem(await request, 422, "input_invalid")
            assert body["errors"][0]["loc"] == ["path"], body


async def test_ill_formed_instance_ids_are_404_on_every_route(http: httpx.AsyncClient) -> None:
    for bad in ILL_FORMED_IDS:
        for request in _id_routes(http, bad):
            assert_problem(await request, 404, "instance_not_found")


async def test_ill_formed_stream_names_are_404_stream_not_declared(http: httpx.AsyncClient) -> None:
    instance_id = await _parked_document(http)
    for name in ["%00", "JobProgress%00", "x" * 300]:
        for headers in ({}, {"Accept": "text/event-stream"}):
            resp = await http.get(
                f"/api/v1/instances/{instance_id}/streams/{name}", headers=headers
            )
            if "%00" in name:  # refused before routing
                assert_problem(resp, 422, "input_invalid")
            else:
                assert_problem(resp, 404, "stream_not_declared")
    resp = await http.post(
        f"/api/v1/instances/{instance_id}/signals/ocr.completed%00", json={"jobId": "j"}
    )
    assert_problem(resp, 422, "input_invalid")
    resp = await http.post(
        f"/api/v1/instances/{instance_id}/signals/{'x' * 300}", json={"jobId": "j"}
    )
    assert_problem(resp, 404, "signal_not_declared")


# -- unstorable strings and numbers --------------------------------------------------------
UNSTORABLE_STARTS: list[tuple[str, bytes]] = [
    (DOCUMENTS, b'{"documentId": "a\\u0000b", "pages": 1}'),
    (DOCUMENTS, b'{"documentId": "d", "pages": 1, "instanceKey": "a\\u0000b"}'),
    (DOCUMENTS, b'{"documentId": "a\\ud800b", "pages": 1}'),
    (DOCUMENTS, b'{"documentId": "d", "pages": 1, "instanceKey": "k\\udfff"}'),
    (JOBS, b'{"instanceKey": "a\\u0000b"}'),
    (JOBS, b'{"instanceKey": "k", "input": {"text": "\\u0000"}}'),
    (JOBS, b'{"instanceKey": "k", "input": {"a\\u0000": 1}}'),
    (JOBS, b'{"instanceKey": "k", "input": ["ok", "\\ud83d"]}'),
    (JOBS, b'{"instanceKey": "k", "input": 1e999}'),
    (JOBS, b'{"instanceKey": "k", "input": -1e400}'),
    (JOBS, b'{"instanceKey": "k", "input": NaN}'),
    (JOBS, b'{"instanceKey": "k", "input": [Infinity]}'),
]


async def test_unstorable_strings_and_numbers_in_a_start_are_422_and_store_nothing(
    http: httpx.AsyncClient, server: LiveServer
) -> None:
    before = _count(server.database_url, "SELECT count(*) FROM flow_instance")
    for route, raw in UNSTORABLE_STARTS:
        resp = await http.post(
            route,
            content=raw,
            headers={"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex},
        )
        assert_problem(resp, 422, "input_invalid")

    assert _count(server.database_url, "SELECT count(*) FROM flow_instance") == before


async def test_the_422_for_a_nul_names_where_it_is(http: httpx.AsyncClient) -> None:
    resp = await http.post(
        JOBS,
        json={"instanceKey": "k", "input": {"notes": ["x", "a\0"]}},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )

    body = assert_problem(resp, 422, "input_invalid")
    assert body["errors"][0]["loc"] == ["body", "input", "notes", "1"], body


async def test_a_signal_with_a_nul_is_422_and_stores_nothing(
    http: httpx.AsyncClient, server: LiveServer
) -> None:
    instance_id = await _parked_document(http)
    for raw in (
        b'{"jobId": "a\\u0000"}',
        b'{"jobId": "j", "extra": "\\u0000"}',
        b'{"jobId": "j\\udc80"}',
    ):
        for route in (
            f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
            f"/api/v1/instances/{instance_id}/signals/ocr.completed",
        ):
            resp = await http.post(route, content=raw, headers={"Content-Type": "application/json"})
            assert_problem(resp, 422, "input_invalid")

    view = (await http.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["state"] == "suspended" and view["signals"] == []
    assert _signals(server.database_url, instance_id) == 0


# -- body size -----------------------------------------------------------------------------
async def test_a_body_over_max_body_bytes_is_413_on_every_body_route(
    http: httpx.AsyncClient, server: LiveServer
) -> None:
    assert server.settings.max_body_bytes == MiB  # the default
    instance_id = await _parked_document(http)
    huge = b'{"jobId": "' + b"j" * (30 * MiB) + b'"}'
    routes = [
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        f"/api/v1/instances/{instance_id}/signals/ocr.completed",
        DOCUMENTS,
        JOBS,
        "/fake/ocr/jobs",
    ]
    for route in routes:
        resp = await http.post(
            route,
            content=huge,
            headers={"Content-Type": "application/json", "Idempotency-Key": uuid.uuid4().hex},
        )
        body = assert_problem(resp, 413, "body_too_large")
        assert body["maxBodyBytes"] == MiB
    assert_problem(await http.put("/fake/jobs/j", content=huge), 413, "body_too_large")

    # the connection (and the server) go on serving
    view = (await http.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["state"] == "suspended" and view["signals"] == []
    assert _signals(server.database_url, instance_id) == 0


async def test_a_chunked_body_is_cut_at_the_bound(
    http: httpx.AsyncClient, server: LiveServer
) -> None:
    instance_id = await _parked_document(http)

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked encoding
        yield b'{"jobId": "'
        for _ in range(40):
            yield b"j" * 64 * 1024
        yield b'"}'

    resp = await http.post(
        f"/api/v1/instances/{instance_id}/signals/ocr.completed",
        content=chunks(),
        headers={"Content-Type": "application/json"},
    )

    assert_problem(resp, 413, "body_too_large")
    assert _signals(server.database_url, instance_id) == 0


async def test_the_bound_is_inclusive_and_a_setting(
    _sqlite_template: object, sqlite_url: str
) -> None:
    import shutil

    shutil.copyfile(str(_sqlite_template), sqlite_url.removeprefix("sqlite:///"))
    with live_server(sqlite_url, max_body_bytes=200) as small:
        async with small.client() as client:
            instance_id = await _parked_document(client)
            route = f"/api/v1/instances/{instance_id}/signals/ocr.completed"
            prefix, suffix = b'{"jobId": "', b'"}'
            at_bound = prefix + b"j" * (200 - len(prefix) - len(suffix)) + suffix
            over = prefix + b"j" * (201 - len(prefix) - len(suffix)) + suffix

            refused = await client.post(
                route, content=over, headers={"Content-Type": "application/json"}
            )
            accepted = await client.post(
                route, content=at_bound, headers={"Content-Type": "application/json"}
            )

    assert len(at_bound) == 200 and len(over) == 201
    assert_problem(refused, 413, "body_too_large")
    assert accepted.status_code == 202, accepted.text


# -- content type --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/xml",
        "application/jsonx",
        "text/json",
        "*/*",
    ],
)
async def test_a_body_that_is_not_json_by_its_content_type_is_415(
    client: httpx.AsyncClient, live: LiveServer, content_type: str, doc_id: str
) -> None:
    body = f'{{"documentId": "{doc_id}", "pages": 1}}'.encode()
    start = await client.post(
        DOCUMENTS,
        content=body,
        headers={"Content-Type": content_type, "Idempotency-Key": uuid.uuid4().hex},
    )
    signal = await client.post(
        f"/api/v1/instances/{uuid.uuid4()}/signals/ocr.completed",
        content=b'{"jobId": "j"}',
        headers={"Content-Type": content_type},
    )

    assert_problem(start, 415, "unsupported_media_type")
    # the request is judged before the instance is looked up
    assert_problem(signal, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "application/json; charset=utf-8",
        "Application/JSON",
        "application/merge-patch+json",
    ],
    ids=["json", "charset", "case", "plus-json"],
)
async def test_json_content_types_are_read_as_json(
    client: httpx.AsyncClient, content_type: str, doc_id: str
) -> None:
    headers = {"Idempotency-Key": uuid.uuid4().hex, "Content-Type": content_type}
    resp = await client.post(
        DOCUMENTS, content=f'{{"documentId": "{doc_id}", "pages": 1}}', headers=headers
    )

    assert resp.status_code == 202, resp.text


@pytest.mark.parametrize("content_type", [None, ""], ids=["absent", "empty"])
async def test_a_body_with_no_content_type_is_415_and_starts_nothing(
    client: httpx.AsyncClient, live: LiveServer, content_type: str | None, doc_id: str
) -> None:
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    if content_type is not None:
        headers["Content-Type"] = content_type
    start = await client.post(
        DOCUMENTS, content=f'{{"documentId": "{doc_id}", "pages": 1}}', headers=headers
    )
    signal = await client.post(
        f"/api/v1/instances/{uuid.uuid4()}/signals/ocr.completed",
        content=b'{"jobId": "j"}',
        headers=headers,
    )

    problem = assert_problem(start, 415, "unsupported_media_type")
    assert "Content-Type: application/json" in problem["detail"], problem
    assert_problem(signal, 415, "unsupported_media_type")
    assert count_instances(live.database_url, doc_id) == 0


async def test_a_request_with_no_body_needs_no_content_type(client: httpx.AsyncClient) -> None:
    instance_id = (await start_document(client, pages=NEVER)).json()["instanceId"]

    cancelled = await client.post(f"/api/v1/instances/{instance_id}/cancel")

    assert cancelled.status_code == 200, cancelled.text


async def test_a_signal_sent_as_text_is_415_and_stores_nothing(client: httpx.AsyncClient) -> None:
    instance_id = (await start_document(client, pages=NEVER)).json()["instanceId"]
    resp = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        content=b'{"jobId": "j"}',
        headers={"Content-Type": "text/plain"},
    )

    assert_problem(resp, 415, "unsupported_media_type")
    assert (await client.get(f"/api/v1/instances/{instance_id}")).json()["signals"] == []


# -- signal idempotency and the answer ---------------------------------------------------
async def test_a_signal_key_reused_with_another_payload_is_422(
    http: httpx.AsyncClient, server: LiveServer
) -> None:
    instance_id = await _parked_document(http)
    route = f"/api/v1/instances/{instance_id}/signals/ocr.completed"
    headers = {"Idempotency-Key": "hook-1"}
    first = await http.post(route, json={"jobId": "job-a"}, headers=headers)
    assert first.status_code == 202, first.text
    same = await http.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        content=b'{ "jobId" : "job-a" }',
        headers={**headers, "Content-Type": "application/json"},
    )
    other = await http.post(route, json={"jobId": "job-b"}, headers=headers)

    assert same.status_code == 202, same.text
    assert same.json()["created"] is False
    assert same.json()["signalId"] == first.json()["signalId"]
    body = assert_problem(other, 422, "idempotency_key_reused")
    assert body["instanceId"] == instance_id
    signals = (await http.get(f"/api/v1/instances/{instance_id}")).json()["signals"]
    assert [s["payload"]["jobId"] for s in signals] == ["job-a"]


async def test_the_signal_answer_shows_it_taken_when_the_delivery_took_it(
    client: httpx.AsyncClient,
) -> None:
    instance_id = (await start_document(client, pages=NEVER)).json()["instanceId"]
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    jobs = (await client.get("/fake/ocr/jobs")).json()
    job_id = next(j["jobId"] for j in jobs if j["documentId"] == view["input"]["documentId"])
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")

    sent = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        json={"jobId": job_id},
        headers={"Idempotency-Key": job_id},
    )

    assert sent.status_code == 202, sent.text
    answer = sent.json()
    assert answer["created"] is True
    assert answer["takenAt"] is not None and answer["takenStepId"] is not None, answer
    done = await wait_for_state(client, instance_id, ("completed",), timeout=10)
    stored = next(s for s in done["signals"] if s["signalId"] == answer["signalId"])
    assert stored["takenAt"] == answer["takenAt"]


# -- health --------------------------------------------------------------------------------
async def test_healthz_answers_get_and_head(anonymous: httpx.AsyncClient) -> None:
    got = await anonymous.get("/healthz")
    head = await anonymous.head("/healthz")

    assert got.status_code == 200 and got.json()["status"] == "ok"
    assert head.status_code == 200 and head.content == b""
