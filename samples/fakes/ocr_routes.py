"""The fake OCR provider's HTTP routes (``/fake/ocr``) over a
:class:`~flowpark.samples.fakes.ocr.FakeOcrService`; see :mod:`flowpark.samples.fakes.ocr`
for the routes."""

from typing import Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse

from flowpark.samples.fakes.admin import admin_refusal
from flowpark.samples.fakes.ocr import FakeOcrService
from flowpark.samples.fakes.ocr_models import (
    OcrCallbackNotAllowed,
    OcrCancelResult,
    OcrJobAccepted,
    OcrJobCancelled,
    OcrJobNotFound,
    OcrJobSummary,
    OcrJobView,
    OcrUploadRequest,
)
from flowpark.samples.fakes.ratelimit import create_gate_router

__all__ = ["create_ocr_router"]


def _not_found(exc: OcrJobNotFound) -> JSONResponse:
    return JSONResponse(status_code=404, content={"code": exc.code})


def create_ocr_router(service: FakeOcrService, admin_token: str | None = None) -> APIRouter:
    """Build the ``/fake/ocr`` routes over ``service``.

    Args:
        service: the state the routes read and change.
        admin_token: the bearer token the admin routes (list, cancel, complete) take from
            a client off loopback; None: loopback clients only.

    Returns:
        An ``APIRouter`` with prefix ``/fake/ocr`` (see the module docstring for routes).
    """
    router = APIRouter(prefix="/fake/ocr", tags=["fake-ocr"])
    not_found: dict[int | str, dict[str, Any]] = {
        404: {"description": 'Unknown job: `{"code": "ocr.job_not_found"}`'}
    }

    @router.post(
        "/jobs",
        status_code=201,
        response_model=OcrJobAccepted,
        responses={
            200: {"model": OcrJobAccepted, "description": "A repeat of the Idempotency-Key"},
            422: {"description": 'Callback not allowed: `{"code": "ocr.callback_not_allowed"}`'},
        },
    )
    async def upload(
        body: OcrUploadRequest,
        response: Response,
        idempotency_key: str | None = Header(default=None, max_length=200),
    ) -> Any:
        if (refusal := service.gate.admit()) is not None:
            return refusal.response()
        service.calls["upload"] += 1
        known = idempotency_key is not None and idempotency_key in service._by_key
        if idempotency_key is not None:
            service.uploads_by_key[idempotency_key] += 1
        try:
            accepted = service.upload(
                body.document_id,
                body.pages,
                body.callback_url,
                idempotency_key,
                callback_token=body.callback_token,
            )
        except OcrCallbackNotAllowed as exc:
            return JSONResponse(status_code=422, content={"code": exc.code})
        if known:
            service.calls["upload_repeat"] += 1
            response.status_code = 200
        return accepted

    @router.get("/jobs", response_model=list[OcrJobSummary])
    async def list_jobs(request: Request) -> Any:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        service.calls["list"] += 1
        return service.list_jobs()

    @router.get("/jobs/{job_id}", response_model=OcrJobView, responses=not_found)
    async def status(job_id: str) -> Any:
        if (refusal := service.gate.admit()) is not None:
            return refusal.response()
        service.calls["status"] += 1
        try:
            return service.get(job_id)
        except OcrJobNotFound as exc:
            return _not_found(exc)

    @router.post("/jobs/{job_id}/cancel", response_model=OcrCancelResult, responses=not_found)
    async def cancel(job_id: str, request: Request) -> Any:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        service.calls["cancel"] += 1
        try:
            return service.cancel(job_id)
        except OcrJobNotFound as exc:
            return _not_found(exc)

    @router.post(
        "/jobs/{job_id}/complete",
        response_model=OcrJobView,
        responses={
            **not_found,
            409: {"description": 'Job cancelled: `{"code": "ocr.job_cancelled"}`'},
        },
    )
    async def complete(job_id: str, request: Request) -> Any:
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        service.calls["complete"] += 1
        try:
            return service.complete(job_id)
        except OcrJobNotFound as exc:
            return _not_found(exc)
        except OcrJobCancelled as exc:
            return JSONResponse(status_code=409, content={"code": exc.code})

    router.include_router(create_gate_router(service.gate, admin_token))
    return router
