"""The README's harness example, verbatim: if this breaks, the README is wrong."""

import httpx

from app.testing import FlowHarness, Scripted
from samples.document_processing import (
    ExtractedFields,
    OcrClient,
    OcrJob,
    OcrStatus,
    build_document_flow,
)


async def test_a_document_waits_in_one_row_then_completes():
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))
    status = Scripted(
        OcrStatus(job_id="j", status="pending"),
        OcrStatus(job_id="j", status="completed", text="a: 1"),
    )
    async with FlowHarness.open(
        [flow],
        substitutes={
            "ocr.upload": Scripted(OcrJob(job_id="j")),
            "ocr.status": status,
            "document.extract": Scripted(ExtractedFields(values={"a": "1"})),
        },
    ) as h:
        started = await h.start("document.process", {"documentId": "d1", "pages": 1})
        assert started.instance.state == "suspended"
        assert not await h.holds_lease(started.instance.id)  # waiting holds nothing
        await h.advance_to_next_wake(started.instance.id)  # attempt 1: completed
        done = await h.instance(started.instance.id)
        assert done.state == "completed"
        assert done.result == {"documentId": "d1", "fieldCount": 1}
        assert status.calls == 2  # one call per attempt
