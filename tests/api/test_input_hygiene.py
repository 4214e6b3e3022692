"""Input hygiene of the start and signal routes: bodies are UTF-8 JSON with unique keys,
an ``Idempotency-Key`` is visible ASCII; each refusal is a 4xx problem, and nothing is
stored."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.api import DOCUMENTS, assert_problem, start_document

BODY = {"documentId": "hygiene-1", "pages": 1}


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-32"])
async def test_a_body_that_is_not_utf8_is_refused(client: httpx.AsyncClient, encoding: str) -> None:
    resp = await client.post(
        DOCUMENTS,
        content=json.dumps(BODY).encode(encoding),
        headers={"Content-Type": "application/json", "Idempotency-Key": f"enc-{encoding}"},
    )
    # (json.loads would take these bytes, guessing the encoding; UTF-16-LE of ASCII text
    # is valid UTF-8 with NULs between the characters: not JSON then)
    assert_problem(resp, 422, "input_invalid")


async def test_a_repeated_key_is_refused_at_any_depth(client: httpx.AsyncClient) -> None:
    for raw in (
        b'{"documentId": "a", "documentId": "b", "pages": 1}',
        b'{"documentId": "a", "pages": 1, "x": {"k": 1, "k": 2}}',
    ):
        resp = await client.post(
            DOCUMENTS,
            content=raw,
            headers={"Content-Type": "application/json", "Idempotency-Key": "dup"},
        )
        assert_problem(resp, 422, "input_invalid")
        assert "appears twice" in resp.json()["detail"]
    # nothing was started under that key: a proper start with it creates the instance
    ok = await start_document(client, document_id="dup-ok", key="dup")
    assert ok.status_code == 202, ok.text


@pytest.mark.parametrize(
    "key",
    # (other control characters never reach the app: the HTTP server refuses the request)
    ["caf\u00e9".encode().decode("latin-1"), "tab\tinside", "latin\xa0one"],
    ids=["utf8-bytes", "tab", "latin-1"],
)
async def test_an_idempotency_key_that_is_not_visible_ascii_is_400(
    client: httpx.AsyncClient, key: str
) -> None:
    raw_headers = [
        (b"authorization", client.headers["authorization"].encode()),
        (b"content-type", b"application/json"),
        (b"idempotency-key", key.encode("latin-1")),
    ]
    resp = await client.post(DOCUMENTS, json=BODY, headers=httpx.Headers(raw_headers))
    assert_problem(resp, 400, "idempotency_key_invalid")


async def test_a_visible_ascii_key_with_inner_spaces_is_accepted(client: httpx.AsyncClient) -> None:
    resp = await start_document(client, document_id="spaces", key="order 42 / try #1")
    assert resp.status_code == 202, resp.text


@pytest.mark.parametrize("document_id", ["line\nbreak", "esc\x1b[31m", "nul\x00", "c1\x85"])
async def test_a_document_id_with_a_control_character_is_refused(
    client: httpx.AsyncClient, document_id: str
) -> None:
    resp = await start_document(client, document_id=document_id)
    assert_problem(resp, 422, "input_invalid")
