"""``MemoryProviderLimits``: the providers' shared limits in one process's memory, the twin
of :class:`flowpark.store.providers.SqlProviderLimits` (same arithmetic, same answers; see
:mod:`flowpark.engine.ports.providers`). Every call runs without awaiting, so each is atomic
on its event loop."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from flowpark.engine.ports.providers import (
    CLEAN_INTERVAL,
    DECREASE,
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
    "grant_slots",
    "minute_of",
    "recovered_rate",
    "recovered_state",
    "replaces",
]

#: Float slack, seconds: a slot at the horizon (give or take a float's rounding of an
#: instant in seconds since the epoch) is within it.
EPSILON = 1e-6
#: Recovery per second, as a share of the limit.
RECOVERY_PER_SECOND = RECOVERY_SHARE


def minute_of(now: datetime) -> datetime:
    """The start of the minute holding ``now`` (aware UTC)."""
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def grant_slots(
    now: datetime, granted: int, next_slot_s: float, rate: float, paused_until: datetime | None
) -> tuple[tuple[datetime, ...], datetime]:
    """The instants of ``granted`` slots that end just before ``next_slot_s`` (seconds since
    the epoch), one every ``1 / rate`` seconds, none before ``now``; and the grant's
    ``next_at`` (the first slot not granted, or the end of a pause when later)."""
    spacing = 1.0 / rate
    first = next_slot_s - granted * spacing
    slots = tuple(
        max(now, datetime.fromtimestamp(first + i * spacing, UTC)) for i in range(granted)
    )
    next_at = max(now, datetime.fromtimestamp(next_slot_s, UTC))
    if paused_until is not None and paused_until > next_at:
        next_at = paused_until
    return slots, next_at


def recovered_rate(
    state: ProviderState, refilled_s: float, lowered_s: float | None, now_s: float
) -> float:
    """The effective rate of ``state`` recovered by ``now_s`` (seconds since the epoch):
    :data:`RECOVERY_PER_SECOND` of the limit per second from :data:`CLEAN_INTERVAL` after
    the last decrease (``lowered_s``), counted from the last grant (``refilled_s``)."""
    start = max(refilled_s, (lowered_s or 0.0) + CLEAN_INTERVAL.total_seconds())
    recovered = state.rate_per_second * RECOVERY_PER_SECOND * max(0.0, now_s - start)
    return min(state.rate_per_second, state.effective_rate + recovered)


def recovered_state(
    state: ProviderState, refilled_s: float, lowered_s: float | None, now_s: float
) -> ProviderState:
    """``state`` as of ``now_s``: its effective rate recovered (:func:`recovered_rate`),
    and no reason for a lowered rate once it is back at the limit."""
    rate = recovered_rate(state, refilled_s, lowered_s, now_s)
    reason = None if rate >= state.rate_per_second else state.lowered_reason
    return replace(state, effective_rate=rate, lowered_reason=reason)


def replaces(stored_by: str | None, new_by: str | None) -> bool:
    """Whether a declaration by ``new_by`` (``declared`` or ``setting``) replaces a stored
    limit set by ``stored_by``: never an operator's; a setting replaces a declared one."""
    if stored_by not in ("declared", "setting"):
        return False
    return new_by == "setting" or stored_by == "declared"


@dataclass
class _Row:
    state: ProviderState
    next_slot_s: float
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
                self._rows[new.name] = _Row(state, 0.0, now.timestamp(), None)
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
        rate = recovered_rate(state, row.refilled_s, row.lowered_s, now_s)
        paused = state.paused_until is not None and state.paused_until > request.now
        first = max(row.next_slot_s, now_s - (state.burst - 1) / rate)
        ahead = now_s + request.horizon.total_seconds() + EPSILON - first
        room = math.floor(ahead * rate) + 1 if ahead >= 0 else 0
        granted = 0 if paused else min(request.wanted, room)
        if not paused:
            row.next_slot_s = first + granted / rate
        row.refilled_s = max(row.refilled_s, now_s)
        row.state = replace(state, effective_rate=rate)
        if rate >= state.rate_per_second:  # recovered: lowered no more, for no reason
            row.lowered_s = None
            row.state = replace(row.state, lowered_reason=None)
        self._tally(request)
        slots, next_at = grant_slots(
            request.now, granted, row.next_slot_s, rate, state.paused_until
        )
        return Grant(granted, next_at, row.state, slots)

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
        effective = min(state.effective_rate, rate) if row.lowered_s is not None else rate
        if effective >= rate:  # the new limit is at or below the lowered rate: not lowered
            row.lowered_s = None
        row.state = replace(
            state,
            rate_per_second=rate,
            burst=change.burst or state.burst,
            max_in_flight=cap or None,
            effective_rate=effective,
            lowered_reason=state.lowered_reason if row.lowered_s is not None else None,
            updated_at=change.at,
            updated_by=change.by,
        )
        return row.state

    async def states(self, now: datetime | None = None) -> list[ProviderState]:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.states`."""
        rows = [self._rows[name] for name in sorted(self._rows)]
        if now is None:
            return [row.state for row in rows]
        require_aware(now)
        now_s = now.timestamp()
        return [recovered_state(row.state, row.refilled_s, row.lowered_s, now_s) for row in rows]

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
