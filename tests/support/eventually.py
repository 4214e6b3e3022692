"""``eventually``: the one way tests wait for behaviour.

Tests never sleep for timing. They state what must become true and poll it::

    view = await eventually(lambda: completed(client, instance_id), timeout=20)

``check`` is a callable (sync or async). It *passes* when it returns without raising
``AssertionError`` and its value is not ``False``; the value is returned. Any other exception
propagates at once (a bug is not a reason to wait).

Tests on a virtual clock, where no wall-clock time needs to pass, bound the wait by loop
turns instead (deterministic: each call is one ``asyncio.sleep(0)`` after the last)::

    await eventually(lambda: lane.batches == 1, turns=200)

:func:`eventually_sync` is the same for plain (non-async) tests, e.g. the browser tests,
whose sync Playwright API must not run inside an event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

__all__ = ["eventually", "eventually_sync"]

T = TypeVar("T")

#: each pause between calls is this many times the one before ...
GROWTH = 1.5
#: ... up to this many seconds (or ``interval``, when that is longer): a long wait polls a
#: few times a second, not twenty (each call of a check on a server costs CPU on both sides)
LONGEST_PAUSE = 0.25


def _pause(interval: float, calls: int) -> float:
    """Seconds to wait after the ``calls``-th failing call: ``interval`` first, then
    growing by :data:`GROWTH` up to ``max(interval, LONGEST_PAUSE)``."""
    return min(interval * GROWTH ** (calls - 1), max(interval, LONGEST_PAUSE))


@overload
async def eventually(
    check: Callable[[], Awaitable[T]],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str | None = ...,
    turns: int | None = ...,
) -> T: ...


@overload
async def eventually(
    check: Callable[[], T],
    *,
    timeout: float = ...,
    interval: float = ...,
    what: str | None = ...,
    turns: int | None = ...,
) -> T: ...


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str | None = None,
    turns: int | None = None,
) -> T:
    """Call ``check`` every ``interval`` seconds until it passes or ``timeout`` elapses.

    Args:
        check: sync or async callable; fails by raising ``AssertionError`` or returning
            ``False``.
        timeout: seconds before giving up (monotonic clock).
        interval: seconds between the first calls; the pauses then grow (:func:`_pause`).
        what: a description for the failure message.
        turns: instead of ``timeout`` and ``interval``: give up after this many calls, one
            event-loop turn apart (no wall-clock time is waited for).

    Returns:
        The value of the first passing call.

    Raises:
        AssertionError: still failing after ``timeout``; chained to the last failure.
    """
    deadline = time.monotonic() + timeout
    calls = 0
    last: AssertionError | None = None
    while True:
        calls += 1
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
            if value is not False:
                return value
            last = AssertionError(f"{what or 'check'} returned False")
        except AssertionError as exc:
            last = exc
        if turns is not None and calls >= turns:
            label = what or getattr(check, "__name__", "check")
            raise AssertionError(f"{label} still failing after {turns} loop turns: {last}")
        if turns is None and time.monotonic() >= deadline:
            label = what or getattr(check, "__name__", "check")
            raise AssertionError(
                f"{label} still failing after {timeout}s ({calls} calls): {last}"
            ) from last
        await asyncio.sleep(0 if turns is not None else _pause(interval, calls))


def eventually_sync(
    check: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str | None = None,
) -> T:
    """:func:`eventually` for sync code: ``check`` is a plain callable.

    Args:
        check: fails by raising ``AssertionError`` or returning ``False``.
        timeout: seconds before giving up (monotonic clock).
        interval: seconds between the first calls; the pauses then grow (:func:`_pause`).
        what: a description for the failure message.

    Returns:
        The value of the first passing call.

    Raises:
        AssertionError: still failing after ``timeout``; chained to the last failure.
    """
    deadline = time.monotonic() + timeout
    calls = 0
    last: AssertionError | None = None
    while True:
        calls += 1
        try:
            value = check()
            if value is not False:
                return value
            last = AssertionError(f"{what or 'check'} returned False")
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            label = what or getattr(check, "__name__", "check")
            raise AssertionError(
                f"{label} still failing after {timeout}s ({calls} calls): {last}"
            ) from last
        time.sleep(_pause(interval, calls))
