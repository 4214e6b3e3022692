"""A node serving only its own flows: no fake provider, no sample route; the samples bring
their fakes only where they are served."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from flowpark.runtime.app import create_app
from tests.support.api import wait_for_state
from tests.support.server import live_server, server_settings

STAMP = """
from pydantic import BaseModel

from flowpark.flows import Capability, Flow, HttpTrigger, StepContext


class Order(BaseModel):
    order: str


class Stamped(BaseModel):
    by: str


class Stamp(Capability):
    id = "stamp.put"
    idempotent = True
    puts = (Stamped,)

    def __init__(self, node: str) -> None:
        self.node = node

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Stamped(by=self.node))


def flows(deps):
    return [
        Flow("stamp", "1.0.0", input=Order, output=Stamped,
             trigger=HttpTrigger("POST", "/api/v1/stamps"))
        .step(Stamp(deps.settings.node_id))
        .returns(lambda bag: bag.get(Stamped), reads=(Stamped,))
    ]
"""


def _paths(app: Any) -> set[str]:
    """Every path the app serves, through included routers."""
    found: set[str] = set()
    stack = list(app.routes)
    while stack:
        route = stack.pop()
        if hasattr(route, "original_router"):
            stack.extend(route.original_router.routes)
        elif isinstance(getattr(route, "path", None), str):
            found.add(route.path)
    return found


def test_only_your_flows_means_no_fake_paths(tmp_path: Path) -> None:
    (tmp_path / "stamp_flows.py").write_text(STAMP)
    settings = server_settings("sqlite:///unused.db", "http://127.0.0.1:9")
    own_app = create_app(settings, flows=[str(tmp_path / "stamp_flows.py")])
    own = _paths(own_app)
    assert "/api/v1/stamps" in own and "/api/v1/stamps" in own_app.openapi()["paths"]
    assert [p for p in own if p.startswith("/fake")] == []
    assert "/api/v1/documents" not in own

    samples_app = create_app(settings, flows=["samples"])
    samples = _paths(samples_app)
    assert "/fake/ocr/jobs" in samples and "/fake/jobs/{job_id}" in samples
    # the fakes are served, but they are no part of the API's contract
    assert not [p for p in samples_app.openapi()["paths"] if p.startswith("/fake")]


async def test_your_flow_runs_with_the_node_deps(_sqlite_template: Path, tmp_path: Path) -> None:
    (tmp_path / "stamp_served.py").write_text(STAMP.replace('"stamp"', '"stamp.served"'))
    path = tmp_path / "own.db"
    shutil.copyfile(_sqlite_template, path)
    target = str(tmp_path / "stamp_served.py")
    with live_server(
        f"sqlite:///{path}", app_factory=lambda s, _sample: create_app(s, flows=[target])
    ) as server:
        async with server.client() as http:
            resp = await http.post(
                "/api/v1/stamps", json={"order": "o-1"}, headers={"Idempotency-Key": "o-1"}
            )
            assert resp.status_code in (200, 202), resp.text
            view = await wait_for_state(http, resp.json()["instanceId"])
            assert view["state"] == "completed", view
            assert view["result"] == {"by": server.settings.node_id}
            assert (await http.get("/fake/ocr/jobs")).status_code == 404
