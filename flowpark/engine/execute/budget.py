"""A node's budget of provider calls (:class:`ProviderBudget`): tokens of each provider's
shared limit, granted by the store in batches, taken one per try.

* **Batches.** A node asks the store (:class:`~flowpark.engine.ports.ProviderLimits`) for the
  tokens of :data:`~flowpark.engine.ports.providers.GRANT_SPAN` of the effective rate at
  once (at least one), so a grant statement is paid once per batch, not per call. Tokens it
  does not use within :data:`TOKEN_LIFE` are dropped: a node that stops holds no budget.
* **Deferral.** Without a token the answer is :class:`Deferred` with the instant budget is
  expected; deferrals of one provider are handed out one token's time apart (at the
  effective rate), so deferred work comes back at the provider's pace, in the order it was
  deferred. After a grant short of a batch the store is not asked again before a whole
  batch is expected.
* **Pushback.** :meth:`ProviderBudget.pushback` pauses the provider on this node until its
  ``Retry-After`` and reports it to the store (which pauses it on every node and lowers its
  effective rate); reports of one pause are coalesced. While a provider is paused, one call
  per pause interval per node goes out as a probe.
* **In flight.** ``max_in_flight`` is enforced per node: a node keeps at most that many
  calls of the provider in flight.

The counts of calls (ok, pushback, failed) and deferrals ride on the next grant request,
into the store's per-minute tally.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from flowpark.engine.observe import Observer
from flowpark.engine.ports.providers import (
    GRANT_SPAN,
    GrantRequest,
    ProviderLimits,
    ProviderState,
    PushbackReport,
)
from flowpark.flows.providers import MAX_BURST, Provider

__all__ = ["TOKEN_LIFE", "Deferred", "Granted", "ProviderBudget", "declared_state"]

#: Tokens a node holds unused for longer than this are dropped.
TOKEN_LIFE = timedelta(milliseconds=500)
#: A pause reported to the store again only when it ends this much later than the last one.
REPORT_SLACK = timedelta(seconds=1)
#: The outcomes a call ends with.
OUTCOMES = ("ok", "pushback", "failed", "deferred")


@dataclass(frozen=True)
class Granted:
    """A token: the call may go out now. ``probe``: one call while the provider is paused."""

    probe: bool = False


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
    tokens: int = 0
    expires_at: datetime | None = None
    next_at: datetime | None = None  # the store named it: not asked again before
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
        changes: dict[str, Any] = {}
        for key, value in override.items():
            if key in ("rate_per_second", "floor_ratio"):
                changes[key] = float(value)
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
    """The provider tokens of one node (see the module docstring).

    Args:
        limits: the store's shared limits.
        node_id: this node's name (sent with grants).
        overrides: deployment overrides by provider name (``FLOWPARK_PROVIDER_LIMITS``).
        observer: told of calls and deferrals (metrics).
    """

    def __init__(
        self,
        limits: ProviderLimits,
        node_id: str,
        overrides: Mapping[str, Mapping[str, Any]] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.limits = limits
        self.node_id = node_id
        self.overrides = dict(overrides or {})
        self.observer = observer or Observer()
        self._local: dict[str, _Local] = {}

    def _of(self, provider: Provider) -> _Local:
        local = self._local.get(provider.name)
        if local is None:
            local = self._local[provider.name] = _Local(provider)
        return local

    async def acquire(self, provider: Provider, now: datetime) -> Granted | Deferred:
        """A token of ``provider`` for a call now, or the instant to come back.

        Args:
            provider: the provider the capability calls.
            now: the engine clock's instant (aware UTC).

        Returns:
            :class:`Granted` (the caller must :meth:`release` it when the call ends), or
            :class:`Deferred`.

        Raises:
            StoreUnavailable: the store could not be reached for a grant.
        """
        local = self._of(provider)
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
        if local.tokens > 0 and local.expires_at is not None and now < local.expires_at:
            local.tokens -= 1
            return Granted()
        if local.next_at is not None and now < local.next_at:
            return self._defer(local, local.next_at, "budget")
        return None

    def _defer(self, local: _Local, at: datetime, reason: str) -> Deferred:
        """A deferral to ``at`` or, when earlier deferrals of the provider took it, one
        token's time after the last of them."""
        spacing = timedelta(seconds=1.0 / max(local.rate, 1e-6))
        cursor = local.cursor
        until = at if cursor is None or cursor + spacing <= at else cursor + spacing
        local.cursor = until
        return Deferred(until, reason)

    async def _grant(self, local: _Local, now: datetime) -> None:
        provider = local.provider
        if not local.declared:
            override = self.overrides.get(provider.name)
            await self.limits.declare([declared_state(provider, now, override)], now)
            local.declared = True
        # never more than a bucket holds: a grant is at most the burst, and a huge rate must
        # not become a count no column can keep
        wanted = min(MAX_BURST, max(1, math.floor(local.rate * GRANT_SPAN.total_seconds())))
        counts, local.counts = local.counts, dict.fromkeys(OUTCOMES, 0)
        grant = await self.limits.grant(
            GrantRequest(provider.name, self.node_id, wanted, now, **counts)
        )
        state = local.state = grant.state
        local.tokens = grant.granted
        local.expires_at = now + TOKEN_LIFE
        # short of a batch: not asked again before a whole batch is expected, so a node
        # in a backlog pays one grant per batch, not one per token as the bucket refills
        batch_more = timedelta(seconds=(wanted - 1) / max(state.effective_rate, 1e-6))
        local.next_at = None if grant.granted >= wanted else grant.next_at + batch_more
        paused = state.paused_until
        if paused is not None and paused > now:
            if local.paused_until is None or local.paused_until <= now:
                # a pause another node reported: this node's probe waits one interval too
                local.pause = min(paused - now, timedelta(minutes=5))
                local.probe_at = now
            local.paused_until = max(paused, local.paused_until or paused)
        self.observer.provider_limit(provider.name, state.rate_per_second, state.effective_rate)

    async def flush(self, now: datetime) -> None:
        """Report the outcome counts not yet sent (a grant of no token per provider with
        counts): the store's per-minute tally stays current when calls stop.

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        for local in self._local.values():
            if not local.declared or not any(local.counts.values()):
                continue
            async with local.lock:
                counts, local.counts = local.counts, dict.fromkeys(OUTCOMES, 0)
                request = GrantRequest(local.provider.name, self.node_id, 0, now, **counts)
                local.state = (await self.limits.grant(request)).state

    def release(self, provider: Provider, outcome: str) -> None:
        """A granted call ended: ``ok``, ``failed`` or ``pushback`` (counted for the tally
        and the observer); ``none`` for a token not used for a call."""
        local = self._of(provider)
        local.in_flight = max(0, local.in_flight - 1)
        if outcome in OUTCOMES:
            local.counts[outcome] += 1
            self.observer.provider_call(provider.name, outcome)

    async def pushback(
        self, provider: Provider, now: datetime, until: datetime, reason: str
    ) -> None:
        """``provider`` pushed a call back: pause it on this node until ``until`` and report
        it to the store (once per pause, unless ``until`` comes later).

        Raises:
            StoreUnavailable: the store could not be reached.
        """
        local = self._of(provider)
        local.tokens = 0
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
        if not local.declared:
            override = self.overrides.get(provider.name)
            await self.limits.declare([declared_state(provider, now, override)], now)
            local.declared = True
        local.state = await self.limits.pushback(PushbackReport(provider.name, now, until, reason))
        state = local.state
        self.observer.provider_limit(provider.name, state.rate_per_second, state.effective_rate)
