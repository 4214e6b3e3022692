"""A node's budget of provider calls (:class:`ProviderBudget`): call slots of each provider's
shared limit, reserved from the store in batches, spent one per try at its own instant.

* **Batches of slots.** A node reserves from the store
  (:class:`~flowpark.engine.ports.ProviderLimits`) up to
  :data:`~flowpark.engine.ports.providers.GRANT_SPAN` of the effective rate's call slots at
  once (as many as its tries asked for lately, at least one), in one statement. Each slot
  has its instant; the slots of all nodes together follow the rate, so a batch can be large
  without a burst. A try takes the node's next slot: at once when its instant has come,
  after waiting on the engine clock when it is at most ``wait`` away (1 s), else it is
  deferred to that instant. A slot not used within :data:`SLOT_LAPSE` of its instant lapses:
  a node that stops holds nothing.
* **Deferral.** Without a slot within the horizon the answer is :class:`Deferred` with the
  instant the next slot is expected; deferrals of one provider are handed out one slot's
  time apart (at the effective rate), so deferred work comes back at the provider's pace,
  in the order it was deferred. The store is not asked again before its next free slot
  comes within the horizon.
* **Pushback.** :meth:`ProviderBudget.pushback` pauses the provider on this node until its
  ``Retry-After`` and reports it to the store (which pauses it on every node and lowers its
  effective rate); reports of one pause are coalesced. While a provider is paused, one call
  per pause interval per node goes out as a probe.
* **In flight.** ``max_in_flight`` is enforced per node: a node keeps at most that many
  calls of the provider in flight.

The counts of calls (ok, pushback, failed) and deferrals ride on the next grant request,
into the store's per-minute tally; :meth:`ProviderBudget.flush` (after each sweep) sends
them when no grant did for :data:`FLUSH_EVERY`.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from flowpark.engine.observe import Observer
from flowpark.engine.ports.providers import (
    GRANT_SPAN,
    HORIZON,
    GrantRequest,
    ProviderLimits,
    ProviderState,
    PushbackReport,
)
from flowpark.flows.providers import MAX_BURST, MIN_RATE, Provider

__all__ = [
    "FLUSH_EVERY",
    "REFRESH",
    "SLOT_LAPSE",
    "WAIT",
    "Deferred",
    "Granted",
    "ProviderBudget",
    "declared_state",
]

#: A slot not used this long after its instant lapses.
SLOT_LAPSE = timedelta(milliseconds=50)
#: A try waits in process (on the engine clock) for a slot at most this far ahead.
WAIT = timedelta(seconds=1)
#: Outcome counts wait at most this long for a grant to carry them (then a flush sends them).
FLUSH_EVERY = timedelta(seconds=5)
#: A node trusts what the store last told it of a provider (its next free slot) at most
#: this long: a try after that asks again, so a limit changed meanwhile (by an operator,
#: on any node) reaches this node's next try within this.
REFRESH = timedelta(seconds=1)
#: A pause reported to the store again only when it ends this much later than the last one.
REPORT_SLACK = timedelta(seconds=1)
#: The outcomes a call ends with.
OUTCOMES = ("ok", "pushback", "failed", "deferred")


@dataclass(frozen=True)
class Granted:
    """A call slot: the call may go out at ``at`` (None: now; else the caller waits until
    that instant on the engine clock). ``probe``: one call while the provider is paused."""

    probe: bool = False
    at: datetime | None = None


@dataclass(frozen=True)
class Deferred:
    """No token now: park until ``until`` (aware UTC). ``reason``: ``budget`` (the limit) or
    ``pushback`` (the provider is paused after a pushback)."""

    until: datetime
    reason: str


@dataclass
class _Local:
    """This node's view of one provider."""

    provider: Provider
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    declared: bool = False
    state: ProviderState | None = None
    slots: deque[datetime] = field(default_factory=deque)  # reserved, not yet taken
    next_at: datetime | None = None  # the store's next free slot (after a short grant)
    ask_at: datetime | None = None  # the store is not asked again before
    window_at: datetime | None = None  # demand: tries asking in this and the last span
    asked: int = 0
    asked_before: int = 0
    reported_at: datetime | None = None  # the last grant (with the counts)
    cursor: datetime | None = None  # the last deferral instant handed out
    in_flight: int = 0
    paused_until: datetime | None = None
    pause: timedelta = timedelta(0)  # the pause interval (one probe per interval)
    probe_at: datetime | None = None
    reported_until: datetime | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))

    @property
    def rate(self) -> float:
        state = self.state
        return state.effective_rate if state is not None else self.provider.rate_per_second

    @property
    def cap(self) -> int | None:
        state = self.state
        return state.max_in_flight if state is not None else self.provider.max_in_flight


