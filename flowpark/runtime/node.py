"""The engine a node runs (``flowpark serve`` and ``flowpark worker`` alike)."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from flowpark.engine.clock import Clock
from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.flows import Catalog
from flowpark.runtime.observe import NodeObserver
from flowpark.settings import Settings
from flowpark.store import SqlStore

__all__ = ["node_engine"]

log = logging.getLogger("flowpark.node")


def node_engine(
    settings: Settings, db: AsyncEngine, catalog: Catalog, clock: Clock, observer: NodeObserver
) -> Engine:
    """The engine a node (``serve`` or ``worker``) runs: on the SQL journal over ``db``,
    configured from ``settings`` (node id, lease, sweep batch, concurrency, start wait,
    provider limit overrides). An override naming a provider no flow of the node declares
    is logged as a warning (it applies to nothing here; another node's flows may declare
    it)."""
    declared = {p.name for p in catalog.providers()}
    for name in sorted(set(settings.provider_limits) - declared):
        log.warning(
            "FLOWPARK_PROVIDER_LIMITS names provider %r, which no flow of this node declares "
            "(declared: %s): its override applies to nothing here",
            name,
            ", ".join(sorted(declared)) or "none",
        )
    return Engine(
        SqlStore(db, on_batch=observer.batched),
        catalog,
        clock,
        EngineConfig(
            node_id=settings.node_id,
            lease=timedelta(seconds=settings.lease_seconds),
            sweep_batch=settings.sweep_batch,
            concurrency=settings.concurrency,
            start_wait=timedelta(seconds=settings.start_wait_seconds),
            provider_limits=settings.provider_limits,
        ),
        observer=observer,
    )
