"""Settings of the sample flows and their fake providers (``FLOWPARK_*`` variables).

They belong to the samples: a node serving only its own flows never reads them, and its
settings table does not list them.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SampleSettings"]


class SampleSettings(BaseSettings):
    """The samples' settings, each read from ``FLOWPARK_<NAME>``.

    Durations are seconds (floats). URLs left unset mean "this node": the samples then call
    the fake providers the node serves itself.
    """

    model_config = SettingsConfigDict(env_prefix="FLOWPARK_", extra="ignore")

    sample_ocr_per_page: float = Field(
        default=5.0, ge=0, description="Seconds the fake OCR takes per page."
    )
    ocr_base_url: str | None = Field(
        default=None, description="Base URL of the OCR provider; default: this node."
    )
    ocr_callbacks: bool = Field(
        default=True, description="Ask the OCR provider to call the ocr.completed webhook."
    )
    job_queued_seconds: float = Field(default=2.0, ge=0, description="Fake job: QUEUED time.")
    job_succeed_seconds: float = Field(default=6.0, ge=0, description="Fake job: run time.")
    jobs_base_url: str | None = Field(
        default=None,
        description="Base URL of the job service (/fake/jobs below it) the job.await sample "
        "calls; default: this node.",
    )
    sample_job_heartbeat_seconds: float = Field(
        default=60.0,
        ge=10,
        description="Heartbeat timeout of the job.await sample's job.await capability "
        "(seconds, at least 10): how long a crashed node's try goes unnoticed before another "
        "node retries it.",
    )