def declared_state(
    provider: Provider, now: datetime, override: Mapping[str, Any] | None = None
) -> ProviderState:
    """The state a node declares for ``provider``: its declared limit (``updated_by``
    ``declared``), or the deployment's override of it (``setting``).

    Args:
        provider: the declaration.
        now: the engine clock's instant (aware UTC).
        override: ``{"rate_per_second"?, "burst"?, "max_in_flight"?, "floor_ratio"?}`` from
            ``FLOWPARK_PROVIDER_LIMITS``, or None.

    Raises:
        ValueError: an override out of range (as :class:`Provider` refuses it).
    """
    by = "declared"
    if override:
        # the rate in force stays (a window declaration's, computed); the window is the
        # declaration's, not the setting's
        changes: dict[str, Any] = {"limit": None, "per": None}
        for key, value in override.items():
            if key in ("rate_per_second", "floor_ratio"):
                changes[key] = float(value) if value is not None else None
            elif key in ("burst", "max_in_flight"):
                changes[key] = None if value is None else int(value)
        provider = replace(provider, **changes)
        by = "setting"
    return ProviderState(
        provider.name,
        provider.rate_per_second,
        provider.burst,
        provider.max_in_flight,
        provider.rate_per_second,
        None,
        None,
        0,
        now,
        by,
        provider.floor_ratio,
    )


