"""document.process: upload to OCR, poll the job while parked, extract, emit, return.

The parked poll: between status checks the instance is one ``flow_instance`` row
(``state=suspended``, ``wake_at``); no task, thread or lease holds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote

import httpx

from flowpark.flows import (
    Backoff,
    Bag,
    Capability,
    Correlate,
    Decision,
    Flow,
    HttpTrigger,
    Provider,
    RetryPolicy,
    Signal,
    StepContext,
)
from flowpark.flows.capability import CapabilityOptions
from flowpark.samples.document_processing.models import (
    DocumentProcessed,
    DocumentResult,
    ExtractedFields,
    OcrCompleted,
    OcrJob,
    OcrStatus,
    ProcessDocument,
)
from flowpark.samples.settings import instance_callback_token

__all__ = [
    "NOT_READ_IN_TIME",
    "OCR",
    "OCR_COMPLETED",
    "OcrClient",
    "Waits",
    "build_document_flow",
]

NOT_READ_IN_TIME = "document.not_read_in_time"
#: The provider's webhook: on the instance's route (the job's callback URL names the
#: instance), or on the one provider route ``/api/v1/providers/ocr/signals/ocr.completed``,
#: which finds the instance by the job id its upload recorded (``ctx.correlate``).
OCR_COMPLETED = Signal(
    "ocr.completed", OcrCompleted, correlate=Correlate("ocr", key=lambda done: done.job_id)
)
ROUTE = "/api/v1/documents"
#: The OCR vendor every capability of the flow calls: 100 calls/s of all nodes together,
#: 50 at once above it. A deployment sets its contract's figure with
#: ``FLOWPARK_PROVIDER_LIMITS='{"ocr": {"rate_per_second": 20}}'``; an operator changes it
#: live with ``flowpark providers set ocr --rate 20``.
OCR = Provider("ocr", rate_per_second=100, burst=50)


class Waits:
    """The flow's durations: business decisions, named here rather than at the call site."""

    OCR_POLLING = Backoff.exponential_jitter("PT5S", "PT5M")
    OCR_BUDGET = timedelta(hours=4)
    DEADLINE = timedelta(hours=6)
    OCR_CALL_TIMEOUT = timedelta(seconds=10)
    #: Every call to the provider is tried for up to 3 minutes from its first try, waiting
    #: about 2 s, 4 s, 8 s, then 15 s between tries (each wait a park, cut by up to a fifth
    #: at random so that documents failing together do not retry as one wave): a provider
    #: that stalls for a minute or two fails no document; one down for longer fails the
    #: step. (A 429 or 503 is no failed try: the provider's pushback parks the call until
    #: its Retry-After.)
    PROVIDER_RETRY = RetryPolicy(
        initial_interval=timedelta(seconds=2),
        maximum_interval=timedelta(seconds=15),
        total_duration=timedelta(minutes=3),
        jitter=0.2,
    )


@dataclass(frozen=True)
class OcrClient:
    """The OCR provider over HTTP.

    Attributes:
        http: a shared ``httpx.AsyncClient`` (connection pool).
        base_url: the provider's base, e.g. ``http://127.0.0.1:8000`` (``/fake/ocr`` below).
        callback_base: flowpark's own public base URL for the provider's webhook, or None
            for no callback.
        callback_key: the key of each job's callback token
            (:func:`flowpark.samples.settings.instance_callback_token`: it opens the signal route
            of the uploading instance only); None: the callback carries no token.
        admin_token: sent on the provider's cancel route (an admin route off loopback).
        timeout: per-call timeout (default 10 s).
    """

    http: httpx.AsyncClient
    base_url: str
    callback_base: str | None = None
    callback_key: str | None = None
    admin_token: str | None = None
    timeout: timedelta = Waits.OCR_CALL_TIMEOUT

    def _url(self, path: str) -> str:
        return f"{self.base_url.rstrip('/')}/fake/ocr{path}"

    async def upload(
        self, document_id: str, pages: int, instance_id: str, idempotency_key: str
    ) -> str:
        """Create an OCR job for the document; a repeat of ``idempotency_key`` (the
        execution key) answers the job the first call created.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        body: dict[str, object] = {"documentId": document_id, "pages": pages}
        if self.callback_base:
            body["callbackUrl"] = (
                f"{self.callback_base.rstrip('/')}{ROUTE}/{instance_id}/signals/ocr.completed"
            )
            if self.callback_key is not None:
                body["callbackToken"] = instance_callback_token(self.callback_key, instance_id)
        resp = await self.http.post(
            self._url("/jobs"),
            json=body,
            headers={"Idempotency-Key": idempotency_key},
            timeout=self.timeout.total_seconds(),
        )
        resp.raise_for_status()
        return str(resp.json()["jobId"])

    async def status(self, job_id: str) -> dict[str, object]:
        """The OCR job's status as the provider answers it.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        resp = await self.http.get(
            self._url(f"/jobs/{quote(job_id, safe='')}"), timeout=self.timeout.total_seconds()
        )
        resp.raise_for_status()
        return dict(resp.json())

    async def cancel(self, job_id: str) -> None:
        """Cancel the OCR job (idempotent).

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        headers = {"Authorization": f"Bearer {self.admin_token}"} if self.admin_token else {}
        resp = await self.http.post(
            self._url(f"/jobs/{quote(job_id, safe='')}/cancel"),
            headers=headers,
            timeout=self.timeout.total_seconds(),
        )
        resp.raise_for_status()


class UploadToOcr(Capability):
    """``ocr.upload``: send the document to the provider; puts :class:`OcrJob` and records
    the job id as the instance's ``ocr`` correlation key (a webhook naming the job finds it).

    Creating a job is not idempotent by itself: the call carries the execution key as the
    provider's idempotency key, so its tries (a stalled provider, a crash after the call)
    create one job.
    """

    id = "ocr.upload"
    provider = OCR
    puts = (OcrJob,)
    options = CapabilityOptions(retry=Waits.PROVIDER_RETRY)

    def __init__(self, ocr: OcrClient) -> None:
        self.ocr = ocr

    async def execute(self, ctx: StepContext) -> None:
        doc: ProcessDocument = ctx.input
        job_id = await self.ocr.upload(
            doc.document_id, doc.pages, ctx.instance_id, ctx.execution_key
        )
        ctx.correlate("ocr", job_id)
        ctx.put(OcrJob(job_id=job_id))


class CancelOcrJob(Capability):
    """``ocr.cancel``: compensation of ``ocr.upload``: close the provider's job."""

    id = "ocr.cancel"
    provider = OCR
    idempotent = True
    reads = (OcrJob,)
    options = CapabilityOptions(retry=Waits.PROVIDER_RETRY)

    def __init__(self, ocr: OcrClient) -> None:
        self.ocr = ocr

    async def execute(self, ctx: StepContext) -> None:
        await self.ocr.cancel(ctx.get(OcrJob).job_id)


