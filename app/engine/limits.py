"""Limits of one try: ``execute_timeout``, the heartbeat watchdog and the lease keeper, all
on the engine clock (mixed into :class:`app.engine.Engine`)."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from app.engine.clock import Clock
from app.engine.context import ExecutionContext
from app.engine.runner import (
    Run,
    _CapabilityTimeout,
)
from app.errors import (
    StaleFencingToken,
    StoreUnavailable,
)
from app.flows.capability import Capability, CapabilityOptions

__all__ = ["Limits"]

log = logging.getLogger("flowpark.engine")


class Limits:
    """Runs one try of a capability within its limits while keeping the lease."""

    clock: Clock
    lease: timedelta
    config: Any

    # -- capability limits ---------------------------------------------------------------
    async def call_with_limits(self, capability: Capability, ctx: ExecutionContext,
                               opts: CapabilityOptions, run: Run) -> Any:
        """Run one try with ``execute_timeout`` (and heartbeat watchdog) on the engine clock;
        renew the lease meanwhile when the capability does not heartbeat.

        A try starts only on a lease with at least two thirds of its length left: when the
        run's last lease write is older than a third of the lease (time spent waiting for a
        connection or a busy event loop before the call), the lease is renewed first.

        Raises:
            StaleFencingToken: a renewal was refused (another node claimed the instance
                after the lease lapsed): the try is not started, or is cancelled at once,
                and nothing of it is committed.
        """
        if opts.heartbeat_timeout is None and self._lease_left(run) < self.lease * 2 / 3:
            await self._renew_lease(run)
        task = asyncio.ensure_future(capability.execute(ctx))
        watchers: list[asyncio.Future[Any]] = []
        timer = asyncio.ensure_future(self.clock.sleep(opts.execute_timeout))
        watchers.append(timer)
        keeper = None
        if opts.heartbeat_timeout is None:
            # watched like the timers: a refused renewal ends the try at once
            keeper = asyncio.ensure_future(self._keep_lease(run))
            watchers.append(keeper)
        else:
            watchers.append(asyncio.ensure_future(self._watch_heartbeats(ctx, opts, run)))
        try:
            done, _ = await asyncio.wait({task, *watchers},
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if keeper is not None and keeper in done:
                keeper.result()  # raises: the lease was lost (StaleFencingToken)
            if timer in done:
                raise _CapabilityTimeout(
                    "execute_timeout",
                    f"{capability.id} did not finish within {opts.execute_timeout}")
            raise _CapabilityTimeout(
                "heartbeat_timeout",
                f"{capability.id} recorded no heartbeat for {opts.heartbeat_timeout}")
        finally:
            # also when this run is cancelled (node shutting down): the try must not go on
            # polling, heartbeating or writing stream messages without its run
            task.cancel()
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(task, *watchers, return_exceptions=True)

    def _lease_left(self, run: Run) -> timedelta:
        """Lease time left by the run's last lease write known here (its claim's, or the
        keeper's); zero when unknown. Writes that renew the lease on the side (a step
        commit) are not counted, so this errs on the short side."""
        if run.lease_expires_at is None:
            return timedelta(0)
        return run.lease_expires_at - run.now()

    async def _renew_lease(self, run: Run) -> bool:
        """Renew the run's lease (fenced). Returns False when the store could not be
        reached (logged; the caller tries again later).

        Raises:
            StaleFencingToken: the lease was lost to another node (logged).
        """
        until = run.now() + self.lease
        try:
            ack = await run.journal.renew_lease(run.instance_id, run.token, until)
        except StaleFencingToken:
            log.warning("instance %s: lease renewal refused on node %s (token %d): "
                        "another node took it over; this node stops the run",
                        run.instance_id, self.config.node_id, run.token)
            raise
        except StoreUnavailable as exc:
            log.warning("instance %s: lease renewal failed on node %s: %s",
                        run.instance_id, self.config.node_id, exc)
            return False
        run.lease_expires_at = until
        run.after_ack(ack)
        return True

    async def _keep_lease(self, run: Run) -> None:
        """Renew the run's lease whenever two thirds of it are left (every ``lease / 3``
        on the engine clock), until cancelled.

        A renewal the store cannot make (database unreachable) is logged and tried again
        after a tenth of the lease. Cancelled (the try ended), the keeper first lets a
        renewal in flight finish.

        Raises:
            StaleFencingToken: the lease was lost; the caller cancels the try.
        """
        while True:
            await self.clock.sleep(self._lease_left(run) - self.lease * 2 / 3)
            renewal = asyncio.ensure_future(self._renew_lease(run))
            try:
                renewed = await asyncio.shield(renewal)
            except asyncio.CancelledError:
                # the try ended meanwhile: let the statement finish, since one cut off
                # mid-way leaves its pooled connection unreturned
                await asyncio.gather(renewal, return_exceptions=True)
                raise
            if not renewed:
                await self.clock.sleep(self.lease / 10)

    async def _watch_heartbeats(self, ctx: ExecutionContext, opts: CapabilityOptions,
                                run: Run) -> None:
        assert opts.heartbeat_timeout is not None
        started = run.now()
        while True:
            last = ctx.last_heartbeat_at or started
            remaining = last + opts.heartbeat_timeout - run.now()
            if remaining <= timedelta(0):
                return
            await self.clock.sleep(remaining)
