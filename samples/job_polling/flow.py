"""job.await: start a job, then wait for it in one heartbeating capability.

The second way to wait (the first is the parked poll of ``document.process``): for a wait of
seconds that a user watches, ``job.await`` owns the whole wait and loops in-process. Each
round calls the job service with its own short timeout; a change of the job's state becomes
a ``JobProgress`` stream message, an unchanged state a heartbeat. The engine bounds the wait
(``execute_timeout``, the retry policy's ``total_duration``), and a crashed node's try is
retried on any node from the last checkpoint once its heartbeats stop. An expired wait goes
to ``job.record_wait_failure``, which fails the flow naming the recovery error.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import httpx

from flowpark.flows import (
    Capability,
    CapabilityOptions,
    Decision,
    Flow,
    HttpTrigger,
    RetryPolicy,
    StepContext,
    Stream,
)
from flowpark.samples.job_polling.models import JobHandle, JobRequest, JobState, JobStatus

__all__ = [
    "JOB_FAILED",
    "JOB_PROGRESS",
    "JOB_WAIT_FAILED",
    "ROUTE",
    "AwaitJob",
    "JobClient",
    "JobWaits",
    "RecordJobWaitFailure",
    "StartJob",
    "await_job_options",
    "build_job_flow",
]

ROUTE = "/api/v1/jobs"
JOB_FAILED = "job.failed"
JOB_WAIT_FAILED = "job.wait_failed"


class JobWaits:
    """The flow's durations, named here rather than at the call site.

    Keep ``POLL_INTERVAL + CALL_TIMEOUT <= HEARTBEAT_TIMEOUT - 10 s`` (rule
    ``heartbeat.window_too_small``). ``MAX_JOB_WAIT`` is both the execute timeout of one try
    and the retry policy's total duration: the engine enforces it, so the loop computes no
    deadline of its own.
    """

    POLL_INTERVAL = timedelta(seconds=2)
    CALL_TIMEOUT = timedelta(seconds=10)
    HEARTBEAT_TIMEOUT = timedelta(minutes=1)
    MAX_JOB_WAIT = timedelta(minutes=10)
    FIRST_RETRY_DELAY = timedelta(seconds=1)
    RETRY_BACKOFF = 2.0
    MAX_TRIES = 3


JOB_PROGRESS = Stream("JobProgress", JobStatus, max_bytes=1 << 20)
"""One message per observed change of the job's state (best effort, 1 MiB per instance)."""


@dataclass(frozen=True)
class JobClient:
    """The job service over HTTP (``/fake/jobs`` below ``base_url``).

    Attributes:
        http: a shared ``httpx.AsyncClient`` (connection pool).
        base_url: the service's base, e.g. ``http://127.0.0.1:8000``.
        timeout: the timeout of each call (default 10 s).
    """

    http: httpx.AsyncClient
    base_url: str
    timeout: timedelta = JobWaits.CALL_TIMEOUT

    def _url(self, job_id: str) -> str:
        # the job id is the client's instance key: escaped, so ``a/b?c`` stays one segment
        return f"{self.base_url.rstrip('/')}/fake/jobs/{quote(job_id, safe='')}"

    async def start(
        self, job_id: str, input: Any = None, idempotency_key: str | None = None
    ) -> JobStatus:
        """Start ``job_id`` (idempotent: an existing job is left as it is); a repeat of
        ``idempotency_key`` (the execution key) answers the job the first call started.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        resp = await self.http.put(
            self._url(job_id),
            json={"input": input},
            headers=headers,
            timeout=self.timeout.total_seconds(),
        )
        resp.raise_for_status()
        return JobStatus.model_validate(resp.json())

    async def status(self, job_id: str) -> JobStatus:
        """The job's current status.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        resp = await self.http.get(self._url(job_id), timeout=self.timeout.total_seconds())
        resp.raise_for_status()
        return JobStatus.model_validate(resp.json())


class StartJob(Capability):
    """``job.start``: start the job under the instance key (the business id), so a repeated
    start, a retry or a second node starts it once; puts :class:`JobHandle`."""

    id = "job.start"
    idempotent = True
    puts = (JobHandle,)
    options = CapabilityOptions(retry=RetryPolicy(maximum_tries=JobWaits.MAX_TRIES))

    def __init__(self, jobs: JobClient) -> None:
        self.jobs = jobs

    async def execute(self, ctx: StepContext) -> None:
        """Start the job under the instance key; put its :class:`JobHandle`."""
        job_id = ctx.instance_key or ctx.instance_id
        request: JobRequest = ctx.input
        await self.jobs.start(job_id, request.input, ctx.execution_key)
        ctx.put(JobHandle(job_id=job_id))


