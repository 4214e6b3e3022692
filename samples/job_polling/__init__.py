"""The job.await sample (heartbeating capability)."""

from flowpark.samples.job_polling.flow import (
    JOB_FAILED,
    JOB_PROGRESS,
    JOB_WAIT_FAILED,
    ROUTE,
    AwaitJob,
    JobClient,
    JobWaits,
    RecordJobWaitFailure,
    StartJob,
    await_job_options,
    build_job_flow,
)
from flowpark.samples.job_polling.models import JobHandle, JobRequest, JobState, JobStatus

__all__ = [
    "JOB_FAILED",
    "JOB_PROGRESS",
    "JOB_WAIT_FAILED",
    "ROUTE",
    "AwaitJob",
    "JobClient",
    "JobHandle",
    "JobRequest",
    "JobState",
    "JobStatus",
    "JobWaits",
    "RecordJobWaitFailure",
    "StartJob",
    "await_job_options",
    "build_job_flow",
]
