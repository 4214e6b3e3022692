"""The OpenAPI document is the contract: committed, complete (bearer scheme, response
models, problem schemas with each route's codes, required headers, examples, links), and
true of the real answers (they validate against the answer models)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from flowpark.api.models import (
    BudgetExtension,
    BulkAnswer,
    CancelAnswer,
    DeliveryView,
    EventView,
    FlowView,
    Health,
    InstanceCounts,
    InstanceList,
    InstanceView,
    PlanView,
    ReviewView,
    SignalAnswer,
    StartAnswer,
    WakeAnswer,
)
from flowpark.api.problems import PROBLEM_JSON, STATUS
from flowpark.errors import ErrorCode
from tests.support.api import DOCUMENTS, assert_problem, start_document
from tests.support.server import LiveServer

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "docs" / "openapi.json"
REFRESH = "python -m flowpark.runtime.openapi > docs/openapi.json"
METHODS = {"get", "post", "put", "patch", "delete", "head"}


@pytest.fixture(scope="module")
def doc(live: LiveServer) -> dict[str, Any]:
    """The document the live server serves (no token needed)."""
    resp = httpx.get(f"{live.base_url}/openapi.json", timeout=30)
    assert resp.status_code == 200
    return resp.json()  # type: ignore[no-any-return]


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _has_example(doc: dict[str, Any], media: dict[str, Any]) -> bool:
    if "example" in media or "examples" in media:
        return True
    schema = _resolve(doc, media.get("schema", {}))
    if schema.get("type") == "array":
        schema = _resolve(doc, schema.get("items", {}))
    return bool(schema.get("examples"))


async def test_the_served_document_is_the_committed_one(doc: dict[str, Any]) -> None:
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert doc == committed, (
        f"the served OpenAPI document differs from docs/openapi.json: if the change of "
        f"contract is meant, refresh it with `{REFRESH}` and commit it"
    )


async def test_every_api_operation_carries_the_bearer_scheme(doc: dict[str, Any]) -> None:
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    for method, path, op in _operations(doc):
        if path.startswith("/api/"):
            assert op.get("security") == [{"bearer": []}], (method, path)
            assert "401" in op["responses"], (method, path)


async def test_every_error_answer_is_a_problem_with_the_codes_of_its_status(
    doc: dict[str, Any],
) -> None:
    assert "HTTPValidationError" not in json.dumps(doc)
    for method, path, op in _operations(doc):
        for status, response in op["responses"].items():
            if int(status) < 400:
                continue
            assert list(response["content"]) == [PROBLEM_JSON], (method, path, status)
            schema = response["content"][PROBLEM_JSON]["schema"]
            assert schema["allOf"][0] == {"$ref": "#/components/schemas/Problem"}
            codes = schema["allOf"][1]["properties"]["code"]["enum"]
            assert codes and all(STATUS[ErrorCode(c)] == int(status) for c in codes)  # type: ignore[call-arg]  # lookup by value
            for code in codes:
                assert code in response["description"], (method, path, status, code)


async def test_every_body_has_a_schema_and_an_example(doc: dict[str, Any]) -> None:
    for method, path, op in _operations(doc):
        bodies = [("request", op["requestBody"]["content"])] if "requestBody" in op else []
        bodies += [(s, r["content"]) for s, r in op["responses"].items() if "content" in r]
        assert any(s.startswith("2") for s, _ in bodies), (method, path)
        for where, content in bodies:
            for media_type, media in content.items():
                assert "schema" in media, (method, path, where, media_type)
                assert _has_example(doc, media), (
                    f"{method} {path} {where} {media_type}: no example; declare "
                    "response_model=<a model of flowpark.api.models with examples> and "
                    "responses=problem_responses(...) on the route"
                )


async def test_start_routes_document_the_key_header_instance_key_and_links(
    doc: dict[str, Any],
) -> None:
    for path in (DOCUMENTS, "/api/v1/jobs"):
        op = doc["paths"][path]["post"]
        (header,) = [p for p in op["parameters"] if p["name"] == "Idempotency-Key"]
        assert header["in"] == "header" and header["required"] is True
        body = op["requestBody"]
        schema = body["content"]["application/json"]["schema"]
        # required exactly when the input has required fields (job.await: none)
        assert body["required"] is bool(schema.get("required")) is (path == DOCUMENTS)
        assert schema["properties"]["instanceKey"]["type"] == "string"
        answer = op["responses"]["202"]
        assert _resolve(doc, answer["content"]["application/json"]["schema"])["title"] == (
            "StartAnswer"
        )
        assert "Location" in answer["headers"]
        assert {link["operationId"] for link in answer["links"].values()} >= {
            "get_instance",
            "cancel_instance",
        }
    links = doc["paths"][DOCUMENTS]["post"]["responses"]["202"]["links"]
    assert links["Signal_ocr_completed"] == {
        "operationId": "signal_document_process_ocr_completed",
        "parameters": {"instance_id": "$response.body#/instanceId"},
    }
    operation_ids = {op.get("operationId") for _, _, op in _operations(doc)}
    for _, _, op in _operations(doc):
        for response in op["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in operation_ids


async def test_non_api_routes_stay_out_of_the_document(doc: dict[str, Any]) -> None:
    assert not [p for p in doc["paths"] if p.startswith("/fake")]
    assert "/docs" not in doc["paths"] and "/redoc" not in doc["paths"]


def _valid(model: type[BaseModel], value: Any) -> None:
    """``value`` is exactly ``model``'s JSON (unknown fields are refused)."""
    model.model_validate(value, by_alias=True, by_name=False)


