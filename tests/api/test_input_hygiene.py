"""Input hygiene of every route that takes a JSON body (start, signal, bulk action, budget
extension): bodies are JSON by their ``Content-Type``, UTF-8, with unique keys; an
``Idempotency-Key`` is visible ASCII; each refusal is a 4xx problem, and nothing is stored
or done."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

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
    # (other control characters never reach the app: the HTTP server refuses the request;
    # bytes that are not UTF-8, such as Latin-1 text, are 422 input_invalid in any header)
    ["caf\u00e9".encode().decode("latin-1"), "tab\tinside"],
    ids=["utf8-bytes", "tab"],
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


@pytest.mark.parametrize(
    "key", ["osc\x1b]0;owned\x07", "csi\x1b[2J", "c1\x9b31m", "del\x7f", "tab\t", "lf\n"]
)
async def test_an_instance_key_with_a_control_character_is_refused(
    client: httpx.AsyncClient, key: str
) -> None:
    """An instance key is stored and shown (the list, the CLI): no control character."""
    resp = await start_document(client, document_id=f"key-{uuid.uuid4().hex[:8]}", instanceKey=key)
    problem = assert_problem(resp, 422, "input_invalid")
    assert [e["loc"] for e in problem["errors"]] == [["body", "instanceKey"]]


#: A valid body of each operation that takes a JSON body, by operation id: sent as UTF-8
#: JSON, none is refused as input_invalid (the instance ids name no instance: 404).
VALID_BODIES: dict[str, Callable[[], dict[str, Any]]] = {
    "act_on_instances": lambda: {"action": "wake", "filter": {"flow": "none"}, "dryRun": True},
    "dismiss_review": lambda: {"note": "nothing to do"},
    "resolve_review": lambda: {"note": "done by hand"},
    "extend_instance_budget": lambda: {"extendBy": 60},
    "signal_instance": lambda: {"jobId": "job-1", "status": "completed"},
    "signal_document_process_ocr_completed": lambda: {"jobId": "job-1", "status": "completed"},
    "signal_ocr_ocr_completed_by_correlation": lambda: {"jobId": "job-1", "status": "completed"},
    "start_document_process": lambda: {"documentId": f"body-{uuid.uuid4().hex[:8]}", "pages": 1},
    "start_job_await": lambda: {"instanceKey": f"body-{uuid.uuid4().hex[:8]}"},
}


async def _body_operations(client: httpx.AsyncClient) -> list[tuple[str, str]]:
    """``(operation id, path with its parameters filled)`` of every API operation whose
    OpenAPI entry takes a JSON body."""
    document = (await client.get("/openapi.json")).json()
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            if method == "post" and path.startswith("/api/") and "application/json" in content:
                filled = path.replace("{instance_id}", str(uuid.uuid4())).replace("{name}", "s")
                found.append((operation["operationId"], filled))
    return found


def _dumps_duplicated(body: dict[str, Any]) -> bytes:
    """``body`` as JSON whose first key appears twice (the second time with the same
    value, so last-wins and first-wins parsers would both take it)."""
    first = next(iter(body))
    inner = json.dumps(body)[1:-1]
    return ("{" + json.dumps(first) + ": " + json.dumps(body[first]) + ", " + inner + "}").encode()


async def test_every_json_body_must_be_utf8_json_with_unique_keys(
    client: httpx.AsyncClient,
) -> None:
    operations = await _body_operations(client)
    assert sorted(op for op, _ in operations) == sorted(VALID_BODIES)  # a new one: add it
    for operation, path in operations:
        body = VALID_BODIES[operation]()

        async def post(content: bytes, content_type: str = "application/json") -> httpx.Response:
            headers = {"Content-Type": content_type, "Idempotency-Key": uuid.uuid4().hex}
            return await client.post(path, content=content, headers=headers)  # noqa: B023

        control = await post(json.dumps(body).encode())
        assert control.status_code < 500 and control.status_code != 422, (operation, control.text)
        for encoding in ("utf-16", "utf-32"):
            refused = assert_problem(
                await post(json.dumps(body).encode(encoding)), 422, "input_invalid"
            )
            assert "not UTF-8" in refused["detail"], (operation, refused)
        twice = assert_problem(await post(_dumps_duplicated(body)), 422, "input_invalid")
        assert "appears twice" in twice["detail"], (operation, twice)
        form = await post(b"a=1", "application/x-www-form-urlencoded")
        assert_problem(form, 415, "unsupported_media_type")


async def test_a_bulk_action_with_a_repeated_key_acts_on_nothing(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    started = await start_document(client, document_id=doc_id, instanceKey=doc_id)
    assert started.status_code == 202, started.text
    instance_id = started.json()["instanceId"]
    # read last-wins, this body would cancel the instance
    raw = (
        '{"action": "wake", "action": "cancel", '
        f'"filter": {{"instanceKey": "none", "instanceKey": "{doc_id}"}}}}'
    ).encode()
    resp = await client.post(
        "/api/v1/instances/actions", content=raw, headers={"Content-Type": "application/json"}
    )
    assert_problem(resp, 422, "input_invalid")
    assert "appears twice" in resp.json()["detail"]
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["state"] != "cancelled" and not view.get("actions")


async def test_the_body_check_comes_after_the_scope_check(anonymous: httpx.AsyncClient) -> None:
    resp = await anonymous.post(
        f"/api/v1/instances/{uuid.uuid4()}/budget",
        content=json.dumps({"extendBy": 60}).encode("utf-16"),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(resp, 401, "unauthorized")


async def test_a_route_that_takes_no_body_never_reads_one(client: httpx.AsyncClient) -> None:
    # wake, cancel and a delivery's retry take no body: one sent is ignored, as before
    for path in (
        f"/api/v1/instances/{uuid.uuid4()}/wake",
        f"/api/v1/instances/{uuid.uuid4()}/cancel",
    ):
        resp = await client.post(
            path, content=b'{"a": 1, "a": 2}', headers={"Content-Type": "application/json"}
        )
        assert_problem(resp, 404, "instance_not_found")
