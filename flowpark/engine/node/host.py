"""What the sweep, the requests from outside a run and the operator's actions use of a
node's engine, as a protocol (:class:`NodeEngine`); :class:`flowpark.engine.Engine` is one.
The parts import this protocol, never the engine, so no module imports back into it."""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from flowpark.engine.execute.host import RunHost
from flowpark.engine.node.runs import RunTasks
from flowpark.flows.catalog import Catalog

__all__ = ["NodeEngine"]


class NodeEngine(RunHost, Protocol):
    """What the sweep, starts, wakes, signals, cancels and operator actions use of a node's
    engine, beyond a run's needs."""

    @property
    def catalog(self) -> Catalog:
        """The registered plans."""

    @property
    def runs(self) -> RunTasks:
        """The runs in flight (run slots, background runs)."""

    @property
    def claiming(self) -> bool:
        """False once the node stopped claiming (shutdown)."""

    #: When this node's sweep last counted the due instances it cannot run (engine
    #: clock); None before its first sweep.
    not_runnable_counted_at: datetime | None
