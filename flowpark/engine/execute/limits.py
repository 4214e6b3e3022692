"""Limits of one try: ``execute_timeout``, the heartbeat watchdog and the lease keeper, all
on the engine clock (the :class:`flowpark.engine.Engine` holds one :class:`CallLimits`)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from flowpark.engine.clock import Clock, Timer
from flowpark.engine.context import ExecutionContext
from flowpark.engine.ports import Store
from flowpark.engine.records import Ack
from flowpark.errors import (
    StaleFencingToken,
    StoreUnavailable,
)
from flowpark.flows.capability import Capability, CapabilityOptions
from flowpark.outages import OUTAGES

__all__ = ["CANCEL_LEARNED", "CallLimits", "CancelLearned", "CapabilityTimeout", "LeaseHolder"]


class LeaseHolder(Protocol):
    """The run a try belongs to, as its limits see it
    (:class:`flowpark.engine.execute.executor.Executor`).

    Attributes:
        lease_expires_at: the lease expiry the run last wrote (the keeper updates it).
    """

    lease_expires_at: datetime | None

    @property
    def instance_id(self) -> str:
        """The instance."""

    @property
    def token(self) -> int:
        """The claim's fencing token."""

    @property
    def store(self) -> Store:
        """The store (its claims role renews the lease)."""

    def now(self) -> datetime:
        """The engine clock's instant (aware UTC)."""

    def after_ack(self, ack: Ack) -> None:
        """Take note of what a write answered (a cancel requested meanwhile)."""


log = logging.getLogger("flowpark.engine")


