"""Registers the sample flows on a catalog."""

from __future__ import annotations

from datetime import timedelta

import httpx

from app.flows import Catalog, Flow
from app.settings import Settings
from samples.document_processing import OcrClient, build_document_flow
from samples.job_polling import JobClient, build_job_flow

__all__ = ["register_samples"]


def register_samples(catalog: Catalog, http: httpx.AsyncClient, settings: Settings) -> None:
    """Register ``document.process`` and ``job.await`` bound to ``http``."""
    ocr = OcrClient(
        http,
        settings.ocr_url,
        callback_base=settings.callback_url if settings.ocr_callbacks else None,
    )
    catalog.register(build_document_flow(ocr))
    catalog.register(_job_flow(http, settings))


def _job_flow(http: httpx.AsyncClient, settings: Settings) -> Flow:
    return build_job_flow(
        JobClient(http, settings.jobs_url),
        heartbeat_timeout=timedelta(seconds=settings.sample_job_heartbeat_seconds),
    )


def flows() -> list:  # type: ignore[type-arg]
    """The sample flows with a placeholder client, for ``flowpark flows check``."""
    from app.settings import Settings

    settings = Settings()
    http = httpx.AsyncClient()
    ocr = OcrClient(http, settings.ocr_url)
    return [build_document_flow(ocr), _job_flow(http, settings)]
