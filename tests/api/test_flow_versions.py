"""Versions side by side: a node serving v1 and v2 starts v2 and finishes parked v1 instances
on v1; a node without v1 says so once at start-up, and ``GET /api/v1/flows`` lists v1 as
not served, with its unfinished count."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from flowpark.flows import Capability, Flow, HttpTrigger, Signal, StepContext
from flowpark.runtime.app import create_app
from tests.support.api import wait_for_state
from tests.support.server import live_server

ROUTE = "/api/v1/versioned"


class Order(BaseModel):
    order: str


class Go(BaseModel):
    ok: bool = True


class Ran(BaseModel):
    version: str


GO = Signal("go", Go)


class Stamp(Capability):
    id = "versioned.stamp"
    idempotent = True
    puts = (Ran,)

    def __init__(self, version: str) -> None:
        self.version = version

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Ran(version=self.version))


def _flow(version: str) -> Flow:
    """Waits for ``go``, then records which version's code ran."""
    return (
        Flow("versioned", version, input=Order, output=Ran, trigger=HttpTrigger("POST", ROUTE))
        .await_signal(GO)
        .step(Stamp(version))
        .returns(lambda bag: bag.get(Ran), reads=(Ran,))
    )


def _node(url: str, *versions: str) -> Any:
    flows = [_flow(v) for v in versions]
    return live_server(url, app_factory=lambda s: create_app(s, flows=[lambda _deps: flows]))


async def _start(http: Any, order: str) -> dict[str, Any]:
    resp = await http.post(ROUTE, json={"order": order}, headers={"Idempotency-Key": order})
    assert resp.status_code == 202, resp.text
    body: dict[str, Any] = resp.json()
    assert body["status"] == "suspended"
    return body


async def test_parked_v1_finishes_on_v1_while_new_starts_take_v2(
    _sqlite_template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "versions.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    with _node(url, "1.0.0") as node:
        async with node.client() as http:
            old = (await _start(http, "o-1"))["instanceId"]

    with caplog.at_level(logging.WARNING, logger="flowpark.runtime"), _node(url, "2.0.0") as node:
        async with node.client() as http:
            listed = (await http.get("/api/v1/flows")).json()
            # v1's signal and budget are refused here, saying why (v1 does declare ``go``)
            signal = await http.post(f"/api/v1/instances/{old}/signals/go", json={})
            budget = await http.post(f"/api/v1/instances/{old}/budget", json={"extendBy": "PT1H"})
            # nor can it be woken here: 409, for one instance and in a bulk action
            wake = await http.post(f"/api/v1/instances/{old}/wake")
            bulk = await http.post(
                "/api/v1/instances/actions",
                json={"action": "wake", "all": True},
                headers={"Idempotency-Key": "bulk-wake"},
            )
    assert (signal.status_code, signal.json()["code"]) == (404, "signal_not_declared")
    assert "does not serve flow versioned@1.0.0" in signal.json()["detail"], signal.text
    assert (budget.status_code, budget.json()["code"]) == (409, "no_budget")
    assert "does not serve flow versioned@1.0.0" in budget.json()["detail"], budget.text
    assert (wake.status_code, wake.json()["code"]) == (409, "version_not_served"), wake.text
    assert "does not serve flow versioned@1.0.0" in wake.json()["detail"], wake.text
    assert bulk.status_code == 200, bulk.text
    assert (bulk.json()["acted"], bulk.json()["skipped"]) == (0, 1), bulk.text
    assert bulk.json()["results"][0]["code"] == "version_not_served", bulk.text
    lines = [r.getMessage() for r in caplog.records if "does not serve" in r.getMessage()]
    assert lines == [
        "1 unfinished instance(s) of flow versions this node does not serve: "
        "versioned@1.0.0 (1); they wait for a node that serves them (keep the old version "
        "in your flows until they finish)"
    ]
    assert [(f["version"], f["served"], f["unfinished"]) for f in listed] == [
        ("2.0.0", True, 0),
        ("1.0.0", False, 1),
    ]

    with _node(url, "1.0.0", "2.0.0") as node:
        async with node.client() as http:
            new = (await _start(http, "o-2"))["instanceId"]
            view = (await http.get(f"/api/v1/instances/{new}")).json()
            assert (view["flow"], view["version"]) == ("versioned", "2.0.0")
            listed = (await http.get("/api/v1/flows")).json()
            assert [(f["version"], f["served"], f["unfinished"]) for f in listed] == [
                ("1.0.0", True, 1),
                ("2.0.0", True, 1),
            ]
            for instance in (old, new):
                resp = await http.post(f"/api/v1/instances/{instance}/signals/go", json={})
                assert resp.status_code == 202, resp.text
            done = {i: await wait_for_state(http, i) for i in (old, new)}
    assert done[old]["result"] == {"version": "1.0.0"}  # the code it started with
    assert done[new]["result"] == {"version": "2.0.0"}
