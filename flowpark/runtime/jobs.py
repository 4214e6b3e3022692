"""A node's one scheduler: every periodic job of a node (the sweep and its in-process wakes,
event deliveries, retention, the liveness beat, the metrics' refresh) is a job of one
APScheduler ``AsyncIOScheduler``, started with the first job and shut down when the node
stops.

Each part of a node names its jobs under a prefix of its own (``flowpark.sweep``,
``flowpark.delivery`` ...) and removes them when it stops, leaving the others' running; a
part built alone (a test, a benchmark) gets a scheduler of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler

__all__ = ["NodeJobs"]


class NodeJobs:
    """The node's scheduler (see the module).

    Attributes:
        scheduler: the APScheduler scheduler (UTC).
    """

    def __init__(self) -> None:
        self.scheduler = AsyncIOScheduler(timezone="UTC")

    def add(self, func: Callable[..., Any], trigger: str, **options: Any) -> Job:
        """Add a job (APScheduler's ``add_job`` arguments) and start the scheduler if it is
        not running yet (on the running event loop).

        Returns:
            The job.
        """
        job = self.scheduler.add_job(func, trigger, **options)
        if not self.scheduler.running:
            self.scheduler.start()
        return job

    def get(self, job_id: str) -> Job | None:
        """The job of that id, or None."""
        return self.scheduler.get_job(job_id)

    @property
    def running(self) -> bool:
        """Whether the scheduler runs (it has been started and not shut down)."""
        return bool(self.scheduler.running)

    def remove(self, prefix: str) -> None:
        """Remove every job whose id is ``prefix`` or starts with ``prefix.``: the jobs of
        one part of the node (a run of one in flight goes on; nothing new starts)."""
        for job in self.scheduler.get_jobs():
            if job.id == prefix or job.id.startswith(f"{prefix}."):
                job.remove()

    def shutdown(self) -> None:
        """Shut the scheduler down (the node stops; each part has stopped its own jobs)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
