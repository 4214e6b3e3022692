"""The runs a node has in flight: the run-slot gate (``concurrency``), each run in a task
of its own, an answer as soon as the run parks, ends or detaches (starts a heartbeating
capability's try), and the runs that went on in the background after detaching."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from flowpark.engine.node.claimed import ClaimHost, run_claim
from flowpark.engine.outcomes import RunOutcome
from flowpark.engine.records import Claim, InstanceState
from flowpark.errors import StaleFencingToken, StoreUnavailable
from flowpark.outages import OUTAGES

__all__ = ["RunTasks"]

log = logging.getLogger("flowpark.engine")

Started = tuple[asyncio.Future[RunOutcome], asyncio.Future[None]]
"""A begun run: its task, and the future it resolves when it detaches."""


class RunTasks:
    """Runs advancing on this node.

    Each run is one call of :func:`~flowpark.engine.node.claimed.run_claim` on the node's
    engine: it advances the claimed instance until it parks or ends, resolving the run's
    detach future when it detaches.

    Args:
        host: the node's engine, as a claimed run uses it.
        concurrency: run slots: instances the sweep advances at once.

    Attributes:
        gate: the run slots (a semaphore of ``concurrency``).
        background: the runs that detached and go on without a waiter.
    """

    def __init__(self, host: ClaimHost, concurrency: int) -> None:
        self.host = host
        self.clock = host.clock
        self.node_id = host.config.node_id
        self.gate = asyncio.Semaphore(concurrency)
        self.background: set[asyncio.Future[RunOutcome]] = set()

    def begin(self, claim: Claim, *, gated: bool) -> Started:
        """Start advancing ``claim`` in a task (taking a run slot first when ``gated``).

        Args:
            claim: the lease this node holds.
            gated: wait for a free run slot first (and hold it for the run).

        Returns:
            ``(the run's task, its detach future)``, see :meth:`advance`.
        """
        detach: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def run() -> RunOutcome:
            if not gated:
                return await run_claim(self.host, claim, detach)
            async with self.gate:
                return await run_claim(self.host, claim, detach)

        return asyncio.ensure_future(run()), detach

    async def advance(
        self, claim: Claim, *, gated: bool, started: Started | None = None
    ) -> RunOutcome:
        """Advance ``claim`` until it parks or ends, or until it starts a try of a
        heartbeating capability.

        Then the run goes on in the background (see :meth:`drain`) and the answer is
        ``RunOutcome(state=running)``, so a start request or a sweep is not held for the
        length of an in-process wait.

        Args:
            claim: the lease this node holds.
            gated: take a run slot first.
            started: a run already begun with :meth:`begin`.

        Returns:
            The run's outcome (``running`` when it detached).
        """
        task, detach = started or self.begin(claim, gated=gated)
        try:
            return await self.outcome(claim, task, detach)
        except asyncio.CancelledError:
            task.cancel()
            raise

    async def advance_within(self, claim: Claim, wait: timedelta | None) -> RunOutcome:
        """:meth:`advance` (ungated), answering ``running`` once ``wait`` passed on the
        engine clock while the run goes on in the background.

        Args:
            claim: the lease this node holds.
            wait: how long to wait for the run to park or end; None: as :meth:`advance`.

        Returns:
            The run's outcome (``running`` when it detached or ``wait`` passed).
        """
        started = self.begin(claim, gated=False)
        bound = None
        if wait is not None:
            detach = started[1]

            def answer_now() -> None:
                if not detach.done():  # still working: answer, let the run go on
                    detach.set_result(None)

            bound = self.clock.call_later(wait, answer_now)
        try:
            return await self.advance(claim, gated=False, started=started)
        finally:
            if bound is not None:
                bound.cancel()

    def outcome(
        self, claim: Claim, task: asyncio.Future[RunOutcome], detach: asyncio.Future[None]
    ) -> asyncio.Future[RunOutcome]:
        """A future with :meth:`advance`'s answer for a begun run.

        The run's result (or error) when it ends first, ``RunOutcome(state=running)`` when
        it detaches first (the run then goes on in the background). Callbacks, not a task:
        a sweep makes one per claimed instance. Cancelling it does not cancel the run.

        Args:
            claim: the run's claim.
            task: the run's task.
            detach: the run's detach future.

        Returns:
            The answer's future.
        """
        outcome: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()

        def settle(_: asyncio.Future[Any]) -> None:
            if outcome.done():
                return
            if not task.done():  # detached: the run goes on without a waiter
                self.background.add(task)
                task.add_done_callback(self._background_done)
                outcome.set_result(RunOutcome(claim.instance_id, InstanceState.RUNNING))
                return
            detach.cancel()
            if task.cancelled():
                outcome.cancel()
            elif (error := task.exception()) is not None:
                outcome.set_exception(error)
            else:
                outcome.set_result(task.result())

        task.add_done_callback(settle)
        detach.add_done_callback(settle)
        return outcome

    def _background_done(self, task: asyncio.Future[RunOutcome]) -> None:
        self.background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if isinstance(error, StoreUnavailable):
            OUTAGES.unavailable("run", error)
        elif error is not None and not isinstance(error, StaleFencingToken):
            log.error("background run failed on node %s", self.node_id, exc_info=error)

    async def drain(self) -> None:
        """Wait until every run continued in the background has parked or ended (their
        errors are logged, not raised)."""
        while self.background:
            await asyncio.gather(*list(self.background), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the runs continued in the background and wait for them."""
        for task in list(self.background):
            task.cancel()
        await asyncio.gather(*list(self.background), return_exceptions=True)