def await_job_options(
    heartbeat_timeout: timedelta = JobWaits.HEARTBEAT_TIMEOUT,
) -> CapabilityOptions:
    """The options of ``job.await``: 10 min execute timeout, the given heartbeat timeout
    (default 1 min), retry 1 s x2 up to 3 tries within 10 min."""
    return CapabilityOptions(
        execute_timeout=JobWaits.MAX_JOB_WAIT,
        heartbeat_timeout=heartbeat_timeout,
        retry=RetryPolicy(
            initial_interval=JobWaits.FIRST_RETRY_DELAY,
            backoff_coefficient=JobWaits.RETRY_BACKOFF,
            maximum_tries=JobWaits.MAX_TRIES,
            total_duration=JobWaits.MAX_JOB_WAIT,
        ),
        poll_interval=JobWaits.POLL_INTERVAL,
        call_timeout=JobWaits.CALL_TIMEOUT,
    )


class AwaitJob(Capability):
    """``job.await``: poll the job until it ends, reporting progress.

    "Not finished yet" is a normal round of the loop, never an error; a failed call (or
    one past its own timeout) is an error, and the retry policy runs a new try. The
    checkpoint is the last *reported* state, so a new try (on any node) repeats no progress
    message.

    Args:
        jobs: the job service.
        options: replaces :func:`await_job_options` (tests shorten the timeouts).
    """

    id = "job.await"
    idempotent = True
    reads = (JobHandle,)
    options = await_job_options()

    def __init__(self, jobs: JobClient, options: CapabilityOptions | None = None) -> None:
        self.jobs = jobs
        if options is not None:
            self.options = options  # type: ignore[misc]

    async def execute(self, ctx: StepContext) -> Decision:
        """Poll the job until it ends, reporting each new state once."""
        job_id = ctx.get(JobHandle).job_id
        reported = ctx.last_heartbeat_value(JobState)
        while True:
            status = await self.jobs.status(job_id)
            if status.state is JobState.SUCCEEDED:
                return ctx.complete(status.result)
            if status.state is JobState.FAILED:
                return ctx.fail(
                    JOB_FAILED,
                    f"job {job_id} failed: {status.error}",
                    job_id=job_id,
                    error=status.error,
                )
            if status.state != reported:
                # Checkpoint first, then the message: a try that dies in between loses
                # this message (streams are best effort) but a retry never repeats it.
                await ctx.heartbeat(status.state)
                await ctx.write(JOB_PROGRESS, status)
                reported = status.state
            else:
                await ctx.heartbeat(reported)
            await ctx.sleep(JobWaits.POLL_INTERVAL)


class RecordJobWaitFailure(Capability):
    """``job.record_wait_failure``: the failure route of ``job.await``; fails the flow with
    ``job.wait_failed`` naming the recovery error (``execute_timeout``,
    ``heartbeat_timeout`` or the call's error type) and its detail."""

    id = "job.record_wait_failure"
    idempotent = True
    reads = (JobHandle,)

    async def execute(self, ctx: StepContext) -> Decision:
        """Fail the flow with ``job.wait_failed``, naming the recovery error."""
        job_id = ctx.get(JobHandle).job_id
        failure = ctx.recovery_error
        if failure is None:  # only reachable as a failure route
            return ctx.fail(JOB_WAIT_FAILED, f"waiting for job {job_id} failed")
        return ctx.fail(
            JOB_WAIT_FAILED,
            f"waiting for job {job_id} failed: {failure.error_type}: {failure.detail}",
            job_id=job_id,
            error_type=failure.error_type,
            detail=failure.detail,
            try_number=failure.try_number,
        )


def build_job_flow(
    jobs: JobClient, *, heartbeat_timeout: timedelta = JobWaits.HEARTBEAT_TIMEOUT
) -> Flow:
    """The ``job.await`` 1.0.0 flow, its capabilities bound to ``jobs``.

    Args:
        jobs: the job service client.
        heartbeat_timeout: of ``job.await`` (default 1 min; runtime setting
            ``FLOWPARK_SAMPLE_JOB_HEARTBEAT_SECONDS``).
    """
    return (
        Flow(
            "job.await",
            "1.0.0",
            input=JobRequest,
            trigger=HttpTrigger("POST", ROUTE, idempotent=True),
            streams=(JOB_PROGRESS,),
        )
        .step(StartJob(jobs))
        .step(AwaitJob(jobs, await_job_options(heartbeat_timeout)))
        .on_failure(lambda b: b.step(RecordJobWaitFailure()))
    )
