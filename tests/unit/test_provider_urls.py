"""Ids put into provider URLs are escaped: a job id ``a/b?c#d`` stays one path segment."""

from __future__ import annotations

import httpx

from flowpark.samples.document_processing.flow import OcrClient
from flowpark.samples.job_polling.flow import JobClient

TRICKY = "a/b?c#d"


def _recording(paths: list[bytes]) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.raw_path)
        return httpx.Response(
            200, json={"jobId": TRICKY, "status": "pending", "state": "QUEUED", "text": None}
        )

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def test_the_ocr_client_escapes_job_ids() -> None:
    paths: list[bytes] = []
    async with _recording(paths) as http:
        ocr = OcrClient(http, "http://provider.test")
        await ocr.status(TRICKY)
        await ocr.cancel(TRICKY)
    assert paths == [
        b"/fake/ocr/jobs/a%2Fb%3Fc%23d",
        b"/fake/ocr/jobs/a%2Fb%3Fc%23d/cancel",
    ]


async def test_the_job_client_escapes_job_ids() -> None:
    paths: list[bytes] = []
    async with _recording(paths) as http:
        jobs = JobClient(http, "http://provider.test")
        await jobs.status(TRICKY)
    assert paths == [b"/fake/jobs/a%2Fb%3Fc%23d"]
