"""What the HTTP API reads of instances (:class:`ReadModel`), and the store a node runs on
(:class:`Store`: every port, composed).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from flowpark.engine.ports.correlations import Correlations
from flowpark.engine.ports.mailbox import Mailbox, Streams
from flowpark.engine.ports.operator import OperatorReads, OverviewReads
from flowpark.engine.ports.providers import ProviderLimits
from flowpark.engine.ports.reviews import Reviews
from flowpark.engine.ports.run import Intake, RunStore
from flowpark.engine.records import InstanceRecord, InstanceState, SignalRecord, Snapshot

__all__ = ["Store", "ReadModel"]


class ReadModel(Protocol):
    """Reads of instances, their journals and signals, the review queue and the outbox.
    Never part of a run's decisions."""

    async def get_instance(self, instance_id: str) -> InstanceRecord:
        """The instance row only.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        ...

    async def load(self, instance_id: str) -> Snapshot:
        """The instance, its journal (commit order) and its untaken signals.

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        ...

    async def list_signals(self, instance_id: str) -> list[SignalRecord]:
        """Every signal delivered to the instance, taken or not, in arrival order (empty
        for an unknown instance)."""
        ...

    async def list_reviews(self, limit: int = 100) -> list[dict[str, Any]]:
        """The review queue, oldest first: at most ``limit`` dicts with ``sequence, id,
        instance_id, subject, reason, details, created_at`` (aware UTC)."""
        ...

    async def list_events(
        self, limit: int = 100, after_sequence: int | None = None
    ) -> list[dict[str, Any]]:
        """Outbox events in write order after ``after_sequence``: at most ``limit`` dicts
        with ``sequence, id, instance_id, name, payload, created_at, published_at``."""
        ...

    async def count_instances(self, state: InstanceState | str | None = None) -> int:
        """Number of instances, optionally only those in ``state``."""
        ...

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        """The earliest ``wake_at`` among suspended instances (aware UTC), or None; with
        ``after``, the earliest later than it (the sweep's next in-process wake)."""
        ...

    async def ping(self) -> None:
        """Check that the store answers.

        Raises:
            StoreUnavailable: it does not (code ``store_unavailable``).
        """
        ...


class Store(Protocol):
    """The store a node runs on: each port a consumer is handed, composed (not
    inherited). Implemented by :class:`flowpark.store.SqlStore` and
    :class:`flowpark.store.memory.MemoryStore`.

    Attributes:
        runs: what a run needs (claim, load, commit, heartbeats, ending, lease).
        intake: starts, the sweep's claims, cancel requests.
        mailbox: signals.
        streams: progress messages.
        reads: the HTTP API's reads.
        operator: the operator's list, counts and actions.
        overview: the console overview's counts.
        correlations: which live instance holds a provider's id.
        providers: the providers' shared limits.
        reviews: the review queue.
    """

    @property
    def runs(self) -> RunStore:
        """What a run needs."""

    @property
    def intake(self) -> Intake:
        """Starts, sweeps, cancel requests."""

    @property
    def mailbox(self) -> Mailbox:
        """The signal mailbox."""

    @property
    def streams(self) -> Streams:
        """Progress messages."""

    @property
    def reads(self) -> ReadModel:
        """The HTTP API's reads."""

    @property
    def operator(self) -> OperatorReads:
        """The operator's queries and actions."""

    @property
    def overview(self) -> OverviewReads:
        """The console overview's counts."""

    @property
    def correlations(self) -> Correlations:
        """Which live instance holds a provider's id."""

    @property
    def providers(self) -> ProviderLimits:
        """The providers' shared limits and call tallies."""

    @property
    def reviews(self) -> Reviews:
        """The review queue."""

    def scratch(self) -> Store:
        """A new, empty store in memory with the same ports: where a run that writes no
        rows (an ephemeral flow) keeps its instance for the length of one call."""
        ...