class CapabilityTimeout(Exception):
    """A limit ended a try: ``execute_timeout`` passed, or no heartbeat came in time.

    Args:
        kind: ``execute_timeout`` or ``heartbeat_timeout`` (the failed row's error type).
        message: what happened, for the row's error detail.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class CancelLearned:
    """What :meth:`CallLimits.call` answers when a heartbeat of the try learned that the
    instance is to be cancelled: the try stopped there (its task cancelled while the
    heartbeat waited); nothing of it is committed, and the run decides again."""


#: The one :class:`CancelLearned` value.
CANCEL_LEARNED = CancelLearned()


class CallLimits:
    """Runs one try of a capability within its limits while keeping the lease.

    Args:
        clock: the engine clock (timers, sleeps).
        lease: a claim's length; a renewal extends the lease by as much from now.
        node_id: this node's name (logs).
    """

    def __init__(self, clock: Clock, lease: timedelta, node_id: str) -> None:
        self.clock = clock
        self.lease = lease
        self.node_id = node_id

    async def call(
        self,
        capability: Capability,
        ctx: ExecutionContext,
        opts: CapabilityOptions,
        run: LeaseHolder,
    ) -> Any:
        """Run one try with ``execute_timeout`` (and heartbeat watchdog) on the engine clock;
        renew the lease meanwhile when the capability does not heartbeat.

        A try starts only on a lease with at least two thirds of its length left: when the
        run's last lease write is older than a third of the lease (time spent waiting for a
        connection or a busy event loop before the call), the lease is renewed first.

        The capability runs in a task of its own; the limits are timers on the engine clock
        (:meth:`flowpark.engine.clock.Clock.call_later`), not tasks, and the lease keeper starts
        a task only for a renewal it makes, so a try that ends within a third of the lease
        costs one task.

        Returns:
            What the capability returned, or :data:`CANCEL_LEARNED` when one of its
            heartbeats learned that the instance is to be cancelled (the capability's task
            is cancelled at that heartbeat: ``asyncio.CancelledError`` out of
            ``ctx.heartbeat``, which ``except Exception`` does not catch).

        Raises:
            StaleFencingToken: a renewal was refused (another node claimed the instance
                after the lease lapsed): the try is not started, or is cancelled at once,
                and nothing of it is committed.
            CapabilityTimeout: ``execute_timeout`` passed, or no heartbeat came in time.
            Exception: what the capability raised.
        """
        if opts.heartbeat_timeout is None and self.lease_left(run) < self.lease * 2 / 3:
            await self.renew_lease(run)
        task = asyncio.ensure_future(capability.execute(ctx))
        limits = _TryLimits(self, task, ctx, opts, run)
        try:
            await limits.ended  # the capability returned or raised, or a limit ended the try
            if limits.cancel_learned:  # a heartbeat learned of a cancel: the try stops
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return CANCEL_LEARNED
            if task.done():
                return task.result()
            error = limits.error(capability, opts)  # what ended it, as this turn found it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise error
        finally:
            # also when this run is cancelled (node shutting down): the try must not go on
            # polling, heartbeating or writing stream messages without its run; a renewal in
            # flight finishes, since a statement cut off mid-way leaves its pooled
            # connection unreturned
            limits.stop()
            renewal = limits.renewal
            if not task.done() or (renewal is not None and not renewal.done()):
                task.cancel()
                await asyncio.gather(
                    task, *([renewal] if renewal is not None else []), return_exceptions=True
                )
            elif not task.cancelled():
                task.exception()  # retrieved, also when the run was cancelled as it ended

    def lease_left(self, run: LeaseHolder) -> timedelta:
        """Lease time left by the run's last lease write known here.

        Its claim's, or the keeper's; zero when unknown. Writes that renew the lease on the
        side (a step commit) are not counted, so this errs on the short side.

        Args:
            run: the run holding the lease.

        Returns:
            The time left (negative once the lease lapsed).
        """
        if run.lease_expires_at is None:
            return timedelta(0)
        return run.lease_expires_at - run.now()

    async def renew_lease(self, run: LeaseHolder) -> bool:
        """Renew the run's lease (fenced) until ``lease`` from now.

        Args:
            run: the run holding the lease.

        Returns:
            False when the store could not be reached (logged; the caller tries again
            later), else True.

        Raises:
            StaleFencingToken: the lease was lost to another node (logged).
        """
        until = run.now() + self.lease
        try:
            ack = await run.store.runs.renew_lease(run.instance_id, run.token, until)
        except StaleFencingToken:
            log.warning(
                "instance %s: lease renewal refused on node %s (token %d): "
                "another node took it over; this node stops the run",
                run.instance_id,
                self.node_id,
                run.token,
            )
            raise
        except StoreUnavailable as exc:
            OUTAGES.unavailable("lease", exc)
            return False
        run.lease_expires_at = until
        run.after_ack(ack)
        return True


class _TryLimits:
    """The limits of one running try, as timers on the engine clock.

    ``ended`` is resolved when the capability's task is done or a limit ends the try:
    ``execute_timeout`` passed, the heartbeat watchdog found no heartbeat for
    ``heartbeat_timeout``, the lease keeper's renewal raised (StaleFencingToken: the
    lease was lost), or a heartbeat learned that a cancel was requested (``ctx.on_cancel``:
    the heartbeat then waits on ``stopped`` until its task is cancelled). The try's caller
    then cancels the capability's task.

    Without a heartbeat timeout, the lease keeper renews the run's lease whenever two thirds
    of it are left (every ``lease / 3``): its timer starts a renewal task; a renewal the
    store cannot make (database unreachable, logged) is tried again after a tenth of the
    lease. With one, the watchdog's timer re-arms itself to the last heartbeat plus the
    timeout. Both keep running until :meth:`stop` (so a renewal may start while a cancelled
    capability unwinds, as the try still holds the lease).
    """

    __slots__ = (
        "limits",
        "task",
        "ctx",
        "opts",
        "run",
        "clock",
        "ended",
        "stopped",
        "cancel_learned",
        "renewal",
        "lease_error",
        "execute_expired",
        "heartbeat_expired",
        "started",
        "_deadline",
        "_timer",
        "_stopped",
    )

    def __init__(
        self,
        limits: CallLimits,
        task: asyncio.Future[Any],
        ctx: ExecutionContext,
        opts: CapabilityOptions,
        run: LeaseHolder,
    ) -> None:
        self.limits = limits
        self.task = task
        self.ctx = ctx
        self.opts = opts
        self.run = run
        self.clock = limits.clock
        loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[None] = loop.create_future()
        self.stopped: asyncio.Future[None] = loop.create_future()  # cancelled by stop()
        self.cancel_learned = False
        ctx.on_cancel = self._cancel
        self.renewal: asyncio.Future[bool] | None = None  # the keeper's renewal in flight
        self.lease_error: BaseException | None = None
        self.execute_expired = False
        self.heartbeat_expired = False
        self._stopped = False
        task.add_done_callback(self._task_done)
        self._deadline: Timer = self.clock.call_later(opts.execute_timeout, self._execute_timeout)
        self._timer: Timer | None = None  # the keeper's or the watchdog's
        if opts.heartbeat_timeout is None:
            self._keep_lease()
        else:
            self.started = run.now()
            self._watch_heartbeats()

    def error(self, capability: Capability, opts: CapabilityOptions) -> BaseException:
        """What ended the try, the capability being still at work: the lost lease first,
        then ``execute_timeout``, then the heartbeat watchdog."""
        if self.lease_error is not None:
            return self.lease_error
        if self.execute_expired:
            return CapabilityTimeout(
                "execute_timeout", f"{capability.id} did not finish within {opts.execute_timeout}"
            )
        assert self.heartbeat_expired
        return CapabilityTimeout(
            "heartbeat_timeout",
            f"{capability.id} recorded no heartbeat for {opts.heartbeat_timeout}",
        )

    def stop(self) -> None:
        """Cancel the timers; a renewal in flight goes on (the caller waits for it)."""
        self._stopped = True
        self.stopped.cancel()  # a heartbeat still waiting there (another task's) ends
        self._deadline.cancel()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._end()

    async def _cancel(self) -> None:
        """A heartbeat learned of a cancel: end the try, and wait (in the heartbeat) until
        the capability's task is cancelled."""
        self.cancel_learned = True
        self._end()
        await self.stopped

    def _execute_timeout(self) -> None:
        self.execute_expired = True
        self._end()

    # -- lease keeper ----------------------------------------------------------------
    def _keep_lease(self) -> None:
        """Renew when two thirds of the lease are left (at once when fewer are)."""
        if self._stopped:
            return
        limits = self.limits
        self._timer = self.clock.call_later(
            limits.lease_left(self.run) - limits.lease * 2 / 3, self._renew
        )

    def _renew(self) -> None:
        self._timer = None
        if self._stopped:
            return
        renewal = asyncio.ensure_future(self.limits.renew_lease(self.run))
        self.renewal = renewal
        renewal.add_done_callback(self._renewed)

    def _renewed(self, renewal: asyncio.Future[bool]) -> None:
        if renewal.cancelled():
            return
        exc = renewal.exception()
        if self._stopped:
            return  # the try ended meanwhile; its commit or release meets a lost lease
        if exc is not None:  # refused (StaleFencingToken, logged): end the try at once
            self.lease_error = exc
            self._end()
        elif renewal.result():
            self._keep_lease()
        else:  # the store could not be reached (logged): again after a tenth of the lease
            self._timer = self.clock.call_later(self.limits.lease / 10, self._keep_lease)

    # -- heartbeat watchdog ----------------------------------------------------------
    def _watch_heartbeats(self) -> None:
        """End the try when it recorded no heartbeat for ``heartbeat_timeout`` (counted
        from its start before the first); else look again when that would be so."""
        assert self.opts.heartbeat_timeout is not None
        self._timer = None
        if self._stopped:
            return
        last = self.ctx.last_heartbeat_at or self.started
        remaining = last + self.opts.heartbeat_timeout - self.run.now()
        if remaining <= timedelta(0):
            self.heartbeat_expired = True
            self._end()
        else:
            self._timer = self.clock.call_later(remaining, self._watch_heartbeats)
