"""Providers' shared limits (:class:`ProviderLimits`): one schedule of call slots per
provider in the store (a GCRA: generic cell rate algorithm), reserved by nodes in batches,
lowered by pushback and recovered additively.

The arithmetic every implementation follows (the SQL store in one statement per grant, the
memory twin in Python), with ``now`` the engine-clock instant passed in and ``r`` the
effective rate after recovery:

* **Slots.** The provider's row holds ``next_slot_s``: the instant (seconds since the epoch)
  of the first call slot nobody reserved (its theoretical arrival time). A grant reserves
  up to ``wanted`` consecutive slots from ``start = max(next_slot_s, now - (burst - 1) / r)``,
  one every ``1 / r`` seconds, but only those at most the request's ``horizon``
  (:data:`HORIZON` by default) after ``now``, and
  moves ``next_slot_s`` past them: one ``UPDATE ... RETURNING``. Slots before ``now`` (the
  burst) are due at ``now``. The node spends slot ``i`` at its own instant, so the calls of
  all nodes together never exceed the rate, whatever the batch. Slots a node does not use
  lapse (they are not given back).
* **Pause.** No slot while ``paused_until`` is after ``now``.
* **Decrease.** A pushback halves the effective rate, at most once per its ``Retry-After``
  interval (:data:`DECREASE`), never below ``rate_per_second * floor_ratio``; it sets
  ``paused_until`` to the later of the current one and the pushback's.
* **Recovery.** From :data:`CLEAN_INTERVAL` after the last decrease, the effective rate
  grows by :data:`RECOVERY_SHARE` of the limit per second (continuously), up to the limit:
  from the floor (10 %) back to the limit in 18 s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

__all__ = [
    "CLEAN_INTERVAL",
    "DECREASE",
    "GRANT_SPAN",
    "HORIZON",
    "RECOVERY_SHARE",
    "Grant",
    "GrantRequest",
    "LimitChange",
    "ProviderLimits",
    "ProviderMinute",
    "ProviderState",
    "PushbackReport",
]

#: A node reserves at most the slots of this span of the rate at once (at least one).
GRANT_SPAN = timedelta(milliseconds=500)
#: A grant reserves no slot further than this after its ``now``.
HORIZON = timedelta(seconds=1)
#: Multiplicative decrease of the effective rate on a pushback.
DECREASE = 0.5
#: A clean interval: recovery starts this long after the last decrease.
CLEAN_INTERVAL = timedelta(seconds=5)
#: Additive recovery: this share of the limit per second once clean.
RECOVERY_SHARE = 0.05


@dataclass(frozen=True)
class ProviderState:
    """One provider's shared limit as every node sees it (a ``flow_provider`` row).

    Attributes:
        name: the provider's name (``ocr``).
        rate_per_second: the limit in force (declared, overridden by setting, or set by an
            operator), calls per second of all nodes together.
        burst: calls allowed at once above the rate.
        max_in_flight: cap on calls in flight on each node, or None.
        effective_rate: the rate granted now (calls per second, <= ``rate_per_second``):
            lowered by pushback, recovered additively (as of the last grant or pushback).
        lowered_reason: why the effective rate is lowered (the last pushback), or None.
        paused_until: no call before this instant (a pushback's ``Retry-After``), or None.
        pushbacks: pushbacks reported in all.
        updated_at: when the limit was last declared or changed (aware UTC).
        updated_by: ``declared``, ``setting``, or the operator's token name.
        floor_ratio: pushback never lowers the effective rate below
            ``rate_per_second * floor_ratio``.
    """

    name: str
    rate_per_second: float
    burst: int
    max_in_flight: int | None
    effective_rate: float
    lowered_reason: str | None
    paused_until: datetime | None
    pushbacks: int
    updated_at: datetime
    updated_by: str | None
    floor_ratio: float = 0.1


@dataclass(frozen=True)
class GrantRequest:
    """A node asks for call slots of one provider.

    Attributes:
        name: the provider.
        node_id: the asking node (logs).
        wanted: call slots wanted (0: only report the outcome counts).
        now: the engine-clock instant (aware UTC).
        ok / pushback / failed / deferred: the node's outcome counts of this provider's
            calls since its last grant, added to the minute of ``now``.
        horizon: no slot reserved further than this after ``now`` (zero: only slots
            due now, the burst).
    """

    name: str
    node_id: str
    wanted: int
    now: datetime
    ok: int = 0
    pushback: int = 0
    failed: int = 0
    deferred: int = 0
    horizon: timedelta = HORIZON


@dataclass(frozen=True)
class Grant:
    """The store's answer to a :class:`GrantRequest`.

    Attributes:
        granted: call slots reserved (0 to ``wanted``).
        next_at: the instant of the first slot not reserved (aware UTC): the slot after
            the last granted one, or the end of a pause.
        state: the provider's state after the grant.
        slots: the instants of the reserved slots (aware UTC, ascending, ``len ==
            granted``, none before ``now``): a call may go out at or after its slot.
    """

    granted: int
    next_at: datetime
    state: ProviderState
    slots: tuple[datetime, ...] = ()


@dataclass(frozen=True)
class PushbackReport:
    """A provider pushed a call back.

    Attributes:
        name: the provider.
        now: when the answer came (engine clock, aware UTC).
        until: the provider's ``Retry-After`` instant (or the default backoff's).
        reason: why, for people (``"429 from ocr.status; Retry-After 5 s"``).
    """

    name: str
    now: datetime
    until: datetime
    reason: str


@dataclass(frozen=True)
class LimitChange:
    """An operator's live change of a provider's limit (each None: kept).

    Attributes:
        name: the provider.
        by: who (the operator's token name).
        at: when (engine clock, aware UTC).
        rate_per_second / burst: the new limit.
        max_in_flight: the new cap; 0 removes it.
    """

    name: str
    by: str
    at: datetime
    rate_per_second: float | None = None
    burst: int | None = None
    max_in_flight: int | None = None


@dataclass(frozen=True)
class ProviderMinute:
    """A provider's call outcomes in one minute (as the nodes reported them).

    Attributes:
        minute: the minute's start (aware UTC).
        ok / pushback / failed / deferred: counts.
    """

    minute: datetime
    ok: int
    pushback: int
    failed: int
    deferred: int


class ProviderLimits(Protocol):
    """The providers' shared limits (one row per provider) and their per-minute tallies.

    Implemented by :class:`flowpark.store.providers.SqlProviderLimits` and the memory twin
    :class:`flowpark.store.memory_providers.MemoryProviderLimits`.
    """

    async def declare(self, providers: Sequence[ProviderState], now: datetime) -> None:
        """Insert each provider the store does not know; replace a known one's limit when
        the store's was ``declared`` (a new declaration) or the new one is a ``setting``
        over a declared or set one. An operator's change is never replaced."""
        ...

    async def grant(self, request: GrantRequest) -> Grant:
        """Reserve up to ``request.wanted`` call slots (one statement; see the module docstring)
        and add the request's outcome counts to the minute's tally.

        Raises:
            ProviderNotFound: the provider was never declared (``provider_not_found``).
        """
        ...

    async def pushback(self, report: PushbackReport) -> ProviderState:
        """Record a pushback: pause until ``report.until``, lower the effective rate.

        Raises:
            ProviderNotFound: the provider was never declared.
        """
        ...

    async def set_limit(self, change: LimitChange) -> ProviderState:
        """An operator's change of the limit (``updated_by``/``updated_at`` recorded); the
        effective rate is the new limit unless a pushback lowered it below.

        Raises:
            ProviderNotFound: the provider was never declared.
            ValueError: a rate <= 0, a burst < 1 or a negative cap.
        """
        ...

    async def states(self, now: datetime | None = None) -> list[ProviderState]:
        """Every provider's state, by name; with ``now`` (aware UTC), each effective rate as
        recovered by then (nothing is written: the row keeps the last grant's)."""
        ...

    async def tallies(self, name: str, since: datetime) -> list[ProviderMinute]:
        """The per-minute outcome counts of ``name`` from the minute holding ``since`` on,
        oldest first (minutes without calls are absent)."""
        ...
