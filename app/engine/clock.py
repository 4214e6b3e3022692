"""Clocks: the engine's one source of instants.

Every instant flowpark decides on comes from a :class:`Clock` (timezone-aware UTC). The
store records what the clock said; it never asks the database for ``now()``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "SystemClock", "VirtualClock", "ensure_utc"]


def ensure_utc(instant: datetime) -> datetime:
    """Return ``instant`` as an aware UTC datetime.

    Args:
        instant: an aware datetime (any offset) or a naive one taken to be UTC.

    Returns:
        The same instant with ``tzinfo=UTC``.
    """
    if instant.tzinfo is None:
        return instant.replace(tzinfo=UTC)
    return instant.astimezone(UTC)


class Clock(Protocol):
    """Source of aware UTC instants, and of waits measured on the same clock."""

    def now(self) -> datetime:
        """Return the current instant (aware, UTC)."""
        ...

    async def sleep(self, delay: timedelta) -> None:
        """Wait ``delay`` on this clock (a virtual clock returns when moved past it)."""
        ...


class SystemClock:
    """The machine's wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, delay: timedelta) -> None:
        await asyncio.sleep(max(0.0, delay.total_seconds()))


class VirtualClock:
    """A clock tests move by hand.

    Args:
        start: the first instant (aware; default 2026-01-01T00:00:00Z).

    ``sleep`` waits until the clock is moved past the sleeper's due instant, so code that
    sleeps on the engine clock runs under a test without real waiting.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = ensure_utc(start or datetime(2026, 1, 1, tzinfo=UTC))
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        """Move the clock to ``instant`` (never backwards) and wake due sleepers.

        Raises:
            ValueError: when ``instant`` is before the current instant.
        """
        instant = ensure_utc(instant)
        if instant < self._now:
            raise ValueError(f"virtual clock cannot move back from {self._now} to {instant}")
        self._now = instant
        keep = []
        for due, fut in self._sleepers:
            if due <= instant:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((due, fut))
        self._sleepers = keep

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward by ``delta``; returns the new instant."""
        self.set(self._now + delta)
        return self._now

    def next_sleeper_due(self) -> datetime | None:
        """The earliest instant a pending ``sleep`` waits for, or None."""
        pending = [due for due, fut in self._sleepers if not fut.done()]
        return min(pending) if pending else None

    async def sleep(self, delay: timedelta) -> None:
        if delay <= timedelta(0):
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + delay, fut))
        await fut
