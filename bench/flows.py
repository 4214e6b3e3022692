"""Bench flows and the in-process wiring the engine-API scenarios use.

``bench.peers`` 1.0.0: one parked poll of a trivial in-process status check (no HTTP)
that is satisfied on attempt ``polls - 1`` (three polls by default), with a fixed durable
wait between polls. The shape other durable-flow systems are measured in.

The :class:`Probe` keeps, per instance, the ``wake_at`` each park asked for (through
``Engine.wake_listeners``) and, per attempt after the first, the attempt's start minus that
``wake_at``: the wake lag.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from bench.compat import name_of

SystemClock = name_of("flowpark.engine.clock", "SystemClock")
Engine = name_of("flowpark.engine.node.engine", "Engine")
EngineConfig = name_of("flowpark.engine.node.engine", "EngineConfig")
Backoff = name_of("flowpark.flows", "Backoff")
Capability = name_of("flowpark.flows", "Capability")
Catalog = name_of("flowpark.flows", "Catalog")
Flow = name_of("flowpark.flows", "Flow")
StepContext = name_of("flowpark.flows", "StepContext")
SqlStore = name_of("flowpark.store", "SqlStore")
make_async_engine = name_of("flowpark.store", "make_async_engine")


__all__ = ["PeersInput", "Probe", "ProbeCheck", "build_peers_flow", "node_engine"]


class PeersInput(BaseModel):
    key: str


class ProbeStatus(BaseModel):
    polls: int


@dataclass
class Probe:
    """What the bench watches inside a node: wakes asked for, lags seen, completions."""

    wake_at: dict[str, datetime] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    wake_times: list[float] = field(default_factory=list)  # perf_counter of each wake
    attempts: int = 0

    def on_park(self, instance_id: str, wake_at: datetime) -> None:
        self.wake_at[instance_id] = wake_at

    def on_attempt(self, instance_id: str, now: datetime) -> None:
        self.attempts += 1
        wake = self.wake_at.pop(instance_id, None)
        if wake is not None:
            self.lags.append((now - wake).total_seconds())
            self.wake_times.append(time.perf_counter())


class ProbeCheck(Capability):
    """``bench.status``: a trivial in-process status check: "done" on attempt ``polls-1``."""

    id = "bench.status"
    idempotent = True
    puts = (ProbeStatus,)

    def __init__(self, probe: Probe) -> None:
        self.probe = probe

    async def execute(self, ctx: StepContext) -> None:
        self.probe.on_attempt(ctx.instance_id, ctx.now)
        ctx.put(ProbeStatus(polls=ctx.scope + 1))


def build_peers_flow(
    probe: Probe,
    *,
    polls: int = 3,
    wait: timedelta = timedelta(seconds=1),
    name: str = "bench.peers",
) -> Flow:
    """``polls`` attempts of :class:`ProbeCheck` with a fixed durable ``wait`` between."""

    def done(bag: object) -> bool:
        return bag.get(ProbeStatus).polls >= polls  # type: ignore[attr-defined]

    return Flow(name, "1.0.0", input=PeersInput).poll_until(
        ProbeCheck(probe),
        until=done,
        interval=Backoff.fixed(wait),
        timeout=timedelta(hours=1),
        reads=(ProbeStatus,),
    )


@asynccontextmanager
async def node_engine(
    url: str,
    *,
    ocr_url: str | None = None,
    flows: list[Flow] | None = None,
    pool_size: int = 20,
    concurrency: int = 32,
    sweep_batch: int = 100,
    node_id: str = "bench-node",
    metrics: bool = False,
) -> AsyncIterator[Engine]:
    """An engine on ``url`` with the SystemClock (like ``create_app`` builds one): the
    ``document.process`` sample bound to the OCR at ``ocr_url`` (when given) and ``flows``.
    With ``metrics`` it counts Prometheus metrics and refreshes the instance gauges as a
    node does (``FLOWPARK_METRICS_ENABLED``, the default of ``serve`` and ``worker``).
    """
    db = make_async_engine(url, pool_size=pool_size)
    catalog = Catalog()
    http = None
    if ocr_url is not None:
        # imported here: a node without the OCR starts faster (see the peers restart)
        outbound_client = name_of("flowpark.runtime.http", "outbound_client")
        OcrClient = name_of("flowpark.samples.document_processing", "OcrClient")
        build_document_flow = name_of("flowpark.samples.document_processing", "build_document_flow")

        http = outbound_client(10)
        catalog.register(build_document_flow(OcrClient(http, ocr_url)))
    for flow in flows or ():
        catalog.register(flow)
    telemetry = None
    if metrics:
        Telemetry = name_of("flowpark.runtime.telemetry", "Telemetry")
        Settings = name_of("flowpark.settings", "Settings")

        telemetry = Telemetry(Settings(database_url=url, node_id=node_id))
    # keyword arguments only when set, so the harness also drives older revisions of the
    # engine (``bench compare --against REV``)
    journal = SqlStore(db, on_batch=telemetry.observer.batched) if telemetry else SqlStore(db)
    config: dict[str, Any] = {
        "node_id": node_id,
        "sweep_batch": sweep_batch,
        "concurrency": concurrency,
    }
    if "provider_limits" in getattr(EngineConfig, "__dataclass_fields__", {}):
        # the engine's cost, not the sample's declared OCR limit (100 calls/s): lifted here
        config["provider_limits"] = {"ocr": {"rate_per_second": 1_000_000, "burst": 1_000_000}}
    engine = Engine(
        journal,
        catalog,
        SystemClock(),
        EngineConfig(**config),
        **({"observer": telemetry.observer} if telemetry else {}),
    )
    if telemetry is not None:
        telemetry.start(db, engine.clock)
    try:
        yield engine
    finally:
        if telemetry is not None:
            await telemetry.stop()
        if http is not None:
            await http.aclose()
        await db.dispose()


def document_input(i: int, run: str) -> dict[str, object]:
    """The sample document every bench starts (what ``bytes_per_instance`` includes)."""
    return {"documentId": f"doc-{run}-{i:07d}", "contentType": "application/pdf", "pages": 3}