async def test_real_answers_validate_against_the_answer_models(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    started = await start_document(client, doc_id, pages=200)  # waits: the signal ends it
    assert started.status_code == 202, started.text
    _valid(StartAnswer, started.json())
    instance_id = started.json()["instanceId"]
    signal = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        json={"jobId": "job-from-a-test"},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert signal.status_code == 202, signal.text
    _valid(SignalAnswer, signal.json())
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    _valid(InstanceView, view)
    assert view["journal"] and view["signals"]
    # the signal named no real OCR job: end the instance here (nothing left running)
    cancel = await client.post(f"/api/v1/instances/{instance_id}/cancel")
    if cancel.status_code == 409:
        assert_problem(cancel, 409, "instance_ended")
    else:
        assert cancel.status_code in (200, 202), cancel.text
        _valid(CancelAnswer, cancel.json())
    for path, model in (
        ("/api/v1/flows", FlowView),
        ("/api/v1/events", EventView),
        ("/api/v1/reviews", ReviewView),
        ("/api/v1/deliveries", DeliveryView),
    ):
        resp = await client.get(path)
        assert resp.status_code == 200
        for item in resp.json():
            _valid(model, item)
    _valid(Health, (await client.get("/healthz")).json())
    plan = await client.get("/api/v1/flows/document.process")
    assert plan.status_code == 200, plan.text
    _valid(PlanView, plan.json())
    listed = await client.get("/api/v1/instances", params={"limit": 5})
    assert listed.status_code == 200 and listed.json()["instances"]
    _valid(InstanceList, listed.json())
    counts = await client.get("/api/v1/instances/counts")
    assert counts.status_code == 200 and counts.json()["total"] >= 1
    _valid(InstanceCounts, counts.json())


async def test_operator_answers_validate(client: httpx.AsyncClient, doc_id: str) -> None:
    started = await start_document(client, doc_id, pages=50)
    instance_id = started.json()["instanceId"]
    woken = await client.post(f"/api/v1/instances/{instance_id}/wake")
    assert woken.status_code == 200, woken.text
    _valid(WakeAnswer, woken.json())
    extended = await client.post(
        f"/api/v1/instances/{instance_id}/budget", json={"extendBy": "PT1H"}
    )
    assert extended.status_code in (200, 409), extended.text  # 409: a node runs it now
    if extended.status_code == 200:
        _valid(BudgetExtension, extended.json())
    snake_budget = await client.post(
        f"/api/v1/instances/{instance_id}/budget", json={"extend_by": 60}
    )
    assert_problem(snake_budget, 422, "input_invalid")
    resp = await client.post(f"/api/v1/instances/{instance_id}/cancel")
    assert resp.status_code in (200, 202), resp.text
    _valid(CancelAnswer, resp.json())
    assert resp.json()["actionId"]
    dry = await client.post(
        "/api/v1/instances/actions",
        json={"action": "cancel", "filter": {"instanceKey": "none-" + doc_id}, "dryRun": True},
    )
    assert dry.status_code == 200, dry.text
    _valid(BulkAnswer, dry.json())
    bulk = await client.post(
        "/api/v1/instances/actions",
        json={"action": "wake", "filter": {"flow": "document.process"}, "limit": 2},
    )
    assert bulk.status_code == 200, bulk.text
    _valid(BulkAnswer, bulk.json())
    # the body's names are camelCase only
    snake = await client.post("/api/v1/instances/actions", json={"action": "wake", "dry_run": True})
    assert_problem(snake, 422, "input_invalid")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/flows/"),
        ("GET", "/api/v1/events/"),
        ("POST", f"{DOCUMENTS}/"),
        ("GET", "/api/v1/instances/01900000-0000-7000-8000-000000000000/"),
        ("GET", "/healthz/"),
    ],
)
async def test_a_trailing_slash_is_a_404_problem_not_a_redirect(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    resp = await client.request(method, path, json={"documentId": "d", "pages": 1})

    assert_problem(resp, 404, "not_found")
    assert "location" not in resp.headers


async def test_snake_case_input_names_are_refused(client: httpx.AsyncClient, doc_id: str) -> None:
    resp = await client.post(
        DOCUMENTS,
        json={"document_id": doc_id, "pages": 1},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    body = assert_problem(resp, 422, "input_invalid")
    assert {tuple(e["loc"]) for e in body["errors"]} >= {("documentId",), ("document_id",)}
    # both spellings at once: the snake_case one is still refused (an unknown field)
    both = await client.post(
        DOCUMENTS,
        json={"documentId": doc_id, "document_id": doc_id, "pages": 1},
        headers={"Idempotency-Key": uuid.uuid4().hex},
    )
    assert_problem(both, 422, "input_invalid")

    started = await start_document(client, pages=30)
    instance_id = started.json()["instanceId"]
    signal = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed", json={"job_id": "job-1"}
    )
    assert_problem(signal, 422, "input_invalid")
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["signals"] == []  # nothing stored


async def test_the_docs_pages_load_their_assets_from_the_node(live: LiveServer) -> None:
    async with live.client(token=None) as http:
        for page in ("/docs", "/redoc"):
            resp = await http.get(page)
            assert resp.status_code == 200
            urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", resp.text)
            urls += re.findall(r"""url:\s*["']([^"']+)["']""", resp.text)
            assert urls, resp.text
            assert not [u for u in urls if re.match(r"(https?:)?//", u)], urls
            assert "cdn" not in resp.text.lower()
            for url in urls:
                asset = await http.get(url)
                assert asset.status_code == 200, url
                if url.endswith(".js"):  # no image or font named from elsewhere either
                    assert "cdn." not in asset.text, url
