"""The sweep as an APScheduler job: every node runs one; correctness comes from the
atomic claim in the database, never from only one process sweeping."""

from __future__ import annotations

import logging

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from app.engine.engine import Engine

__all__ = ["Sweeper"]

log = logging.getLogger("flowpark.sweep")


class Sweeper:
    """Runs ``engine.sweep()`` every ``interval_seconds`` (jittered by up to 10%).

    One sweep at a time per process (``max_instances=1``, missed runs coalesce).
    """

    def __init__(self, engine: Engine, interval_seconds: float) -> None:
        self.engine = engine
        self.interval = interval_seconds
        self.scheduler = AsyncIOScheduler(timezone="UTC")

    async def run_once(self) -> None:
        try:
            report = await self.engine.sweep()
        except Exception:
            log.exception("sweep failed on node %s", self.engine.config.node_id)
            return
        if report.claimed:
            log.info("sweep on %s: claimed %d, advanced %d, failed %d",
                     self.engine.config.node_id, report.claimed, report.advanced,
                     report.failed_runs)

    def start(self) -> None:
        self.scheduler.add_job(self.run_once, "interval", seconds=self.interval,
                               jitter=max(self.interval * 0.1, 0.0), id="flowpark.sweep",
                               max_instances=1, coalesce=True, misfire_grace_time=None)
        self.scheduler.start()

    async def stop(self) -> None:
        self.scheduler.shutdown(wait=False)