class ProviderBudget:
    """The provider call slots of one node (see the module docstring).

    Args:
        limits: the store's shared limits.
        node_id: this node's name (sent with grants).
        overrides: deployment overrides by provider name (``FLOWPARK_PROVIDER_LIMITS``).
        observer: told of calls and deferrals (metrics): an observer, or a function
            answering the one in force (the engine's, so replacing the engine's observer
            reaches the budget).
        wait: a try waits in process for a slot at most this far ahead (default
            :data:`WAIT`); a slot further on defers it. Zero: every slot not yet due defers.
    """

    def __init__(
        self,
        limits: ProviderLimits,
        node_id: str,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        observer: Observer | Callable[[], Observer] | None = None,
        wait: timedelta = WAIT,
    ) -> None:
        self.limits = limits
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.wait = wait
        self._observer: Callable[[], Observer]
        self.observer = observer or Observer()
        self._local: dict[str, _Local] = {}

    @property
    def observer(self) -> Observer:
        """The observer told of calls, deferrals and limits."""
        return self._observer()

    @observer.setter
    def observer(self, value: Observer | Callable[[], Observer]) -> None:
        if isinstance(value, Observer):
            self._observer = lambda: value
        else:
            self._observer = value

    def _of(self, provider: Provider) -> _Local:
        local = self._local.get(provider.name)
        if local is None:
            local = self._local[provider.name] = _Local(provider)
        return local

    async def acquire(self, provider: Provider, now: datetime) -> Granted | Deferred:
        """A call slot of ``provider`` for a call now or soon, or the instant to come back.

        Args:
            provider: the provider the capability calls.
            now: the engine clock's instant (aware UTC).

        Returns:
            :class:`Granted` (the caller waits until its ``at`` when set, and must
            :meth:`release` it when the call ends), or :class:`Deferred`.

        Raises:
            StoreUnavailable: the store could not be reached for a grant.
        """
        local = self._of(provider)
        self._count_demand(local, now)
        verdict = self._local_verdict(local, now)
        if verdict is None:
            async with local.lock:
                verdict = self._local_verdict(local, now)
                if verdict is None:
                    await self._grant(local, now)
                    verdict = self._local_verdict(local, now) or self._defer(
                        local, local.next_at or now, "budget"
                    )
        if isinstance(verdict, Granted):
            local.in_flight += 1
        else:
            local.counts["deferred"] += 1
            self.observer.provider_deferred(provider.name, verdict.reason)
        return verdict

    @staticmethod
    def _count_demand(local: _Local, now: datetime) -> None:
        """Count a try asking, in spans of :data:`GRANT_SPAN` (this one and the last)."""
        start = local.window_at
        if start is None or now >= start + GRANT_SPAN or now < start:
            recent = start is not None and start <= now < start + 2 * GRANT_SPAN
            local.asked_before = local.asked if recent else 0
            local.asked, local.window_at = 0, now
        local.asked += 1

    def _local_verdict(self, local: _Local, now: datetime) -> Granted | Deferred | None:
        """What this node can answer without the store; None: ask it."""
        cap = local.cap
        if cap is not None and local.in_flight >= cap:
            return self._defer(local, now, "budget")
        paused = local.paused_until
        if paused is not None and now < paused:
            probe = local.probe_at
            if probe is None or now - probe >= max(local.pause, timedelta(seconds=1)):
                local.probe_at = now
                return Granted(probe=True)
            return self._defer(local, paused, "pushback")
        slots = local.slots
        while slots and slots[0] + SLOT_LAPSE < now:
            slots.popleft()  # lapsed
        if slots:
            if slots[0] <= now:
                slots.popleft()
                return Granted()
            if slots[0] - now <= self.wait:
                return Granted(at=slots.popleft())
            return self._defer(local, slots[0], "budget")
        fresh = local.reported_at is not None and local.reported_at <= now < (
            local.reported_at + REFRESH
        )
        if local.ask_at is not None and now < local.ask_at and fresh:
            at = local.next_at or local.ask_at
            if at - now <= HORIZON + REFRESH:
                return self._defer(local, at, "budget")
            # the store's next slot is far: what it says now decides (a limit changed since
            # the last grant takes effect for this try)
        return None

    def _defer(self, local: _Local, at: datetime, reason: str) -> Deferred:
        """A deferral to ``at`` or, when earlier deferrals of the provider took it, one
        slot's time after the last of them."""
        spacing = timedelta(seconds=1.0 / max(local.rate, MIN_RATE))
        cursor = local.cursor
        until = at if cursor is None or cursor + spacing <= at else cursor + spacing
        local.cursor = until
        return Deferred(until, reason)

    async def _declare(self, local: _Local, now: datetime) -> None:
        if not local.declared:
            override = self.overrides.get(local.provider.name)
            await self.limits.declare([declared_state(local.provider, now, override)], now)
            local.declared = True

    def _request(
        self,
        local: _Local,
        wanted: int,
        now: datetime,
        counts: Mapping[str, int],
        horizon: timedelta = HORIZON,
    ) -> GrantRequest:
        return GrantRequest(
            local.provider.name,
            self.node_id,
            wanted,
            now,
            ok=counts["ok"],
            pushback=counts["pushback"],
            failed=counts["failed"],
            deferred=counts["deferred"],
            horizon=horizon,
        )

    async def _grant(self, local: _Local, now: datetime) -> None:
        provider = local.provider
        await self._declare(local, now)
        # never more than a bucket holds, and a huge rate must not become a count no
        # column can keep
        batch = min(MAX_BURST, max(1, math.floor(local.rate * GRANT_SPAN.total_seconds())))
        wanted = min(batch, max(1, local.asked + local.asked_before))
        counts, local.counts = local.counts, dict.fromkeys(OUTCOMES, 0)
        reach = min(self.wait, HORIZON)  # only slots this node will wait for
        request = self._request(local, wanted, now, counts, reach)
        grant = await self.limits.grant(request)
        local.reported_at = now
        known = local.state
        state = local.state = grant.state
        if known is not None and (known.updated_at, known.updated_by) != (
            state.updated_at,
            state.updated_by,
        ):
            # a new limit takes effect from now: deferrals handed out under the old one
            # set no pace for the next
            local.cursor = None
        local.slots.extend(grant.slots)
        if grant.granted >= wanted:
            local.next_at = local.ask_at = None
        else:
            # short of the batch (other nodes reserved up to the horizon): asked again when
            # the batch's slots have come within it, not once per slot as they do
            local.next_at = grant.next_at
            batch_time = timedelta(seconds=wanted / max(state.effective_rate, 1e-6))
            local.ask_at = grant.next_at - reach + min(batch_time, reach)
        paused = state.paused_until
        if paused is not None and paused > now:
            if local.paused_until is None or local.paused_until <= now:
                # a pause another node reported: this node's probe waits one interval too
                local.pause = min(paused - now, timedelta(minutes=5))
                local.probe_at = now
            local.paused_until = max(paused, local.paused_until or paused)
        self.observer.provider_limit(provider.name, state.rate_per_second, state.effective_rate)

    async def flush(self, now: datetime) -> None:
        """Report the outcome counts not yet sent (a grant of no slot per provider with
        counts) when no grant carried counts for :data:`FLUSH_EVERY`: the store's
        per-minute tally stays current within that (and a sweep) when calls stop.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        for local in self._local.values():
            if not local.declared or not any(local.counts.values()):
                continue
            sent = local.reported_at
            if sent is not None and sent <= now < sent + FLUSH_EVERY:
                continue  # sent lately: the next grant or flush carries them
            async with local.lock:
                counts, local.counts = local.counts, dict.fromkeys(OUTCOMES, 0)
                request = self._request(local, 0, now, counts)
                local.state = (await self.limits.grant(request)).state
                local.reported_at = now

    def limit_changed(self, name: str) -> None:
        """The limit of provider ``name`` was changed (on this node): forget what the store
        last said of its schedule, so this node's next try asks it again. (Other nodes
        ask again within :data:`REFRESH`.)"""
        local = self._local.get(name)
        if local is not None:
            local.slots.clear()
            local.next_at = local.ask_at = local.cursor = None
            local.reported_at = None

    def release(self, provider: Provider, outcome: str) -> None:
        """A granted call ended: ``ok``, ``failed`` or ``pushback`` (counted for the tally
        and the observer); ``none`` for a slot not used for a call."""
        local = self._of(provider)
        local.in_flight = max(0, local.in_flight - 1)
        if outcome in OUTCOMES:
            local.counts[outcome] += 1
            self.observer.provider_call(provider.name, outcome)

    async def pushback(
        self, provider: Provider, now: datetime, until: datetime, reason: str
    ) -> None:
        """``provider`` pushed a call back: pause it on this node until ``until`` (its
        reserved slots lapse) and report it to the store (once per pause, unless ``until``
        comes later).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        local = self._of(provider)
        local.slots.clear()
        if local.paused_until is None or local.paused_until <= now:
            # a new pause: one probe per this interval while later pushbacks extend it
            local.pause = max(until - now, timedelta(seconds=1))
            local.probe_at = now
        if local.paused_until is None or local.paused_until < until:
            local.paused_until = until
        reported = local.reported_until
        if reported is not None and until <= reported + REPORT_SLACK:
            return
        local.reported_until = until
        await self._declare(local, now)
        local.state = await self.limits.pushback(PushbackReport(provider.name, now, until, reason))
        state = local.state
        self.observer.provider_limit(provider.name, state.rate_per_second, state.effective_rate)
