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
        #: every run begun and not yet ended, with the lease it holds
        self.in_flight: dict[asyncio.Future[RunOutcome], Claim] = {}
        #: the leases of runs cancelled before they parked or ended (released on close)
        self.abandoned: list[Claim] = []

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

        task = asyncio.ensure_future(run())
        self.in_flight[task] = claim
        task.add_done_callback(self._ended)
        return task, detach

    def _ended(self, task: asyncio.Future[RunOutcome]) -> None:
        claim = self.in_flight.pop(task, None)
        if claim is not None and task.cancelled():
            self.abandoned.append(claim)

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

    async def close(self, grace_seconds: float = 0.0, *, release: bool = True) -> list[str]:
        """Node shutdown: let the runs in flight go on for up to ``grace_seconds``, cancel
        those still going, and give up the leases of every run cancelled before it parked
        or ended, so that the next sweep on any node continues them at once instead of
        after their lease's expiry.

        A cancelled try commits nothing: it runs again from its last checkpoint.

        Args:
            grace_seconds: how long the runs in flight may take to park or end (seconds).
            release: give up the cancelled runs' leases (False: leave them to expire, as
                a node that dies does).

        Returns:
            The ids of the instances left to the next sweep (their leases released, or
            left to expire when the store could not be reached).
        """
        running = list(self.in_flight)
        if running and grace_seconds > 0:
            await asyncio.wait(running, timeout=grace_seconds)
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*list(self.in_flight), return_exceptions=True)
        left: list[str] = []
        now = self.clock.now()
        for claim in self.abandoned if release else ():
            try:
                await self.host.store.runs.release(claim.instance_id, claim.fencing_token, now)
            except StaleFencingToken:
                continue  # parked, ended or taken over meanwhile: nothing of ours to give up
            except Exception as exc:  # the store is gone: the lease expires by itself
                log.warning(
                    "could not release the lease of instance %s on node %s: %s",
                    claim.instance_id,
                    self.node_id,
                    exc,
                )
            left.append(claim.instance_id)
        if not release:
            left = [claim.instance_id for claim in self.abandoned]
        self.abandoned.clear()
        return left
