"""The event loop every flowpark process runs on: uvloop where it is installed.

uvicorn picks uvloop by itself (``loop="auto"``) for ``flowpark serve``; the processes that
start their own loop (``flowpark worker``, the benchmarks' nodes) call :func:`run` so that
every node runs on the same loop. uvloop's transports cost about a third less CPU per
outbound HTTP call and database round trip than asyncio's (see BENCHMARKS.md, sweep).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["loop_factory", "run"]

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``uvloop.new_event_loop`` when uvloop is importable (not on Windows), else None
    (asyncio's default loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new loop from :func:`loop_factory` (like
    :func:`asyncio.run`: the loop is closed afterwards, async generators shut down)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
