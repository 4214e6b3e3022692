"""The sample flows, served by default (``FLOWPARK_FLOWS=samples``).

* :mod:`samples.document_processing`: ``document.process``, a parked poll on an OCR provider.
* :mod:`samples.job_polling`: ``job.await``, a heartbeating capability on a job runner.
* :mod:`samples.fakes`: the fake OCR and job providers they call over HTTP.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.flows import Flow
    from app.runtime.loading import Deps

__all__ = ["flows"]


def flows(deps: Deps) -> list[Flow]:
    """The two sample flows (with their fake providers on a serving node)."""
    from samples.registry import flows as sample_flows

    return sample_flows(deps)
