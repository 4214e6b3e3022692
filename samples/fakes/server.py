"""``flowpark fakes``: the fake OCR and job services in a process of their own.

Several flowpark nodes must share one fake provider (a job uploaded through one node is read
by whichever node sweeps the instance next), so multi-node setups run this server and point
``FLOWPARK_OCR_BASE_URL`` / ``FLOWPARK_JOBS_BASE_URL`` of every node at it.
"""

from __future__ import annotations

from datetime import timedelta

from fastapi import FastAPI

from flowpark.redaction import register_secrets
from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from flowpark.samples.fakes.ratelimit import RateGate
from flowpark.samples.settings import SampleSettings, callback_credential, fakes_admin_token
from flowpark.settings import Settings

__all__ = ["create_fakes_server"]


def create_fakes_server(
    settings: Settings | None = None,
    sample: SampleSettings | None = None,
    *,
    per_page: float | None = None,
) -> FastAPI:
    """Build the standalone fakes app (``/fake/ocr``, ``/fake/jobs``, ``GET /fake/stats``,
    ``GET /healthz``).

    Args:
        settings: the node settings, read for ``api_tokens``; default from ``FLOWPARK_*``.
        sample: read for ``sample_ocr_per_page``, ``ocr_rate_limit``, ``ocr_rate_burst``,
            ``job_queued_seconds`` and ``job_succeed_seconds``; default from ``FLOWPARK_*``.
        per_page: seconds the fake OCR takes per page (default
            ``sample.sample_ocr_per_page``).

    Each OCR callback carries the token its upload gave (one instance's only,
    :func:`flowpark.samples.settings.instance_callback_token`) and goes only below
    ``settings.callback_url`` (flowpark's public base URL). The admin routes (list,
    complete, cancel, fail) answer loopback clients, or ones with
    :func:`flowpark.samples.settings.fakes_admin_token`.

    Returns:
        A FastAPI app (``GET /fake/stats`` counts the requests served) whose lifespan
        drains pending OCR callbacks on shutdown.
    """
    settings = settings or Settings()
    sample = sample or SampleSettings()
    seconds = sample.sample_ocr_per_page if per_page is None else per_page
    admin = fakes_admin_token(settings, sample)
    register_secrets([callback_credential(settings, sample).value, admin])
    ocr = FakeOcrService(
        per_page=timedelta(seconds=seconds),
        callback_bases=(settings.callback_url,),
        gate=RateGate(sample.ocr_rate_limit, sample.ocr_rate_burst),
    )
    jobs = FakeJobService(
        queued_for=timedelta(seconds=sample.job_queued_seconds),
        succeed_after=timedelta(seconds=sample.job_succeed_seconds),
    )
    app = create_fakes_app(ocr, jobs, admin_token=admin)
    app.state.fake_ocr = ocr
    app.state.fake_jobs = jobs

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the fakes server is up."""
        return {"status": "ok", "node": "fakes"}

    @app.get("/fake/stats", tags=["ops"])
    async def stats() -> dict[str, dict[str, int]]:
        """Requests served so far, by route name: ``{"ocr": {"upload": n, "status": n,
        ...}, "jobs": {...}, "ocrUploadsByKey": {key: n}}`` (what a test compares with the
        journal)."""
        return {
            "ocr": dict(ocr.calls),
            "jobs": dict(jobs.calls),
            "ocrUploadsByKey": dict(ocr.uploads_by_key),
        }

    return app
