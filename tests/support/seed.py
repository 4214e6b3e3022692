"""Instances in every state, made by the production engine on a real store (virtual clock).

:func:`seed_console_data` fills a migrated database with what the console must show without
a 500: ``document.process`` 1.0.0 documents parked (some overdue at the real clock),
completed, failed (a provider error on every try), cancelled, one whose lease expired while
running (stuck); a ``document.process`` version this node does not have (0.1.0), a flow it
does not have at all (``t.poll``), and one waiting for a signal (``t.await``). OCR calls are
scripted stand-ins, so no provider is needed; the rows are what the engine writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx

from flowpark.flows import Flow
from flowpark.samples.document_processing import OcrClient, build_document_flow
from flowpark.samples.document_processing.models import ExtractedFields, OcrJob, OcrStatus
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Status, await_flow, poll_flow

__all__ = ["Seeded", "seed_console_data"]


@dataclass
class Seeded:
    """Instance ids by what they are."""

    parked: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)
    completed: str = ""
    failed: str = ""
    cancelled: str = ""
    stuck: str = ""
    unknown_version: str = ""
    unknown_flow: str = ""
    awaiting_signal: str = ""

    def every(self) -> list[str]:
        return [
            *self.parked,
            *self.overdue,
            self.completed,
            self.failed,
            self.cancelled,
            self.stuck,
            self.unknown_version,
            self.unknown_flow,
            self.awaiting_signal,
        ]


def _status(ctx) -> OcrStatus | Exception:  # type: ignore[no-untyped-def]
    doc = ctx.input.document_id
    if doc.startswith("fail"):
        return RuntimeError("OCR provider answered 503")
    if doc.startswith("done"):
        return OcrStatus(job_id=f"job-{doc}", status="completed", text="total: 12")
    return OcrStatus(job_id=f"job-{doc}", status="pending")


def _documents(version: str = "1.0.0") -> Flow:
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://ocr.invalid"))
    if version != "1.0.0":
        flow.version = version
    return flow


async def seed_console_data(database_url: str, *, now: datetime | None = None) -> Seeded:
    """Fill ``database_url`` (migrated) with instances in every state.

    The virtual clock starts 20 minutes before ``now`` (default: the real clock), so the
    parked instances' wakes lie in the past at ``now`` (overdue, unless ``now`` is given
    earlier), and the ended ones ended within the last hour.
    """
    real_now = now or datetime.now(UTC)
    seeded = Seeded()
    substitutes = {
        "ocr.upload": Scripted(lambda ctx: OcrJob(job_id=f"job-{ctx.input.document_id}")),
        "ocr.status": Scripted(_status),
        "ocr.cancel": Scripted(None),
        "document.extract": Scripted(ExtractedFields(values={"total": "12"})),
        "document.escalate": Scripted(None),
        "t.check": Scripted(Status(done=False)),
    }
    flows = [_documents(), _documents("0.1.0"), poll_flow(), await_flow()]
    async with FlowHarness.open(
        flows,
        database_url=database_url,
        migrate=False,
        substitutes=substitutes,
        start=real_now - timedelta(minutes=20),
    ) as h:

        async def document(doc: str, version: str = "1.0.0") -> str:
            started = await h.start(
                "document.process",
                {"documentId": doc, "pages": 1},
                version=version,
                idempotency_key=f"seed-{doc}-{version}",
            )
            return started.instance.id

        seeded.completed = await document("done-1")
        await h.wait_until(lambda i: i.state.ended, seeded.completed)
        seeded.failed = await document("fail-1")
        await h.wait_until(lambda i: i.state.ended, seeded.failed)
        seeded.cancelled = await document("cancel-1")
        await h.engine.cancel(seeded.cancelled)
        for n in range(3):
            seeded.overdue.append(await document(f"late-{n}"))
        await h.advance_to_next_wake(seeded.overdue[0])  # one has a second attempt
        stuck = await document("stuck-1")
        lease = h.engine.lease
        claim = await h.store.runs.claim(stuck, "gone-node", h.clock.now(), h.clock.now() + lease)
        assert claim is not None
        seeded.stuck = stuck
        seeded.unknown_version = await document("old-1", "0.1.0")
        seeded.unknown_flow = (
            await h.start("t.poll", {"orderId": "o-1"}, idempotency_key="seed-t-poll")
        ).instance.id
        seeded.awaiting_signal = (
            await h.start("t.await", {"orderId": "o-2"}, idempotency_key="seed-t-await")
        ).instance.id
        # the newest: their wakes are still ahead at ``now`` when ``now`` is near the clock
        h.clock.set(real_now - timedelta(seconds=1))
        for n in range(2):
            seeded.parked.append(await document(f"wait-{n}"))
    return seeded
