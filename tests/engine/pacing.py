"""Virtual time for heartbeating capabilities, and the fake job service on that clock.

A heartbeating capability loops in-process and paces itself with ``ctx.sleep``. Under the
harness nobody else moves the clock while it runs, so :class:`Paced` runs the real
capability with a context whose ``sleep`` first registers the real (engine-clock) sleep and
then moves the virtual clock to its end: virtual time passes exactly as the capability
sleeps, and the engine's own timers (``execute_timeout``, the heartbeat watchdog) fire at the
instants they were set for, on the same clock.

:class:`JobWorld` serves the fake job service's routes in-process (httpx ASGI transport, a
real HTTP exchange without a socket) with the service's clock bound to the harness clock,
so ``QUEUED -> RUNNING -> SUCCEEDED`` follows virtual time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from flowpark.engine.clock import VirtualClock
from flowpark.flows import Capability, Decision, StepContext
from flowpark.samples.fakes.jobs import FakeJobService, create_jobs_router

__all__ = ["JobWorld", "Paced"]

Hold = Callable[[StepContext, int], bool]


class _PacedContext:
    """Delegates to the engine's context; ``sleep`` moves the virtual clock."""

    def __init__(self, ctx: StepContext, pacer: Paced) -> None:
        self._ctx = ctx
        self._pacer = pacer
        self._sleeps = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    async def sleep(self, delay: timedelta) -> None:
        self._sleeps += 1
        pacer = self._pacer
        if pacer.hold is not None and pacer.hold(self._ctx, self._sleeps):
            pacer.held.set()
            await asyncio.Future()  # stuck for good, like a node that stopped
        if pacer.gate is not None:
            await pacer.gate.wait()
        assert pacer.clock is not None, "set Paced.clock to the harness clock"
        sleeping = asyncio.ensure_future(self._ctx.sleep(delay))
        await asyncio.sleep(0)  # one loop turn: the sleep registers on the clock
        pacer.clock.advance(delay)
        await sleeping


class Paced(Capability):
    """Runs ``inner`` (same id and options) with a context whose ``sleep`` moves the clock.

    Args:
        inner: the capability under test.
        hold: ``hold(ctx, n)`` before the try's n-th sleep: True leaves the try stuck
            there for good (``held`` is set), so a test can kill the node that runs it.
        gate: when given, every sleep first waits until the event is set, so a test can
            keep a try running (not finished) for as long as it looks at it.

    Attributes:
        clock: the harness clock (set after the harness opens).
        held: set once a try got stuck at ``hold``.
        tries: how many tries ran.
    """

    def __init__(
        self, inner: Capability, *, hold: Hold | None = None, gate: asyncio.Event | None = None
    ) -> None:
        self.inner = inner
        self.gate = gate
        self.id = inner.id  # type: ignore[misc]
        self.idempotent = inner.idempotent  # type: ignore[misc]
        self.reads = inner.reads  # type: ignore[misc]
        self.puts = inner.puts  # type: ignore[misc]
        self.options = inner.options  # type: ignore[misc]
        self.hold = hold
        self.clock: VirtualClock | None = None
        self.held = asyncio.Event()
        self.tries = 0

    async def execute(self, ctx: StepContext) -> Decision | None:
        self.tries += 1
        return await self.inner.execute(_PacedContext(ctx, self))


class JobWorld:
    """The fake job service on the harness clock, reached over in-process HTTP.

    Args:
        queued_for: time a job stays QUEUED (default 2 s).
        succeed_after: time from start to SUCCEEDED (default 6 s).

    Attributes:
        service: the :class:`FakeJobService` (``complete``/``fail``/``calls``).
        http: an ``httpx.AsyncClient`` on its routes (base ``http://jobs.test``).
        clock: set to the harness clock after the harness opens.
    """

    BASE_URL = "http://jobs.test"

    def __init__(
        self,
        *,
        queued_for: timedelta = timedelta(seconds=2),
        succeed_after: timedelta = timedelta(seconds=6),
    ) -> None:
        self.clock: VirtualClock | None = None
        self.service = FakeJobService(
            queued_for=queued_for, succeed_after=succeed_after, now=self._now
        )
        app = FastAPI()
        app.include_router(create_jobs_router(self.service))
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=self.BASE_URL
        )

    def _now(self) -> datetime:
        assert self.clock is not None, "set JobWorld.clock to the harness clock"
        return self.clock.now()

    async def aclose(self) -> None:
        await self.http.aclose()
