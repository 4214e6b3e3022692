"""``flowpark worker``: a node that sweeps but serves no HTTP."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Sequence
from typing import Any

from flowpark.engine.clock import SystemClock
from flowpark.engine.node.versions import log_unserved
from flowpark.flows import Catalog
from flowpark.redaction import register_secrets
from flowpark.runtime.delivery import Deliverer
from flowpark.runtime.heap import release_collector, settle_heap
from flowpark.runtime.http import outbound_client
from flowpark.runtime.jobs import NodeJobs
from flowpark.runtime.liveness import NodeBeat
from flowpark.runtime.loading import Deps, FlowSource, load_flows, register_flows
from flowpark.runtime.logs import set_node_id
from flowpark.runtime.node import node_engine
from flowpark.runtime.retention import Purger
from flowpark.runtime.scheduler import Sweeper
from flowpark.runtime.telemetry import Telemetry
from flowpark.settings import Settings
from flowpark.store import check_schema_at_head, make_async_engine
from flowpark.store.deliveries import SqlDeliveries
from flowpark.store.nodes import SqlNodes
from flowpark.store.retention import SqlRetention

__all__ = ["run_worker"]

log = logging.getLogger("flowpark.worker")


async def run_worker(
    settings: Settings | None = None, flows: Sequence[str | FlowSource] | None = None
) -> None:
    """Sweep until SIGINT/SIGTERM.

    With ``settings.metrics_port`` the worker serves its Prometheus metrics on
    ``http://<metrics_host>:<metrics_port>/metrics`` (prometheus-client's own listener).

    Args:
        settings: default from ``FLOWPARK_*``.
        flows: flows targets or sources (default ``settings.flows``: serve the same ones as
            the other nodes).

    Raises:
        FlowsUnloadable: code ``flows_unloadable``.
        DefinitionError: code ``definition_invalid``.
    """
    settings = settings or Settings()
    set_node_id(settings.node_id)
    register_secrets(settings.secret_values())
    db = make_async_engine(
        settings.database_url, pool_size=settings.db_pool_size, schema=settings.database_schema
    )
    http = outbound_client(settings.http_timeout_seconds)
    telemetry = Telemetry(settings)
    telemetry.instrument_client(http)
    listener = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    deps = Deps(http, settings)
    jobs = NodeJobs()  # the worker's one scheduler: every periodic job is a job of it
    try:
        catalog = Catalog()
        register_flows(catalog, load_flows(settings.flow_targets if flows is None else flows, deps))
        await check_schema_at_head(db, settings.database_schema)
        engine = node_engine(settings, db, catalog, SystemClock(), telemetry.observer)
        await log_unserved(engine.store.operator, catalog, engine.clock.now())
        clock = engine.clock
        telemetry.start(db, clock, jobs)
        if telemetry.metrics is not None and settings.metrics_port is not None:
            listener = _serve_metrics(telemetry, settings)
        sweeper = Sweeper(engine, settings.timer_scan_interval, jobs=jobs)
        sweeper.start()
        beat = NodeBeat(SqlNodes(db), clock, settings, catalog, "worker", sweeper, jobs=jobs)
        await beat.start()
        deliverer = None
        if settings.subscribers:
            deliverer = Deliverer(
                SqlDeliveries(db),
                settings.subscribers,
                http,
                engine.clock,
                settings.node_id,
                settings,
                observer=telemetry.observer,
                jobs=jobs,
            )
            deliverer.start()
        purger = None
        retention = settings.retention_period
        if retention is not None:
            purger = Purger(
                SqlRetention(db),
                engine.clock,
                retention,
                batch=settings.retention_batch,
                interval_seconds=settings.retention_scan_seconds,
                jobs=jobs,
            )
            purger.start()
        if settings.gc_freeze:
            settle_heap()  # what start-up made is kept: never scanned again
        else:
            release_collector()  # paused for the start-up (flowpark.runtime.heap)
        log.info(
            "flowpark worker %s sweeping every %.1fs",
            settings.node_id,
            settings.timer_scan_interval,
        )
        await stop.wait()
        if purger is not None:
            await purger.stop()
        if deliverer is not None:
            await deliverer.stop()
        grace = settings.shutdown_grace_seconds
        deadline = time.monotonic() + grace
        await sweeper.stop(grace_seconds=grace)
        left = await engine.close(max(0.0, deadline - time.monotonic()))
        if left:  # their leases are released: another node resumes them at once
            log.warning(
                "worker stopped with %d run(s) unfinished after its %.1f s grace; the next "
                "sweep continues them: %s",
                len(left),
                grace,
                ", ".join(left[:20]),
            )
        await beat.stop()
    finally:
        jobs.shutdown()
        if listener is not None:
            listener.shutdown()
            listener.server_close()
        await telemetry.stop()
        for close in reversed(deps.closers):
            await close()
        await http.aclose()
        await db.dispose()


def _serve_metrics(telemetry: Telemetry, settings: Settings) -> Any:
    """Serve the metrics on ``metrics_host:metrics_port`` (prometheus-client's own HTTP
    listener, in a thread)."""
    from prometheus_client import start_http_server

    metrics = telemetry.metrics
    assert metrics is not None
    server, _ = start_http_server(
        settings.metrics_port or 0, settings.metrics_host, registry=metrics.registry
    )
    log.info(
        "metrics of worker %s on http://%s:%d/metrics",
        settings.node_id,
        settings.metrics_host,
        server.server_address[1],
    )
    return server
