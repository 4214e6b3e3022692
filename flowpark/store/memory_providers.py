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
from flowpark.flows.providers import MIN_RATE, check_limit
from flowpark.store.memory_state import require_aware

__all__ = [
    "EPSILON",
    "LAST_INSTANT_S",
    "MemoryProviderLimits",
    "SLOT_EPSILON",
    "check_change",
    "grant_slots",
    "minute_of",
    "placement",
    "pushback_floor",
    "recovered_rate",
    "recovered_state",
    "replaces",
]

#: Float slack, seconds: a slot at the horizon (give or take a float's rounding of an
#: instant in seconds since the epoch) is within it.
EPSILON = 1e-6
#: Float slack, slots: a quiet time a float's rounding of an instant leaves a hair short of
#: a whole number of slots counts as that number.
SLOT_EPSILON = 1e-3
#: The latest instant a slot may name (seconds since the epoch): the year 9000.
LAST_INSTANT_S = datetime(9000, 1, 1, tzinfo=UTC).timestamp()
#: Recovery per second, as a share of the limit.
RECOVERY_PER_SECOND = RECOVERY_SHARE


def minute_of(now: datetime) -> datetime:
    """The start of the minute holding ``now`` (aware UTC)."""
    return now.astimezone(UTC).replace(second=0, microsecond=0)


def placement(next_slot_s: float, now_s: float, rate: float, burst: int) -> tuple[float, int]:
    """Where a grant at ``now_s`` places its slots: the first slot's instant (seconds since
    the epoch: the provider's next free slot, or now when that has passed) and the burst
    credit (how many slots may be due at once now: one per slot's time of quiet before now,
    counting the one due now, at most ``burst``; 0 while the next free slot is ahead)."""
    first = max(next_slot_s, now_s - (burst - 1) / rate)
    credit = math.floor((now_s - first) * rate + SLOT_EPSILON) + 1 if first <= now_s else 0
    return max(next_slot_s, now_s), credit


def grant_slots(
    now: datetime,
    granted: int,
    base_s: float,
    credit: int,
    rate: float,
    paused_until: datetime | None,
) -> tuple[tuple[datetime, ...], datetime]:
    """The instants of ``granted`` slots placed from ``base_s`` (see :func:`placement`),
    and the grant's ``next_at`` (the first slot not granted, or the end of a pause when
    later).

    Slot ``i`` is at ``base_s + i / rate``, except the first ``credit`` ones (the burst),
    which are due at ``now``: the slots after a burst keep their places, so a burst of
    ``k`` calls is followed by ``k`` slots' time without one, and no window of ``W``
    seconds holds more than ``rate * W`` calls (``W >= burst / rate``)."""
    spacing = 1.0 / rate
    early = min(granted, credit)
    slots = tuple(
        now if i < early else max(now, _instant(base_s + i * spacing)) for i in range(granted)
    )
    next_at = max(now, _instant(base_s + granted * spacing))
    if paused_until is not None and paused_until > next_at:
        next_at = paused_until
    return slots, next_at


def _instant(seconds: float) -> datetime:
    """An instant from seconds since the epoch, held within the range of an instant (a row
    a release before the rate's floor left far ahead reads as the last instant)."""
    return datetime.fromtimestamp(min(seconds, LAST_INSTANT_S), UTC)


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
                row.next_slot_s = min(row.next_slot_s, now.timestamp())
                row.state = replace(
                    row.state,
                    rate_per_second=new.rate_per_second,
                    burst=new.burst,
                    max_in_flight=new.max_in_flight,
                    floor_ratio=new.floor_ratio,
                    effective_rate=max(
                        min(row.state.effective_rate, new.rate_per_second),
                        max(new.rate_per_second * new.floor_ratio, MIN_RATE),
                    )
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
        # never below the floor: a row an older release let sink below it heals here
        rate = max(
            recovered_rate(state, row.refilled_s, row.lowered_s, now_s), pushback_floor(state)
        )
        paused = state.paused_until is not None and state.paused_until > request.now
        base, credit = placement(row.next_slot_s, now_s, rate, state.burst)
        ahead = now_s + request.horizon.total_seconds() + EPSILON - base
        room = max(credit, math.floor(ahead * rate) + 1 if ahead >= 0 else 0)
        # the burst goes whole to the grant that finds it (what its node does not use
        # lapses): a burst split between grants would need a second cursor to pay it back
        wanted = request.wanted
        granted = 0 if paused or wanted == 0 else max(min(wanted, room), credit)
        if granted:
            row.next_slot_s = base + granted / rate
        row.refilled_s = max(row.refilled_s, now_s)
        row.state = replace(state, effective_rate=rate)
        if rate >= state.rate_per_second:  # recovered: lowered no more, for no reason
            row.lowered_s = None
            row.state = replace(row.state, lowered_reason=None)
        self._tally(request)
        slots, next_at = grant_slots(request.now, granted, base, credit, rate, state.paused_until)
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
            effective = max(pushback_floor(state), effective * DECREASE)
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
        # a new limit takes effect from now: no slot the old one placed ahead is kept
        row.next_slot_s = min(row.next_slot_s, change.at.timestamp())
        rate = change.rate_per_second or state.rate_per_second
        cap = state.max_in_flight if change.max_in_flight is None else change.max_in_flight
        floor = max(rate * state.floor_ratio, MIN_RATE)
        lowered = row.lowered_s is not None
        effective = max(min(state.effective_rate, rate), floor) if lowered else rate
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
    """Refuse a limit out of range (the rule of a declaration,
    :func:`flowpark.flows.providers.check_limit`).

    Raises:
        ValueError: a rate outside :data:`~flowpark.flows.providers.MIN_RATE` to
            :data:`~flowpark.flows.providers.MAX_RATE`, a burst outside 1 to
            :data:`~flowpark.flows.providers.MAX_BURST`, or a negative cap (0 removes it).
    """
    rate = change.rate_per_second
    cap = change.max_in_flight
    if cap is not None and cap < 0:
        raise ValueError("max_in_flight must not be negative")
    check_limit(change.name, MIN_RATE if rate is None else rate, change.burst, cap or None)


def pushback_floor(state: ProviderState) -> float:
    """The lowest effective rate a pushback leaves: the limit times its floor ratio, and
    never below :data:`~flowpark.flows.providers.MIN_RATE`."""
    return max(state.rate_per_second * state.floor_ratio, MIN_RATE)
