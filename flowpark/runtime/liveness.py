"""A node's liveness row: written at start, every beat (an APScheduler job) and at stop.

The row (``flow_node``, :class:`flowpark.store.nodes.NodeRecord`) names the node, its role, the
flowpark version and the flow versions it serves, whether it sweeps, and how its last sweep
went (the sweeper's instant and claim count). A beat that cannot reach the database is
logged and skipped: the next one writes again.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version

from flowpark.engine.clock import Clock
from flowpark.engine.ports.nodes import NodeRecord
from flowpark.flows import Catalog
from flowpark.runtime.jobs import NodeJobs
from flowpark.runtime.scheduler import Sweeper
from flowpark.settings import Settings
from flowpark.store.nodes import SqlNodes

__all__ = ["NodeBeat", "beat_seconds", "flowpark_version"]

log = logging.getLogger("flowpark.liveness")


def flowpark_version() -> str:
    """The installed flowpark's version (``unknown`` when not installed as a package)."""
    try:
        return version("flowpark")
    except PackageNotFoundError:
        return "unknown"


def beat_seconds(settings: Settings) -> float:
    """How often a node writes its liveness row: its scan interval, at least 1 s."""
    return max(1.0, float(settings.timer_scan_interval))


class NodeBeat:
    """Writes this node's liveness row every :func:`beat_seconds`.

    Args:
        nodes: the store's node rows.
        clock: the engine clock (every instant written is its).
        settings: the node's settings (its id and scan interval).
        catalog: the flows it serves.
        role: ``serve`` or ``worker``.
        sweeper: the node's sweeper (None: the node does not sweep).
    """

    def __init__(
        self,
        nodes: SqlNodes,
        clock: Clock,
        settings: Settings,
        catalog: Catalog,
        role: str,
        sweeper: Sweeper | None,
        jobs: NodeJobs | None = None,
    ) -> None:
        self.nodes = nodes
        self.clock = clock
        self.settings = settings
        self.role = role
        self.sweeper = sweeper
        self.flows = tuple(sorted(f"{p.name}@{p.version}" for p in catalog.plans()))
        self.version = flowpark_version()
        self.started_at = clock.now()
        self.interval = beat_seconds(settings)
        #: the node's one scheduler (a scheduler of its own when built alone)
        self.jobs = jobs or NodeJobs()
        self._own_jobs = jobs is None

    def record(self, *, stopped: bool = False) -> NodeRecord:
        """This node's row as of now."""
        now = self.clock.now()
        sweeper = self.sweeper
        return NodeRecord(
            id=self.settings.node_id,
            role=self.role,
            version=self.version,
            flows=self.flows,
            sweeps=sweeper is not None,
            beat_seconds=self.interval,
            started_at=self.started_at,
            seen_at=now,
            stopped_at=now if stopped else None,
            last_sweep_at=sweeper.last_sweep_at if sweeper is not None else None,
            last_claimed=sweeper.last_claimed if sweeper is not None else None,
        )

    async def beat(self, *, stopped: bool = False) -> None:
        """Write the row now; a database fault is logged, not raised."""
        try:
            await self.nodes.beat(self.record(stopped=stopped))
        except Exception:  # noqa: BLE001 - the next beat writes again
            log.warning("could not write the liveness row of %s", self.settings.node_id)

    async def start(self) -> None:
        """Write the row, then every :attr:`interval` seconds (on the running loop)."""
        await self.beat()
        self.jobs.add(
            self.beat,
            "interval",
            seconds=self.interval,
            id="flowpark.liveness",
            max_instances=1,
            coalesce=True,
        )

    async def stop(self) -> None:
        """Stop beating and mark the row stopped."""
        self.jobs.remove("flowpark.liveness")
        if self._own_jobs:
            self.jobs.shutdown()
        await self.beat(stopped=True)
