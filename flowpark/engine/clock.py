"""Clocks: the engine's one source of instants.

Every instant flowpark decides on comes from a :class:`Clock` (timezone-aware UTC). The
store records what the clock said; it never asks the database for ``now()``. Waits and
timers are measured on the same clock, in ``timedelta``.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

__all__ = ["Clock", "SystemClock", "Timer", "VirtualClock", "ensure_utc"]


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


class Timer(Protocol):
    """What :meth:`Clock.call_later` returns."""

    def cancel(self) -> None:
        """Stop the timer: its callback is not called unless it was already. Calling it
        again, or after the callback ran, does nothing."""
        ...


class Clock(Protocol):
    """Source of aware UTC instants, and of waits and timers measured on the same clock.

    Every duration is a ``timedelta``; every instant an aware UTC ``datetime``.
    """

    def now(self) -> datetime:
        """Return the current instant (aware, UTC)."""
        ...

    async def sleep(self, delay: timedelta) -> None:
        """Wait ``delay`` on this clock (a virtual clock returns when moved past it); a
        ``delay`` of zero or less yields to the event loop once."""
        ...

    def call_later(self, delay: timedelta, callback: Callable[[], Any]) -> Timer:
        """Call ``callback()`` once ``delay`` has passed on this clock, from the running
        event loop (in the ``contextvars`` context current now), unless the returned
        :class:`Timer` is cancelled first. A ``delay`` of zero or less calls it soon (on
        the loop's next turn, like ``loop.call_soon``), never from within this call.

        A timer costs no task: it is the cheap way to bound or pace work on the engine
        clock (an exception the callback raises goes to the loop's exception handler).
        """
        ...


class SystemClock:
    """The machine's wall clock, in UTC. Waits and timers run on the event loop's
    monotonic time, so they are not moved by wall-clock steps."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, delay: timedelta) -> None:
        await asyncio.sleep(max(0.0, delay.total_seconds()))

    def call_later(self, delay: timedelta, callback: Callable[[], Any]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, delay.total_seconds()), callback)


class _VirtualTimer:
    """A :class:`VirtualClock` timer: due at ``due``; ordered by (due, creation)."""

    __slots__ = ("due", "seq", "callback", "context", "clock")

    def __init__(
        self, clock: VirtualClock, due: datetime, seq: int, callback: Callable[[], Any]
    ) -> None:
        self.clock: VirtualClock | None = clock  # None once fired or cancelled
        self.due = due
        self.seq = seq
        self.callback: Callable[[], Any] | None = callback
        self.context = contextvars.copy_context()

    def __lt__(self, other: _VirtualTimer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)

    def cancel(self) -> None:
        clock = self.clock
        if clock is None:
            return
        self.clock = self.callback = None
        clock._timer_cancelled()


class VirtualClock:
    """A clock tests move by hand.

    Args:
        start: the first instant (aware; default 2026-01-01T00:00:00Z).

    ``sleep`` waits until the clock is moved past the sleeper's due instant, and
    ``call_later`` callbacks are called when the clock is moved to or past their due
    instant, so code that waits on the engine clock runs under a test without real
    waiting.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._now = ensure_utc(start or datetime(2026, 1, 1, tzinfo=UTC))
        self._sleepers: list[tuple[datetime, asyncio.Future[None]]] = []
        self._timers: list[_VirtualTimer] = []  # a heap by (due, seq)
        self._timer_seq = 0
        self._timers_cancelled = 0  # cancelled timers still in the heap

    def now(self) -> datetime:
        return self._now

    def set(self, instant: datetime) -> None:
        """Move the clock to ``instant`` (never backwards), wake due sleepers (in the order
        they went to sleep), then call due timers' callbacks, in the order of their due
        instants (of their creation, for equal ones), before returning.

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
        # self._timers, not a local: a callback may cancel timers, which may rebuild it
        while self._timers and self._timers[0].due <= instant:
            timer = heapq.heappop(self._timers)
            callback = timer.callback
            if callback is None:  # cancelled
                self._timers_cancelled -= 1
                continue
            timer.clock = timer.callback = None
            self._fire(timer, callback)

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward by ``delta`` (see :meth:`set`); returns the new instant."""
        self.set(self._now + delta)
        return self._now

    def next_sleeper_due(self) -> datetime | None:
        """The earliest instant a pending ``sleep`` or ``call_later`` timer waits for, or
        None."""
        pending = [due for due, fut in self._sleepers if not fut.done()]
        pending.extend(t.due for t in self._timers if t.callback is not None)
        return min(pending) if pending else None

    async def sleep(self, delay: timedelta) -> None:
        if delay <= timedelta(0):
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self._now + delay, fut))
        await fut

    def call_later(self, delay: timedelta, callback: Callable[[], Any]) -> Timer:
        if delay <= timedelta(0):
            return asyncio.get_running_loop().call_soon(callback)
        self._timer_seq += 1
        timer = _VirtualTimer(self, self._now + delay, self._timer_seq, callback)
        heapq.heappush(self._timers, timer)
        return timer

    def _timer_cancelled(self) -> None:
        # cancelled timers leave the heap when due; drop them sooner when they pile up (a
        # test that runs many short tries without moving the clock)
        self._timers_cancelled += 1
        if self._timers_cancelled > 64 and self._timers_cancelled * 2 > len(self._timers):
            self._timers = [t for t in self._timers if t.callback is not None]
            heapq.heapify(self._timers)
            self._timers_cancelled = 0

    @staticmethod
    def _fire(timer: _VirtualTimer, callback: Callable[[], Any]) -> None:
        """Call a due timer's callback in its context; an exception goes to the running
        loop's exception handler (as ``loop.call_later`` does), else is raised."""
        try:
            timer.context.run(callback)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise exc from None
            loop.call_exception_handler(
                {
                    "message": f"Exception in virtual clock timer callback {callback!r}",
                    "exception": exc,
                }
            )
