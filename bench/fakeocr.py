"""The fake OCR provider of ``flowpark.samples.fakes`` as the benchmarks run it: in its own process
(``python -m bench.serve --fake-ocr``, uvicorn on loopback).

The provider is a third party: running it in its own process keeps its in-memory jobs out
of the flowpark node's RSS and its CPU out of the node's event loop.

With ``--pending-reads K`` a job takes zero time per page but answers ``pending`` to its
first K status reads and ``completed`` from then on, so a flow needs exactly K+1 status
polls. Without it, jobs stay pending until the ``complete`` route is called.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from bench.compat import name_of

FakeOcrService = name_of("flowpark.samples.fakes", "FakeOcrService")
OcrJobView = name_of("flowpark.samples.fakes.ocr", "OcrJobView")
ocr_text = name_of("flowpark.samples.fakes.ocr", "ocr_text")

#: pages of the completed job an unknown job id answers as (``--unknown-completed``)
CLONED_PAGES = 3


__all__ = ["CountingOcr"]


class CountingOcr(FakeOcrService):
    """A fake OCR whose jobs complete on their (K+1)-th status read."""

    def __init__(self, pending_reads: int | None, *, unknown_completed: bool = False) -> None:
        super().__init__(per_page=timedelta(days=3650))
        self.pending_reads = pending_reads
        self.unknown_completed = unknown_completed
        self.reads: Counter[str] = Counter()

    def get(self, job_id: str) -> OcrJobView:
        if self.unknown_completed and job_id not in self._jobs:
            return OcrJobView(
                job_id=job_id,
                document_id=f"cloned-{job_id}",
                pages=CLONED_PAGES,
                status="completed",
                text=ocr_text(CLONED_PAGES),
            )
        if self.pending_reads is not None:
            self.reads[job_id] += 1
            if self.reads[job_id] > self.pending_reads:
                job = self._settled(job_id)
                if job.status == "pending":
                    self._mark_completed(job)
        return super().get(job_id)
