"""Values of the job.await flow (JSON in camelCase)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = ["JobHandle", "JobRequest", "JobState", "JobStatus"]


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class JobState(StrEnum):
    """A job's state as the job service reports it."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


class JobRequest(_Camel):
    """Input of ``job.await``. The job id is the start's ``instanceKey`` (the route takes it
    out of the body), so the body may be just ``{"instanceKey": "<job id>"}``.

    Attributes:
        input: any JSON value handed to the job service with the start (optional).
    """

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"instanceKey": "job-7", "input": {"size": 3}}]}
    )

    input: Any = None


class JobHandle(_Camel):
    """Put by ``job.start``: the job this instance waits for."""

    job_id: str = Field(min_length=1)


class JobStatus(BaseModel):
    """The job service's answer to a status call; also each ``JobProgress`` message.

    Attributes:
        job_id: the job (``jobId``).
        state: ``QUEUED``, ``RUNNING``, ``SUCCEEDED`` or ``FAILED``.
        result: the job's result once ``SUCCEEDED``.
        error: the failure reason once ``FAILED``.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    job_id: str
    state: JobState
    result: dict[str, Any] | None = None
    error: str | None = None
