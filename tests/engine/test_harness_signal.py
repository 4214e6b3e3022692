"""FlowHarness.signal answers what the signal route answers, typed, ``matched`` included."""

from __future__ import annotations

import httpx
import pytest

from flowpark.api.models import SignalAnswer
from flowpark.errors import IdempotencyKeyReused
from flowpark.samples.document_processing import (
    ExtractedFields,
    OcrClient,
    OcrJob,
    OcrStatus,
    build_document_flow,
)
from flowpark.testing import FlowHarness, Scripted


async def test_signal_answers_as_the_route_does_matched_included() -> None:
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))
    async with FlowHarness.open(
        [flow],
        substitutes={
            "ocr.upload": Scripted(OcrJob(job_id="j")),
            "ocr.status": Scripted(
                OcrStatus(job_id="j", status="pending"),
                OcrStatus(job_id="j", status="pending"),
                OcrStatus(job_id="j", status="completed", text="a: 1"),
            ),
            "document.extract": Scripted(ExtractedFields(values={"a": "1"})),
        },
    ) as h:
        started = await h.start("document.process", {"documentId": "d1", "pages": 1})
        instance_id = started.instance.id
        refused = await h.signal(instance_id, "ocr.completed", {"jobId": "someone-else"})
        assert isinstance(refused, SignalAnswer)  # typed, as the client's answer
        assert refused.matched is False and refused.state == "suspended"
        assert refused.created is True and refused.instance_id == instance_id
        taken = await h.signal(
            instance_id, "ocr.completed", {"jobId": "j"}, idempotency_key="hook-1"
        )
        assert taken.matched is True and taken.taken_at is not None
        assert taken.state == "completed"
        again = await h.signal(
            instance_id, "ocr.completed", {"jobId": "j"}, idempotency_key="hook-1"
        )
        assert again.created is False and again.signal_id == taken.signal_id
        # the same key with another payload: refused as the route refuses it
        with pytest.raises(IdempotencyKeyReused):
            await h.signal(instance_id, "ocr.completed", {"jobId": "k"}, idempotency_key="hook-1")