class CheckOcrStatus(Capability):
    """``ocr.status``: one status check; "pending" is an answer, not an error."""

    id = "ocr.status"
    provider = OCR
    idempotent = True
    reads = (OcrJob,)
    puts = (OcrStatus,)
    options = CapabilityOptions(retry=Waits.PROVIDER_RETRY)

    def __init__(self, ocr: OcrClient) -> None:
        self.ocr = ocr

    async def execute(self, ctx: StepContext) -> None:
        job = ctx.get(OcrJob)
        answer = await self.ocr.status(job.job_id)
        text = answer.get("text")
        ctx.put(
            OcrStatus(
                job_id=job.job_id,
                status=str(answer["status"]),
                text=str(text) if text is not None else None,
            )
        )


class EscalateToManualReview(Capability):
    """``document.escalate``: put the document in the human review queue."""

    id = "document.escalate"
    idempotent = True
    reads = (OcrJob,)

    async def execute(self, ctx: StepContext) -> None:
        doc: ProcessDocument = ctx.input
        ctx.request_review(
            subject=doc.document_id,
            reason=f"OCR did not finish within {Waits.OCR_BUDGET}",
            details={"jobId": ctx.get(OcrJob).job_id, "instanceId": ctx.instance_id},
        )


_FIELD = re.compile(r"^\s*([\w.-]+)\s*:\s*(.*?)\s*$")


class ExtractFields(Capability):
    """``document.extract``: read ``key: value`` lines off the completed OCR text."""

    id = "document.extract"
    provider = OCR
    idempotent = True
    reads = (OcrJob,)
    puts = (ExtractedFields,)
    options = CapabilityOptions(retry=Waits.PROVIDER_RETRY)

    def __init__(self, ocr: OcrClient) -> None:
        self.ocr = ocr

    async def execute(self, ctx: StepContext) -> Decision | None:
        answer = await self.ocr.status(ctx.get(OcrJob).job_id)
        if answer["status"] != "completed":
            return ctx.fail(
                "document.ocr_failed", f"OCR job ended {answer['status']}, no text to read"
            )
        values = {}
        for line in str(answer.get("text") or "").splitlines():
            match = _FIELD.match(line)
            if match:
                values[match.group(1)] = match.group(2)
        ctx.put(ExtractedFields(values=values))
        return None


def _our_job(bag: Bag, signal: OcrCompleted) -> bool:
    """``ocr.completed`` belongs to the wait only for the job this instance uploaded (a
    stale webhook of an orphaned job, or a made-up job id, ends nothing)."""
    return signal.job_id == bag.get(OcrJob).job_id


def _ocr_finished(bag: Bag) -> bool:
    return bag.get(OcrStatus).is_terminal


def _processed(bag: Bag) -> DocumentProcessed:
    return DocumentProcessed(
        document_id=bag.input.document_id, field_count=len(bag.get(ExtractedFields).values)
    )


def _result(bag: Bag) -> DocumentResult:
    return DocumentResult(
        document_id=bag.input.document_id, field_count=len(bag.get(ExtractedFields).values)
    )


def build_document_flow(ocr: OcrClient, *, signal: Signal = OCR_COMPLETED) -> Flow:
    """The ``document.process`` 1.0.0 flow, its capabilities bound to ``ocr``.

    Args:
        ocr: the OCR provider's client.
        signal: the ``ocr.completed`` signal (default :data:`OCR_COMPLETED`, bearer token;
            a copy with ``verify=SignedWebhook(...)`` makes its route take a Standard
            Webhooks signature instead).
    """
    return (
        Flow(
            "document.process",
            "1.0.0",
            input=ProcessDocument,
            output=DocumentResult,
            trigger=HttpTrigger("POST", ROUTE, idempotent=True),
            deadline=Waits.DEADLINE,
            display_key="documentId",
        )
        .step(UploadToOcr(ocr))
        .compensate_with(CancelOcrJob(ocr))
        .poll_until(
            CheckOcrStatus(ocr),
            until=_ocr_finished,
            interval=Waits.OCR_POLLING,
            timeout=Waits.OCR_BUDGET,
            reads=(OcrStatus,),
        )
        .or_signal(signal, match=_our_job)
        .on_timeout(
            lambda b: b.step(EscalateToManualReview()).fail(
                NOT_READ_IN_TIME, "the OCR provider did not read the document in time"
            )
        )
        .step(ExtractFields(ocr))
        .emit("document.processed", _processed, reads=(ExtractedFields,))
        .returns(_result, reads=(ExtractedFields,))
    )
