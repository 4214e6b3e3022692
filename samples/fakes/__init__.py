"""Fake external services flowpark's flows talk to over real HTTP.

* :mod:`flowpark.samples.fakes.ocr` — a third-party OCR provider (``/fake/ocr``) with completion
  callbacks.
* :mod:`flowpark.samples.fakes.jobs` — a job runner (``/fake/jobs``) with clock-driven job states.

A node serving the samples mounts both routers (so by default it calls itself);
:func:`create_fakes_app` serves them as a separate app, e.g. for multi-node setups
(``flowpark fakes``, :mod:`flowpark.samples.fakes.server`).
"""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from flowpark.samples.fakes.jobs import FakeJobService, create_jobs_router
from flowpark.samples.fakes.ocr import FakeOcrService
from flowpark.samples.fakes.ocr_routes import create_ocr_router

__all__ = [
    "FakeJobService",
    "FakeOcrService",
    "create_fakes_app",
    "create_jobs_router",
    "create_ocr_router",
]


def create_fakes_app(
    ocr: FakeOcrService, jobs: FakeJobService, admin_token: str | None = None
) -> FastAPI:
    """Build a standalone app serving both fakes.

    Args:
        ocr: state behind ``/fake/ocr``.
        jobs: state behind ``/fake/jobs``.
        admin_token: what the admin routes take off loopback (None: loopback only).

    Returns:
        A FastAPI app with both routers mounted. On lifespan shutdown it drains pending OCR
        callbacks, then closes the OCR service (cancelling its timers).
    """

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await ocr.drain()
            await ocr.close()

    app = FastAPI(title="flowpark fakes", lifespan=lifespan)
    app.include_router(create_ocr_router(ocr, admin_token))
    app.include_router(create_jobs_router(jobs, admin_token))
    return app
