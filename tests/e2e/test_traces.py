"""One trace follows a document from its start request through two parks and wakes on
another node to completion (OpenTelemetry, in-memory exporter); every provider call carries
``traceparent`` of that trace."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from flowpark.runtime.app import create_app
from flowpark.settings import Settings
from tests.support.eventually import eventually
from tests.support.obs_flows import flows
from tests.support.server import TOKEN, live_server

pytestmark = pytest.mark.slow


def _provider(received: list[str]) -> FastAPI:
    provider = FastAPI()

    @provider.get("/probe")
    async def probe(request: Request) -> dict[str, str]:
        received.append(request.headers.get("traceparent", ""))
        return {"status": "ok"}

    return provider


async def test_one_trace_from_start_through_wakes_on_another_node(
    _sqlite_template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    url = f"sqlite:///{path}"
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    received: list[str] = []

    def node(settings: Settings) -> FastAPI:
        return create_app(settings, flows=[flows], tracer_provider=tracer_provider)

    with live_server(url, app_factory=lambda _: _provider(received)) as provider:
        monkeypatch.setenv("OBS_PROVIDER_URL", provider.base_url)
        with (
            # node a serves the start and does not sweep: every wake happens on node b
            live_server(url, app_factory=node, node_id="node-a", run_sweeper=False) as a,
            live_server(url, app_factory=node, node_id="node-b", timer_scan_interval=0.1) as b,
        ):
            async with a.client() as client:
                resp = await client.post("/api/v1/obs/poll", json={"order_id": "traced"})
                assert resp.status_code == 202, resp.text
                instance_id = resp.json()["instanceId"]

                async def completed() -> None:
                    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
                    assert view["state"] == "completed", view

                await eventually(completed, timeout=30)
            assert b.settings.node_id == "node-b"

    spans: list[ReadableSpan] = list(exporter.get_finished_spans())

    def attrs(span: ReadableSpan) -> Mapping[str, Any]:
        return span.attributes or {}

    request = [
        s
        for s in spans
        if s.kind is SpanKind.SERVER and attrs(s).get("http.route") == "/api/v1/obs/poll"
    ]
    assert len(request) == 1, [s.name for s in spans]
    trace_id = request[0].context.trace_id
    by_id = {s.context.span_id: s for s in spans}

    def of(name: str) -> list[ReadableSpan]:
        return [
            s
            for s in spans
            if s.name == name and attrs(s).get("flowpark.instance_id") == instance_id
        ]

    (start,) = of("flowpark.start")
    assert start.context.trace_id == trace_id
    assert attrs(start)["flowpark.flow"] == "obs.poll"
    runs = sorted(of("flowpark.run"), key=lambda s: s.start_time or 0)
    # the start's run on node a, then one run per wake on node b: two parks, two wakes
    assert [attrs(r)["flowpark.node"] for r in runs] == ["node-a", "node-b", "node-b"]
    assert all(r.context.trace_id == trace_id for r in runs)
    for run in runs[1:]:  # hours later it would be the same: the context is in the row
        assert run.parent is not None and run.parent.span_id == start.context.span_id
        assert [link.context.span_id for link in run.links] == [start.context.span_id]
    calls = sorted(of("capability obs.probe"), key=lambda s: s.start_time or 0)
    assert [attrs(c)["flowpark.scope"] for c in calls] == [0, 1, 2]
    assert all(attrs(c)["flowpark.try"] == 1 for c in calls)
    assert {attrs(c)["flowpark.step"] for c in calls} == {1}  # the poll body node
    for call, run in zip(calls, runs, strict=True):
        assert call.parent is not None and call.parent.span_id == run.context.span_id
    # each provider call: a client span under its capability span, its traceparent sent
    assert len(received) == 3
    for header, call in zip(received, calls, strict=True):
        version, sent_trace, parent_span, _flags = header.split("-")
        assert version == "00" and int(sent_trace, 16) == trace_id
        client_span = by_id[int(parent_span, 16)]
        assert client_span.kind is SpanKind.CLIENT
        assert client_span.parent is not None
        assert client_span.parent.span_id == call.context.span_id
    assert TOKEN not in str([dict(attrs(s) or {}) for s in spans])
