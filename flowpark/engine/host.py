"""What the engine's parts use of the engine, as protocols: :class:`RunHost` (what a run
uses: the store, the clock, the settings, the limits of a try, the observer) and
:class:`NodeEngine` (what the sweep, the requests from outside a run and the operator's
actions use of a node's engine). :class:`flowpark.engine.Engine` is both; the parts import
these protocols, never the engine, so no module of the engine imports back into it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

from flowpark.engine.clock import Clock
from flowpark.engine.config import EngineConfig
from flowpark.engine.limits import CallLimits
from flowpark.engine.observe import Observer
from flowpark.engine.ports import Journal
from flowpark.engine.runs import RunTasks
from flowpark.flows.catalog import Catalog

__all__ = ["NodeEngine", "RunHost"]


class RunHost(Protocol):
    """What a run uses of its engine (:class:`flowpark.engine.Engine`, or an ephemeral run's
    stand-in over an in-memory journal)."""

    @property
    def journal(self) -> Journal:
        """Where the run's rows go."""

    @property
    def clock(self) -> Clock:
        """The engine clock (aware UTC instants)."""

    @property
    def config(self) -> EngineConfig:
        """The node's settings (``node_id`` owns a park's lease)."""

    @property
    def lease(self) -> timedelta:
        """How long a claim or a write's lease lasts."""

    @property
    def new_id(self) -> Callable[[], str]:
        """Makes a fresh id (signals, events, review items)."""

    @property
    def limits(self) -> CallLimits:
        """Runs one capability call under its timeouts, lease keeper and heartbeat watch."""

    @property
    def observer(self) -> Observer:
        """Hears starts, ends, tries and polls (metrics, traces)."""


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
