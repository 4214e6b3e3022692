"""The retention purge as a periodic APScheduler job on every node.

Every ``FLOWPARK_RETENTION_SCAN_SECONDS`` each node asks the store to delete, in batches of
``FLOWPARK_RETENTION_BATCH``, the instances that ended more than ``FLOWPARK_RETENTION`` ago
(on the engine clock) with all their rows. One node purges at a time (the store's lock; the
others find it taken and return), and each batch is one short transaction.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from flowpark.engine.clock import Clock
from flowpark.engine.ports.outbox import Retention
from flowpark.outages import OUTAGES, store_outage
from flowpark.runtime.jobs import NodeJobs

__all__ = ["Purger"]

log = logging.getLogger("flowpark.retention")


class Purger:
    """Deletes ended instances past the retention, periodically.

    Args:
        store: the retention store.
        clock: the engine clock (the cutoff is ``now - retention``).
        retention: how long ended instances are kept.
        batch: instances deleted per transaction.
        interval_seconds: seconds between runs.
    """

    def __init__(
        self,
        store: Retention,
        clock: Clock,
        retention: timedelta,
        *,
        batch: int = 500,
        interval_seconds: float = 600.0,
        jobs: NodeJobs | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.retention = retention
        self.batch = batch
        self.interval = interval_seconds
        #: the node's one scheduler (a scheduler of its own when built alone)
        self.jobs = jobs or NodeJobs()
        self._own_jobs = jobs is None
        self._running: set[asyncio.Task[Any]] = set()
        self._stopping = False  # stop() began: a run not yet begun never begins

    async def run_once(self) -> int:
        """Purge every instance that ended before ``now - retention``.

        Returns:
            How many instances were deleted.
        """
        cutoff = self.clock.now() - self.retention
        deleted = await self.store.purge(cutoff, self.batch)
        if deleted:
            log.info("retention: deleted %d instances that ended before %s", deleted, cutoff)
        return deleted

    async def _tick(self) -> None:
        if self._stopping:  # a job's task created before stop() paused the scheduler
            return
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            await self.run_once()
        except Exception as exc:  # noqa: BLE001 - logged; the next run tries again
            if store_outage(exc):
                OUTAGES.unavailable("retention", exc)
            else:
                log.exception("retention purge failed")
        else:
            OUTAGES.recovered("retention")
        finally:
            self._running.discard(task)

    def start(self) -> None:
        """Run :meth:`run_once` every ``interval_seconds``, the first a minute after start
        (spread over the interval so that nodes started together do not all try at once)."""
        self.jobs.add(
            self._tick,
            "interval",
            seconds=self.interval,
            jitter=self.interval * 0.1,
            id="flowpark.retention",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC) + timedelta(seconds=min(60.0, self.interval)),
        )

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop: no new run; a batch in flight finishes (up to ``grace_seconds``)."""
        self._stopping = True
        self.jobs.remove("flowpark.retention")
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=grace_seconds)
            for task in running:  # what outlived the grace
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        if self._own_jobs:
            self.jobs.shutdown()
