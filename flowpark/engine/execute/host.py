"""What a run uses of its engine, as a protocol (:class:`RunHost`): the store, the clock, the
settings, the limits of a try, the observer. :class:`flowpark.engine.Engine` is one; a run
imports this protocol, never the engine, so nothing here imports back into the node."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from flowpark.engine.clock import Clock
from flowpark.engine.config import EngineConfig
from flowpark.engine.execute.budget import ProviderBudget
from flowpark.engine.execute.limits import CallLimits
from flowpark.engine.observe import Observer
from flowpark.engine.ports import Store

__all__ = ["RunHost"]


class RunHost(Protocol):
    """What a run uses of its engine (:class:`flowpark.engine.Engine`, or an ephemeral run's
    stand-in over an in-memory journal)."""

    @property
    def store(self) -> Store:
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
    def providers(self) -> ProviderBudget:
        """This node's budget of provider calls (tokens of the shared limits)."""

    @property
    def observer(self) -> Observer:
        """Hears starts, ends, tries and polls (metrics, traces)."""
