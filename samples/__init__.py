"""The sample flows, served by default (``FLOWPARK_FLOWS=samples``).

* :mod:`flowpark.samples.document_processing`: ``document.process``, a parked poll on an OCR
  provider.
* :mod:`flowpark.samples.job_polling`: ``job.await``, a heartbeating capability on a job runner.
* :mod:`flowpark.samples.fakes`: the fake OCR and job providers they call over HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowpark.flows import Flow
    from flowpark.runtime.loading import Deps

__all__ = ["flows"]


def flows(deps: Deps) -> list[Flow]:
    """The two sample flows (with their fake providers on a serving node)."""
    from flowpark.samples.registry import flows as sample_flows

    return sample_flows(deps)
