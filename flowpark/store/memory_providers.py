"""``MemoryProviderLimits``: the providers' shared limits in one process's memory, the twin
of :class:`flowpark.store.providers.SqlProviderLimits` (same arithmetic, same answers; see
:mod:`flowpark.engine.ports.providers`). Every call runs without awaiting, so each is atomic
on its event loop."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from flowpark.engine.ports.providers import (
    CLEAN_INTERVAL,
    DECREASE,
    GRANT_SPAN,
    RECOVERY_SHARE,
    Grant,
    GrantRequest,
    LimitChange,
    ProviderMinute,
    ProviderState,
    PushbackReport,
)
from flowpark.errors import ProviderNotFound
from flowpark.store.memory_state import require_aware

__all__ = [
    "EPSILON",
    "MemoryProviderLimits",
    "check_change",
    "minute_of",
    "next_token_at",
    "replaces",
]

#: Float slack: a bucket refilled to 0.9999999 token at exactly one token's time has one.
EPSILON = 1e-9
#: Recovery per second, as a share of the limit.
RECOVERY_PER_SECOND = RECOVERY_SHARE / CLEAN_INTERVAL.total_seconds()


def minute_of(now: datetime) -> datetime:
    """The start of the minute holding ``now`` (aware UTC)."""
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def next_token_at(
    now: datetime, tokens: float, rate: float, paused_until: datetime | None
) -> datetime:
    """When the bucket holds its next whole token: the end of a pause, else ``now`` plus
    the time the missing fraction takes at ``rate``."""
    if paused_until is not None and paused_until > now:
        return paused_until
    missing = max(0.0, 1.0 - tokens)
    return now + timedelta(seconds=missing / rate)


def replaces(stored_by: str | None, new_by: str | None) -> bool:
    """Whether a declaration by ``new_by`` (``declared`` or ``setting``) replaces a stored
    limit set by ``stored_by``: never an operator's; a setting replaces a declared one."""
    if stored_by not in ("declared", "setting"):
        return False
    return new_by == "setting" or stored_by == "declared"


@dataclass
class _Row:
    state: ProviderState
    tokens: float
    refilled_s: float
    lowered_s: float | None


class MemoryProviderLimits:
    """:class:`flowpark.engine.ports.providers.ProviderLimits` in memory."""

    def __init__(self) -> None:
        self._rows: dict[str, _Row] = {}
        self._minutes: dict[tuple[str, datetime], list[int]] = {}

    def _row(self, name: str) -> _Row:
        row = self._rows.get(name)
        if row is None:
            raise ProviderNotFound(f"no provider {name!r} is declared", provider=name)
        return row

    async def declare(self, providers: Sequence[ProviderState], now: datetime) -> None:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.declare`."""
        require_aware(now)
        for new in providers:
            row = self._rows.get(new.name)
            if row is None:
                state = replace(new, effective_rate=new.rate_per_second, updated_at=now)
                self._rows[new.name] = _Row(state, float(new.burst), now.timestamp(), None)
            elif replaces(row.state.updated_by, new.updated_by):
                row.state = replace(
                    row.state,
                    rate_per_second=new.rate_per_second,
                    burst=new.burst,
                    max_in_flight=new.max_in_flight,
                    floor_ratio=new.floor_ratio,
                    effective_rate=min(row.state.effective_rate, new.rate_per_second)
                    if row.lowered_s is not None
                    else new.rate_per_second,
                    updated_at=now,
                    updated_by=new.updated_by,
                )

    async def grant(self, request: GrantRequest) -> Grant:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.grant`."""
        require_aware(request.now)
        row = self._row(request.name)
        state, now_s = row.state, request.now.timestamp()
        elapsed = max(0.0, now_s - row.refilled_s)
        capacity = max(float(state.burst), state.rate_per_second * GRANT_SPAN.total_seconds())
        available = min(capacity, row.tokens + elapsed * state.effective_rate)
        start = max(row.refilled_s, (row.lowered_s or 0.0) + CLEAN_INTERVAL.total_seconds())
        recovered = state.rate_per_second * RECOVERY_PER_SECOND * max(0.0, now_s - start)
        effective = min(state.rate_per_second, state.effective_rate + recovered)
        paused = state.paused_until is not None and state.paused_until > request.now
        if paused:
            granted, tokens = 0, 0.0
        else:
            whole = math.floor(available + EPSILON)
            granted = request.wanted if whole >= request.wanted else whole
            tokens = max(0.0, available - granted)
        row.tokens, row.refilled_s = tokens, max(row.refilled_s, now_s)
        row.state = replace(state, effective_rate=effective)
        self._tally(request)
        next_at = next_token_at(request.now, tokens, state.effective_rate, state.paused_until)
        return Grant(granted, next_at, row.state)

    def _tally(self, request: GrantRequest) -> None:
        counts = (request.ok, request.pushback, request.failed, request.deferred)
        if not any(counts):
            return
        key = (request.name, minute_of(request.now))
        tally = self._minutes.setdefault(key, [0, 0, 0, 0])
        for i, count in enumerate(counts):
            tally[i] += count

    async def pushback(self, report: PushbackReport) -> ProviderState:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.pushback`."""
        require_aware(report.now)
        row = self._row(report.name)
        state, now_s = row.state, report.now.timestamp()
        interval = max(0.0, (report.until - report.now).total_seconds())
        paused = state.paused_until
        effective = state.effective_rate
        if row.lowered_s is None or now_s - row.lowered_s >= interval:
            effective = max(state.rate_per_second * state.floor_ratio, effective * DECREASE)
            row.lowered_s = now_s
        row.state = replace(
            state,
            paused_until=report.until if paused is None else max(paused, report.until),
            effective_rate=effective,
            pushbacks=state.pushbacks + 1,
            lowered_reason=report.reason,
        )
        return row.state

    async def set_limit(self, change: LimitChange) -> ProviderState:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.set_limit`."""
        require_aware(change.at)
        check_change(change)
        row = self._row(change.name)
        state = row.state
        rate = change.rate_per_second or state.rate_per_second
        cap = state.max_in_flight if change.max_in_flight is None else change.max_in_flight
        row.state = replace(
            state,
            rate_per_second=rate,
            burst=change.burst or state.burst,
            max_in_flight=cap or None,
            effective_rate=min(state.effective_rate, rate) if row.lowered_s is not None else rate,
            updated_at=change.at,
            updated_by=change.by,
        )
        return row.state

    async def states(self) -> list[ProviderState]:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.states`."""
        return [self._rows[name].state for name in sorted(self._rows)]

    async def tallies(self, name: str, since: datetime) -> list[ProviderMinute]:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.tallies`."""
        start = minute_of(since)
        return [
            ProviderMinute(minute, *counts)
            for (provider, minute), counts in sorted(self._minutes.items())
            if provider == name and minute >= start
        ]


def check_change(change: LimitChange) -> None:
    """Refuse a limit out of range.

    Raises:
        ValueError: a rate <= 0, a burst < 1 or a negative cap.
    """
    rate = change.rate_per_second
    if rate is not None and not (rate > 0 and math.isfinite(rate)):
        raise ValueError("rate_per_second must be positive")
    if change.burst is not None and change.burst < 1:
        raise ValueError("burst must be at least 1")
    if change.max_in_flight is not None and change.max_in_flight < 0:
        raise ValueError("max_in_flight must not be negative")
