"""Provider signal routes (``POST /api/v1/providers/{provider}/signals/{name}``) over real
HTTP: a bearer-token provider signal finds the instance holding the correlation key its
payload names; an unknown key is 404 ``correlation_key_unknown`` and stores nothing; a key
two flows' instances hold is 409 ``correlation_key_ambiguous``; a delivery naming no key is
204; an undeclared provider signal is 404 ``signal_not_declared``; a GitHub delivery that is
not the signal (``ping``) is 204; a replayed delivery id after its instance ended answers
the first signal. Every refusal is problem+json. The node serves
``tests/e2e/provider_flows.py`` (SQLite)."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark.runtime.app import create_app
from tests.support.api import wait_for_state
from tests.support.server import LiveServer, live_server

FLOWS = Path(__file__).parents[1] / "e2e" / "provider_flows.py"
GITHUB = "gh-secret-for-the-api-tier"
PARCELS = "/api/v1/providers/carrier/signals/parcel.delivered"
CI = "/api/v1/providers/ci/signals/ci.completed"


@pytest.fixture(scope="module")
def node(_sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    path = tmp_path_factory.mktemp("correlated") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(
        f"sqlite:///{path}",
        app_factory=lambda s, _sample: create_app(s, flows=[str(FLOWS)]),
        signal_secrets={"github": GITHUB},
    ) as server:
        yield server


async def started(http: httpx.AsyncClient, route: str, body: dict[str, Any]) -> str:
    resp = await http.post(route, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "suspended", resp.text
    return str(resp.json()["instanceId"])


async def signals(http: httpx.AsyncClient, instance_id: str) -> list[dict[str, Any]]:
    return (await http.get(f"/api/v1/instances/{instance_id}")).json()["signals"]  # type: ignore[no-any-return]


def problem(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = resp.json()
    assert body["code"] == code, body
    return body


def github(body: bytes, delivery: str, event: str = "workflow_run") -> dict[str, str]:
    digest = hmac.new(GITHUB.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
    }


def workflow_run(run_id: int) -> bytes:
    run = {"id": run_id, "status": "completed", "conclusion": "success"}
    return json.dumps({"action": "completed", "workflow_run": run}).encode()


JSON = {"Content-Type": "application/json"}


async def test_a_bearer_provider_signal_ends_the_wait_of_the_key_holder(node: LiveServer) -> None:
    async with node.client() as http:
        tracking = f"TRK-{uuid.uuid4().hex[:8]}"
        other = await started(http, "/api/v1/parcels", {"tracking": f"{tracking}-other"})
        instance_id = await started(http, "/api/v1/parcels", {"tracking": tracking})
        paid = {"tracking": tracking, "signed_by": "ana"}
        resp = await http.post(PARCELS, json=paid, headers={"Idempotency-Key": "p-1"})
        assert resp.status_code == 202, resp.text
        assert (resp.json()["instanceId"], resp.json()["created"]) == (instance_id, True)
        view = await wait_for_state(http, instance_id)
        assert view["state"] == "completed" and view["result"]["tracking"] == tracking
        assert await signals(http, other) == []
        # the key was released with its instance: now unknown, nothing stored
        again = await http.post(PARCELS, json=paid)
        body = problem(again, 404, "correlation_key_unknown")
        assert tracking in body["detail"]
        assert len(await signals(http, instance_id)) == 1


async def test_an_unknown_key_stores_nothing_and_no_key_is_204(node: LiveServer) -> None:
    async with node.client() as http:
        waiting = await started(http, "/api/v1/parcels", {"tracking": f"T-{uuid.uuid4().hex}"})
        resp = await http.post(PARCELS, json={"tracking": "T-nobody", "signed_by": "x"})
        problem(resp, 404, "correlation_key_unknown")
        empty = await http.post(PARCELS, json={"tracking": "", "signed_by": "x"})
        assert empty.status_code == 204, empty.text
        invalid = await http.post(PARCELS, json={"tracking": 7})
        problem(invalid, 422, "input_invalid")
        no_payload = await http.post(PARCELS, content=b"null", headers=JSON)  # was 204
        problem(no_payload, 422, "input_invalid")
        assert await signals(http, waiting) == []
    async with httpx.AsyncClient(base_url=node.base_url) as anonymous:
        refused = await anonymous.post(PARCELS, json={"tracking": "T", "signed_by": "x"})
        problem(refused, 401, "unauthorized")


async def test_an_undeclared_provider_signal_is_404_signal_not_declared(node: LiveServer) -> None:
    async with node.client() as http:
        resp = await http.post("/api/v1/providers/ci/signals/ci.nothing", json={})
        body = problem(resp, 404, "signal_not_declared")
        assert body["providerSignals"] == ["carrier/parcel.delivered", "ci/ci.completed"]


async def test_a_key_two_flows_hold_is_ambiguous_and_stores_nothing(node: LiveServer) -> None:
    run_id = uuid.uuid4().int % 10**9
    async with node.client() as http, httpx.AsyncClient(base_url=node.base_url) as hook:
        built = await started(http, "/api/v1/builds", {"run_id": run_id})
        gated = await started(http, "/api/v1/gated", {"run_id": run_id})
        body = workflow_run(run_id)
        resp = await hook.post(CI, content=body, headers=github(body, str(uuid.uuid4())))
        assert problem(resp, 409, "correlation_key_ambiguous")["flows"] == [
            "ci.build",
            "ci.gated",
        ]
        assert await signals(http, built) == [] and await signals(http, gated) == []


async def test_a_ping_is_204_and_a_replay_after_the_end_answers_the_first(
    node: LiveServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    async with node.client() as http, httpx.AsyncClient(base_url=node.base_url) as hook:
        instance_id = await started(http, "/api/v1/builds", {"run_id": run_id})
        ping = b'{"zen": "Keep it logically awesome."}'
        resp = await hook.post(CI, content=ping, headers=github(ping, "d-ping", "ping"))
        assert resp.status_code == 204, resp.text
        body, delivery = workflow_run(run_id), str(uuid.uuid4())
        first = await hook.post(CI, content=body, headers=github(body, delivery))
        assert first.status_code == 202, first.text
        assert (await wait_for_state(http, instance_id))["state"] == "completed"
        replay = await hook.post(CI, content=body, headers=github(body, delivery))
        assert replay.status_code == 202, replay.text
        assert replay.json()["created"] is False
        assert replay.json()["signalId"] == first.json()["signalId"]
        assert len(await signals(http, instance_id)) == 1


async def test_a_signed_delivery_without_its_delivery_id_is_401_as_documented(
    node: LiveServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    async with node.client() as http, httpx.AsyncClient(base_url=node.base_url) as hook:
        instance_id = await started(http, "/api/v1/builds", {"run_id": run_id})
        body = workflow_run(run_id)
        headers = github(body, "unused")
        del headers["X-GitHub-Delivery"]  # the signature is right; the delivery id is gone
        problem(await hook.post(CI, content=body, headers=headers), 401, "signature_invalid")
        assert await signals(http, instance_id) == []
    # docs/clients.md says so, in its table of answers
    page = (Path(__file__).resolve().parents[2] / "docs" / "clients.md").read_text()
    row = next(line for line in page.splitlines() if "missing delivery id" in line)
    assert "`X-GitHub-Delivery`" in row and "`401 signature_invalid`" in row


async def test_the_openapi_documents_each_provider_signal_route(node: LiveServer) -> None:
    async with node.client() as http:
        paths = (await http.get("/openapi.json")).json()["paths"]
    signed = paths[CI]["post"]
    assert signed["security"] == []
    assert {"202", "204", "401", "404", "409", "422"} <= set(signed["responses"])
    assert "correlation_key_unknown" in json.dumps(signed["responses"]["404"])
    assert paths[PARCELS]["post"]["requestBody"]["content"]["application/json"]["schema"]
