"""A node's telemetry: its metrics, its tracing, the engine observer over both and the
periodic refresh of the gauges.

The ``/metrics`` route of ``flowpark serve`` is :mod:`flowpark.runtime.metrics_route`; this
module imports no web framework, so ``flowpark worker`` (which serves no HTTP API) does not
load FastAPI to count its metrics. ``--metrics-port`` (``FLOWPARK_METRICS_PORT``) gives the
worker a metrics listener of its own on ``FLOWPARK_METRICS_HOST`` (default loopback).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.engine.clock import Clock
from flowpark.outages import OUTAGES, READY_TIMEOUT_SECONDS, store_outage
from flowpark.runtime import tracing
from flowpark.runtime.jobs import NodeJobs
from flowpark.runtime.metrics import Metrics, mark_process_dead
from flowpark.runtime.observe import NodeObserver
from flowpark.settings import Settings
from flowpark.store.gauges import (
    active_counts,
    pending_deliveries,
    provider_rates,
    waiting_reviews,
)
from flowpark.store.nodes import SqlNodes

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["Telemetry"]

log = logging.getLogger("flowpark.telemetry")


class Telemetry:
    """Metrics (unless ``settings.metrics_enabled`` is False) and tracing (when the
    ``OTEL_*`` environment or ``tracer_provider`` asks for it) of one node.

    Args:
        settings: the node's settings.
        tracer_provider: an OpenTelemetry ``TracerProvider`` to use instead of the one the
            environment configures (tests pass one with an in-memory exporter).
    """

    def __init__(self, settings: Settings, tracer_provider: Any = None) -> None:
        self.settings = settings
        self.metrics = Metrics(settings.node_id) if settings.metrics_enabled else None
        provider = tracer_provider or tracing.provider_from_env(settings.node_id)
        self.tracing = tracing.Tracing(provider, settings.node_id) if provider else None
        self.observer = NodeObserver(self.metrics, self.tracing)
        self._jobs: NodeJobs | None = None
        self._own_jobs = False
        self._refreshing: asyncio.Future[None] | None = None
        self._first: asyncio.Future[None] | None = None
        self._unconfigured_seen = False  # pending deliveries of a subscriber now unknown
        self._providers_seen: set[str] = set()  # their counters start at zero once

    def instrument_client(self, client: Any) -> None:
        """Trace ``client``'s outbound calls (when traced)."""
        if self.tracing is not None:
            self.tracing.instrument_client(client)

    def instrument_app(self, app: FastAPI) -> None:
        """Trace the requests ``app`` serves (when traced)."""
        if self.tracing is not None:
            self.tracing.instrument_app(app)

    def start(self, db: AsyncEngine, clock: Clock, jobs: NodeJobs | None = None) -> None:
        """Refresh the gauges now and every ``metrics_refresh_seconds``, a job of ``jobs``
        (the node's one scheduler; default: one of its own)."""
        if self.metrics is None:
            return
        self._own_jobs = jobs is None
        self._jobs = jobs or NodeJobs()
        self._jobs.add(
            self.refresh,
            "interval",
            args=[db, clock],
            seconds=self.settings.metrics_refresh_seconds,
            id="flowpark.metrics",
            max_instances=1,
            coalesce=True,
        )
        # kept, so that stop() waits for it: a stop right after the start would otherwise
        # leave it to run after the database is disposed, on a connection nobody closes
        self._first = asyncio.ensure_future(self.refresh(db, clock))

    async def stop(self) -> None:
        """Stop the refresh job (a refresh in flight or about to start ends first, or is
        cancelled after ``READY_TIMEOUT_SECONDS``: the database is disposed next); in
        multiprocess mode drop this process's live gauges."""
        if self._jobs is not None:
            self._jobs.remove("flowpark.metrics")
            if self._own_jobs:
                self._jobs.shutdown()
        if pending := self._pending():
            await asyncio.wait(pending, timeout=READY_TIMEOUT_SECONDS)
            if late := self._pending():
                for f in late:
                    f.cancel()
                await asyncio.wait(late)
        self._first = None
        mark_process_dead()
        if self.tracing is not None:
            self.tracing.provider.force_flush()

    def _pending(self) -> set[asyncio.Future[None]]:
        return {f for f in (self._first, self._refreshing) if f is not None and not f.done()}

    async def refresh(self, db: AsyncEngine, clock: Clock) -> None:
        """Set the database pool gauge, the instance gauges (one grouped query), the
        providers' limit and effective rate gauges (one read of their rows) and, when
        subscribers are configured, the pending deliveries gauge (one more).

        An instance is overdue when parked and due for more than two scan intervals, stuck
        when running with a lease expired for more than one. Pending deliveries of a
        subscriber no longer configured are shown under the subscriber ``""``."""
        if self.metrics is None or self._refreshing is not None:
            return
        self._refreshing = asyncio.ensure_future(self._refresh(self.metrics, db, clock))
        try:
            await asyncio.shield(self._refreshing)
        finally:
            self._refreshing = None

    async def _refresh(self, metrics: Metrics, db: AsyncEngine, clock: Clock) -> None:
        try:
            pool: Any = db.sync_engine.pool
            checked_out = getattr(pool, "checkedout", None)
            if checked_out is not None:
                metrics.pool.set(checked_out())
            now = clock.now()
            scan = timedelta(seconds=self.settings.timer_scan_interval)
            counts = await active_counts(db, now, now - 2 * scan, now - scan)
            nodes = await SqlNodes(db).list_nodes()
            metrics.nodes_sweeping.set(sum(1 for n in nodes if n.sweeping(now)))
            seen = set()
            for c in counts:
                seen.add(c.flow)
                metrics.parked.labels(c.flow).set(c.parked)
                metrics.running.labels(c.flow).set(c.running)
                metrics.overdue.labels(c.flow).set(c.overdue)
                metrics.stuck.labels(c.flow).set(c.stuck)
            for flow in metrics.flows_seen - seen:  # none left: zero, not the last figure
                for gauge in (metrics.parked, metrics.running, metrics.overdue, metrics.stuck):
                    gauge.labels(flow).set(0)
            metrics.flows_seen |= seen
            for name, limit, effective in await provider_rates(db):
                metrics.provider_limit.labels(name).set(limit)
                metrics.provider_effective_rate.labels(name).set(effective)
                if name not in self._providers_seen:
                    self.observer.providers_declared([name])
                    self._providers_seen.add(name)
            reviews, oldest = await waiting_reviews(db)
            for state, n in reviews.items():
                metrics.reviews_waiting.labels(state).set(n)
            age = (now - oldest).total_seconds() if oldest is not None else 0.0
            metrics.review_oldest_age.set(max(0.0, age))
            if self.settings.subscribers:
                configured = {s.name for s in self.settings.subscribers}
                pending = dict.fromkeys(configured, 0)
                if self._unconfigured_seen:  # none left: zero, not the last figure
                    pending[""] = 0
                for name, n in (await pending_deliveries(db)).items():
                    key = name if name in configured else ""
                    pending[key] = pending.get(key, 0) + n
                self._unconfigured_seen = "" in pending
                for name, n in pending.items():
                    metrics.deliveries_pending.labels(name).set(n)
        except Exception as exc:  # noqa: BLE001 - a scrape shows stale gauges; the log says why
            if store_outage(exc):
                OUTAGES.unavailable("gauges", exc)
            else:
                log.warning("could not refresh the database gauges", exc_info=True)
        else:
            OUTAGES.recovered("gauges")
