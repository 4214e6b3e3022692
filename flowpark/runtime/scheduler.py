"""The sweep as an APScheduler job: every node runs one; correctness comes from the
atomic claim in the database, never from only one process sweeping.

Short waits do not wait for the next scan: when this node parks an instance whose
``wake_at`` comes before the sweep's run after next (an instance due just after the next
run would wait for the one after it), it also schedules an in-process wake (an
APScheduler ``date`` job at that instant) that runs the same sweep, i.e. the same atomic
claim of due rows. The database stays the only truth: a wake job that finds nothing due
claims nothing, and a node that dies with wake jobs pending loses nothing (the next sweep,
on any node, finds the rows). Wakes are coalesced per :data:`WAKE_GRANULARITY` slot, so a
node holds at most ``2.1 * interval / granularity`` wake jobs whatever the number of parked
instances: no per-instance timer or task exists while an instance is parked.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from flowpark.engine.node.engine import Engine
from flowpark.outages import OUTAGES, store_outage
from flowpark.runtime.jobs import NodeJobs

__all__ = ["SWEEP_JOB", "WAKE_GRANULARITY", "Sweeper"]

#: The sweep's job id (its in-process wakes are ``flowpark.sweep.wake.<instant>``).
SWEEP_JOB = "flowpark.sweep"

log = logging.getLogger("flowpark.sweep")

#: in-process wakes due within the same slot share one job (fired at the slot's end)
WAKE_GRANULARITY = timedelta(milliseconds=10)
#: the next wake ahead, read after each sweep, is scheduled in slots of this size
NEXT_WAKE_GRANULARITY = timedelta(milliseconds=50)
#: how long stopping waits for an in-flight sweep before cancelling it
STOP_GRACE_SECONDS = 30.0


def _slot(instant: datetime, granularity: timedelta = WAKE_GRANULARITY) -> datetime:
    """``instant`` rounded up to the next ``granularity`` boundary (aware UTC)."""
    step = granularity.total_seconds()
    return datetime.fromtimestamp(math.ceil(instant.timestamp() / step) * step, UTC)


class Sweeper:
    """Runs ``engine.sweep()`` every ``interval_seconds`` (jittered by up to 10%), once at
    start-up, and at the wake instant of instances this node parks that are due before the
    next scan (``short_wakes``).

    One periodic sweep at a time per process (``max_instances=1``, missed runs coalesce);
    wake jobs may overlap it: claims are atomic, so two sweeps never take the same row.
    """

    def __init__(
        self,
        engine: Engine,
        interval_seconds: float,
        *,
        short_wakes: bool = True,
        jobs: NodeJobs | None = None,
    ) -> None:
        self.engine = engine
        self.interval = interval_seconds
        self.short_wakes = short_wakes
        #: the node's one scheduler (a scheduler of its own when built alone)
        self.jobs = jobs or NodeJobs()
        self._own_jobs = jobs is None
        self.scheduler = self.jobs.scheduler
        self._slots: set[datetime] = set()
        self.wakes_scheduled = 0
        self._running: set[asyncio.Task[Any]] = set()
        self._sweeping = False  # a sweep of this node is in flight
        self._again = False  # a wake came while it was: it claims again before returning
        self._stopping = False  # stop() began: a sweep not yet begun never begins
        #: ``time.monotonic()`` when a sweep last ended without error (None: not yet)
        self.last_success: float | None = None
        #: the engine-clock instant that sweep ended, and how many instances it claimed
        self.last_sweep_at: datetime | None = None
        self.last_claimed = 0

    async def run_once(self) -> None:
        """Sweep now. While a sweep of this node is in flight, a second one is not started
        (two would split the node's run slots into small claims): the one in flight is
        asked to claim again when it finds nothing more due."""
        if self._stopping:  # e.g. a job's task created before stop() paused the scheduler
            return
        if self._sweeping:
            self._again = True
            return
        self._sweeping = True
        task = asyncio.current_task()
        if task is not None:
            self._running.add(task)
        try:
            self._again = True
            claimed = 0
            while self._take_again():  # a wake that came as the sweep ended: again
                report = await self.engine.sweep(again=self._take_again)
                claimed += report.claimed
                if report.claimed:
                    log.info(
                        "sweep on %s: claimed %d, advanced %d, failed %d",
                        self.engine.config.node_id,
                        report.claimed,
                        report.advanced,
                        report.failed_runs,
                    )
            self.last_success = time.monotonic()
            self.last_sweep_at = self.engine.clock.now()
            self.last_claimed = claimed
            if self.short_wakes and self.engine.claiming:
                ahead = await self.engine.store.reads.next_wake(after=self.last_sweep_at)
                if ahead is not None:
                    self._parked("", ahead, NEXT_WAKE_GRANULARITY)
        except Exception as exc:
            if store_outage(exc):
                OUTAGES.unavailable("sweep", exc)
            else:
                log.exception("sweep failed on node %s", self.engine.config.node_id)
        else:
            OUTAGES.recovered("sweep")
        finally:
            self._sweeping = False
            if task is not None:
                self._running.discard(task)

    def _take_again(self) -> bool:
        again, self._again = self._again, False
        return again

    async def _wake(self, slot: datetime) -> None:
        self._slots.discard(slot)
        await self.run_once()

    def _parked(
        self, instance_id: str, wake_at: datetime, granularity: timedelta = WAKE_GRANULARITY
    ) -> None:
        """Engine wake listener: schedule an in-process wake unless a periodic sweep at or
        after ``wake_at`` is near: an instance due just after the next scan would
        otherwise wait for the scan after it, so wakes before the scan after next (next
        scan + the interval with its jitter) are scheduled too."""
        if not self.jobs.running or self._stopping:
            return
        job = self.jobs.get(SWEEP_JOB)
        next_scan = job.next_run_time if job is not None else None
        if (
            next_scan is not None
            and next_scan > datetime.now(UTC)
            and wake_at >= next_scan + timedelta(seconds=self.interval * 1.1)
        ):
            return
        slot = _slot(wake_at, granularity)
        if slot in self._slots:
            return
        self._slots.add(slot)
        self.wakes_scheduled += 1
        self.jobs.add(
            self._wake,
            "date",
            run_date=slot,
            args=[slot],
            id=f"{SWEEP_JOB}.wake.{slot.timestamp():.3f}",
            misfire_grace_time=None,
        )

    def start(self) -> None:
        """Start the sweep (and other periodic jobs) on the running event loop."""
        # the first sweep runs at once: a restarted node resumes overdue instances now
        self.jobs.add(
            self.run_once,
            "interval",
            seconds=self.interval,
            jitter=max(self.interval * 0.1, 0.0),
            id=SWEEP_JOB,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC),
        )
        if self.short_wakes and self._parked not in self.engine.wake_listeners:
            self.engine.wake_listeners.append(self._parked)

    async def stop(self, grace_seconds: float = STOP_GRACE_SECONDS) -> None:
        """Stop sweeping. Runs no new sweep, lets an in-flight one finish (up to
        ``grace_seconds``, then cancels it) and returns only when none is running: the
        lifespan disposes the database and closes the HTTP client right after."""
        if self._parked in self.engine.wake_listeners:
            self.engine.wake_listeners.remove(self._parked)
        self._stopping = True
        self.jobs.remove(SWEEP_JOB)  # the sweep and its wakes: the node's other jobs go on
        self.engine.stop_claiming()  # a sweep in flight finishes what it started, no more
        running = [t for t in self._running if t is not asyncio.current_task()]
        if running:
            await asyncio.wait(running, timeout=grace_seconds)
            for task in running:  # what outlived the grace
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        if self._own_jobs:
            self.jobs.shutdown()
        self._slots.clear()
