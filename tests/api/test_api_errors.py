"""Every error is an RFC 9457 problem (``application/problem+json`` with a ``code``):
401 without a valid token, 422 for malformed or ill-typed bodies, 404 for unknown instances
and routes - and odd inputs never produce a 5xx."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.api import DOCUMENTS, assert_problem, start_document
from tests.support.db import count_instances
from tests.support.server import LiveServer, live_server

PROTECTED = [
    ("POST", DOCUMENTS),
    ("GET", "/api/v1/instances/01900000-0000-7000-8000-000000000000"),
    ("POST", "/api/v1/instances/01900000-0000-7000-8000-000000000000/cancel"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/reviews"),
    ("GET", "/api/v1/flows"),
]


# -- 401 ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path"), PROTECTED)
@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer wrong-token",
        "Basic dGVzdDp0ZXN0",
        "Bearer",
        "test-token",
        "Bearer test-token-and-more",
        "bearer TEST-TOKEN",
    ],
    ids=["missing", "wrong", "basic", "no-token", "no-scheme", "longer", "case"],
)
async def test_missing_or_wrong_token_is_401(
    anonymous: httpx.AsyncClient, method: str, path: str, authorization: str | None
) -> None:
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    if authorization is not None:
        headers["Authorization"] = authorization
    resp = await anonymous.request(
        method, path, headers=headers, json={"documentId": "d", "pages": 1}
    )

    assert_problem(resp, 401, "unauthorized")
    assert resp.headers.get("www-authenticate", "").lower().startswith("bearer")


@pytest.mark.parametrize(
    "authorization",
    [
        b"Bearer d\xc3\xa9v-token",
        b"Bearer \xff",
        b"Bearer test-token\xa0",
        b"Bearer \xc3\xa9",
        b"\xff test-token",
    ],
    ids=["utf8", "latin1", "nbsp", "e-acute", "odd-scheme"],
)
async def test_non_ascii_token_bytes_are_401_not_500(
    anonymous: httpx.AsyncClient, authorization: bytes
) -> None:
    resp = await anonymous.get("/api/v1/flows", headers={"Authorization": authorization})  # type: ignore[arg-type]  # bytes on purpose

    assert_problem(resp, 401, "unauthorized")


async def test_a_non_ascii_token_matches_its_utf8_bytes(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "token.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", api_tokens="d\u00e9v-token") as server:
        async with server.client(token=None) as http:
            ok = await http.get(
                "/api/v1/flows", headers={b"Authorization": b"Bearer d\xc3\xa9v-token"}
            )
            latin1 = await http.get(
                "/api/v1/flows", headers={b"Authorization": b"Bearer d\xe9v-token"}
            )

    assert ok.status_code == 200, ok.text
    assert_problem(latin1, 401, "unauthorized")


async def test_401_comes_before_the_missing_key_and_starts_nothing(
    anonymous: httpx.AsyncClient, live: LiveServer, doc_id: str
) -> None:
    resp = await anonymous.post(DOCUMENTS, json={"documentId": doc_id, "pages": 1})

    assert_problem(resp, 401, "unauthorized")
    assert count_instances(live.database_url, doc_id) == 0


# -- 422 ---------------------------------------------------------------------------------
INVALID_BODIES: dict[str, bytes] = {
    "not-json": b"{not json",
    "truncated": b'{"documentId": "d", "pages": 1',
    "empty": b"",
    "array": b'[{"documentId": "d", "pages": 1}]',
    "null": b"null",
    "string": b'"document"',
    "number": b"42",
    "pages-as-string": b'{"documentId": "d", "pages": "12"}',
    "pages-negative": b'{"documentId": "d", "pages": -1}',
    "pages-zero": b'{"documentId": "d", "pages": 0}',
    "pages-too-many": b'{"documentId": "d", "pages": 10001}',
    "pages-fraction": b'{"documentId": "d", "pages": 1.5}',
    "pages-bool": b'{"documentId": "d", "pages": true}',
    "pages-null": b'{"documentId": "d", "pages": null}',
    "pages-nan": b'{"documentId": "d", "pages": NaN}',
    "pages-infinite": b'{"documentId": "d", "pages": 1e400}',
    "pages-huge-int": b'{"documentId": "d", "pages": ' + b"9" * 5000 + b"}",
    "missing-document-id": b'{"pages": 1}',
    "missing-pages": b'{"documentId": "d"}',
    "document-id-empty": b'{"documentId": "", "pages": 1}',
    "document-id-number": b'{"documentId": 7, "pages": 1}',
    "document-id-object": b'{"documentId": {"a": 1}, "pages": 1}',
    "document-id-huge": b'{"documentId": "' + b"x" * 1_000_000 + b'", "pages": 1}',
    "unknown-field": b'{"documentId": "d", "pages": 1, "colour": "red"}',
    "non-utf8": b'{"documentId": "\xff\xfe\xfd", "pages": 1}',
    "latin1-bom": b"\xef\xbb\xbf\xff" + b'{"documentId": "d", "pages": 1}',
    "deeply-nested": b'{"documentId": ' + b"[" * 100_000 + b"]" * 100_000 + b', "pages": 1}',
    "nested-too-deep": b'{"documentId": "d", "pages": 1, "x": ' + b"[" * 500 + b"]" * 500 + b"}",
    "instance-key-number": b'{"documentId": "d", "pages": 1, "instanceKey": 5}',
}


@pytest.mark.parametrize("raw", list(INVALID_BODIES.values()), ids=list(INVALID_BODIES))
async def test_malformed_or_ill_typed_body_is_422_input_invalid(
    client: httpx.AsyncClient, raw: bytes
) -> None:
    resp = await client.post(
        DOCUMENTS,
        content=raw,
        headers={"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"},
    )

    assert_problem(resp, 422, "input_invalid")


async def test_422_names_the_bad_field(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        DOCUMENTS,
        json={"documentId": "d", "pages": "12"},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )

    body = assert_problem(resp, 422, "input_invalid")
    assert any(e["loc"][-1] == "pages" for e in body["errors"]), body


BAD_QUERIES = [
    ("/api/v1/events", q)
    for q in (
        {"limit": "abc"},
        {"limit": "0"},
        {"limit": "1000000"},
        {"limit": "9" * 400},
        {"after": "-1"},
        {"after": "x"},
        {"after": "9" * 30},
    )
] + [("/api/v1/reviews", q) for q in ({"limit": "abc"}, {"limit": "0"}, {"limit": "9" * 400})]


@pytest.mark.parametrize(("path", "params"), BAD_QUERIES)
async def test_bad_query_parameters_are_422(
    client: httpx.AsyncClient, path: str, params: dict[str, str]
) -> None:
    resp = await client.get(path, params=params)

    assert_problem(resp, 422, "input_invalid")


BAD_SIGNAL_BODIES: dict[str, bytes] = {
    "not-json": b"{",
    "missing-job-id": b"{}",
    "job-id-number": b'{"jobId": 1}',
    "nested-too-deep": b'{"jobId": "j", "x": ' + b"[" * 900 + b"]" * 900 + b"}",
    "huge-int": b'{"jobId": "j", "x": ' + b"7" * 5000 + b"}",
}


@pytest.mark.parametrize("raw", list(BAD_SIGNAL_BODIES.values()), ids=list(BAD_SIGNAL_BODIES))
async def test_ill_formed_signal_is_422_and_leaves_the_instance_waiting(
    client: httpx.AsyncClient, doc_id: str, raw: bytes
) -> None:
    started = await start_document(client, doc_id, pages=10_000)
    instance_id = started.json()["instanceId"]

    resp = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        content=raw,
        headers={"Content-Type": "application/json"},
    )

    assert_problem(resp, 422, "input_invalid")
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["state"] == "suspended"
    assert view["signals"] == []


# -- 404 / 405 ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "instance_id",
    [
        str(uuid.UUID(int=0x0190_0000_0000_7000_8000_0000_0000_0001)),
        "not-a-uuid",
        "x" * 5000,
        "%F0%9F%93%84",
        "...",
    ],
    ids=["uuid7", "word", "long", "emoji", "dots"],
)
async def test_unknown_instance_is_404_instance_not_found(
    client: httpx.AsyncClient, instance_id: str
) -> None:
    resp = await client.get(f"/api/v1/instances/{instance_id}")

    assert_problem(resp, 404, "instance_not_found")


@pytest.mark.parametrize("instance_id", ["%00", "a%1Bb", "%ED%A0%80", "%C2%85"])
async def test_an_unstorable_path_is_422_before_any_look_up(
    client: httpx.AsyncClient, instance_id: str
) -> None:
    resp = await client.get(f"/api/v1/instances/{instance_id}")

    body = assert_problem(resp, 422, "input_invalid")
    assert body["errors"][0]["loc"] == ["path"], body
    assert body["errors"][0]["type"] == "string_unstorable", body


async def test_cancel_and_signal_of_an_unknown_instance_are_404(client: httpx.AsyncClient) -> None:
    unknown = str(uuid.uuid4())
    cancel = await client.post(f"/api/v1/instances/{unknown}/cancel")
    signal = await client.post(f"{DOCUMENTS}/{unknown}/signals/ocr.completed", json={"jobId": "j"})
    generic = await client.post(
        f"/api/v1/instances/{unknown}/signals/ocr.completed", json={"jobId": "j"}
    )

    assert_problem(cancel, 404, "instance_not_found")
    assert_problem(signal, 404, "instance_not_found")
    assert_problem(generic, 404, "instance_not_found")


@pytest.mark.parametrize(
    "path",
    [
        "/nope",
        "/api/v1/nope",
        "/api/v2/documents",
        "/api/v1/documents/x/y/z",
        "/api/v1/instances/a%2Fb",
    ],
)
async def test_unknown_route_is_a_404_problem(client: httpx.AsyncClient, path: str) -> None:
    assert_problem(await client.get(path), 404)


async def test_wrong_method_is_a_405_problem(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get(DOCUMENTS), 405)
    assert_problem(await client.delete("/api/v1/instances/x"), 405)


# -- no 5xx on odd requests -------------------------------------------------------------
ODD_REQUESTS: list[tuple[str, str, dict[str, object]]] = [
    (
        "POST",
        DOCUMENTS,
        {"content": b'{"documentId": "d", "pages": 1}', "headers": {"Content-Type": "text/plain"}},
    ),
    (
        "POST",
        DOCUMENTS,
        {"content": b"\x00\x01\x02\x03", "headers": {"Content-Type": "application/octet-stream"}},
    ),
    (
        "POST",
        DOCUMENTS,
        {"json": {"documentId": "d", "pages": 1}, "headers": {"Idempotency-Key": b"caf\xe9"}},
    ),
    ("POST", DOCUMENTS, {"json": {"documentId": "\u0000\ud7ff\U0001f4c4", "pages": 1}}),
    ("POST", DOCUMENTS, {"json": {"documentId": "d", "pages": 1, "instanceKey": "k" * 5000}}),
    ("POST", DOCUMENTS, {"json": {"documentId": "d", "pages": 1, "instanceKey": ""}}),
    ("POST", DOCUMENTS, {"json": [1, 2, 3] * 10_000}),
    ("POST", f"{DOCUMENTS}/x/signals/ocr.completed", {"content": b"\xff"}),
    ("POST", "/api/v1/instances/x/signals/" + "s" * 3000, {"json": {}}),
    ("GET", "/api/v1/instances/" + "%FF" * 100, {}),
    ("GET", "/api/v1/events", {"params": {"limit": "1", "after": "9" * 30}}),
    ("POST", "/fake/ocr/jobs", {"content": b"[]", "headers": {"Content-Type": "application/json"}}),
    ("GET", "/fake/ocr/jobs/" + "z" * 3000, {}),
]


@pytest.mark.parametrize(
    ("method", "path", "kwargs"), ODD_REQUESTS, ids=[f"{i}" for i in range(len(ODD_REQUESTS))]
)
async def test_odd_requests_never_answer_5xx(
    client: httpx.AsyncClient, method: str, path: str, kwargs: dict[str, object]
) -> None:
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    headers.update(kwargs.pop("headers", {}) if "headers" in kwargs else {})  # type: ignore[call-overload]
    resp = await client.request(method, path, headers=headers, **kwargs)  # type: ignore[arg-type]

    assert resp.status_code < 500, (resp.status_code, resp.text[:300])
    if resp.status_code >= 400 and path.startswith("/api"):
        assert_problem(resp, resp.status_code)


async def test_an_unknown_route_points_to_the_flows_and_the_docs(client: httpx.AsyncClient) -> None:
    resp = await client.get("/api/v1/builds-that-do-not-exist")
    assert_problem(resp, 404, "not_found")
    body = resp.json()
    assert body["detail"].startswith("no route GET /api/v1/builds-that-do-not-exist: ")
    assert "GET /api/v1/flows" in body["detail"] and body["flows"] == "/api/v1/flows"


async def test_operation_summaries_are_in_sentence_case(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    summaries = {
        op["operationId"]: op["summary"]
        for methods in spec["paths"].values()
        for op in methods.values()
    }
    assert summaries["list_nodes"] == "List nodes"
    assert "Start document.process@1.0.0" in summaries.values()
    assert all(s[:1].isupper() for s in summaries.values())
    assert not [s for s in summaries.values() if "Document.Process" in s]
