"""Real documents for the console's browser tests and screenshots, made over HTTP.

:func:`populate` talks to a running ``flowpark serve`` (samples mounted, sweep off, a slow
fake OCR) the way its users do: it starts documents, which call the OCR provider and park
on their poll; it ends one through the ``ocr.completed`` signal after the provider finished
(completed) and one after the provider's job was cancelled (failed, ``document.ocr_failed``);
then it waits until a parked document's wake is overdue (nothing sweeps).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.eventually import eventually_sync

__all__ = ["Populated", "populate"]

DOCUMENTS = "/api/v1/documents"


@dataclass
class Populated:
    """Instance ids by what happened to them."""

    parked: list[str] = field(default_factory=list)
    completed: str = ""
    failed: str = ""


def _start(http: httpx.Client, document_id: str, pages: int) -> str:
    resp = http.post(
        DOCUMENTS,
        json={"documentId": document_id, "pages": pages},
        headers={"Idempotency-Key": f"{document_id}-{uuid.uuid4().hex}"},
    )
    assert resp.status_code == 202, resp.text
    body: dict[str, Any] = resp.json()
    assert body["status"] == "suspended", body
    return str(body["instanceId"])


def _job_of(http: httpx.Client, document_id: str) -> str:
    jobs: list[dict[str, str]] = http.get("/fake/ocr/jobs").json()
    return next(j["jobId"] for j in jobs if j["documentId"] == document_id)


def _signal_done(http: httpx.Client, instance_id: str, job_id: str) -> dict[str, Any]:
    resp = http.post(f"{DOCUMENTS}/{instance_id}/signals/ocr.completed", json={"jobId": job_id})
    assert resp.status_code == 202, resp.text
    view: dict[str, Any] = resp.json()
    return view


def populate(
    base_url: str, token: str, *, parked: int = 3, overdue_seconds: float = 1.0
) -> Populated:
    """Make the documents on the server at ``base_url``.

    Args:
        base_url: the server (its sweep off, its fake OCR slow enough to stay pending).
        token: an API token with the start and signal scopes.
        parked: how many documents to leave parked.
        overdue_seconds: how late a wake must be for the console to call it overdue;
            returns once at least one parked document is that late.

    Raises:
        AssertionError: the server did not answer as expected, or no wake became overdue
            within 30 s.
    """
    out = Populated()
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30.0) as http:
        tag = uuid.uuid4().hex[:6]
        done_doc = f"invoice-{tag}-done"
        out.completed = _start(http, done_doc, 1)
        job = _job_of(http, done_doc)
        assert http.post(f"/fake/ocr/jobs/{job}/complete").status_code == 200
        _signal_done(http, out.completed, job)

        failed_doc = f"invoice-{tag}-unreadable"
        out.failed = _start(http, failed_doc, 2)
        job = _job_of(http, failed_doc)
        assert http.post(f"/fake/ocr/jobs/{job}/cancel").status_code == 200
        _signal_done(http, out.failed, job)

        for n in range(parked):
            out.parked.append(_start(http, f"invoice-{tag}-{n}", 40))

        def ended(instance_id: str, state: str) -> None:
            view = http.get(f"/api/v1/instances/{instance_id}").json()
            assert view["state"] == state, view

        eventually_sync(lambda: ended(out.completed, "completed"), timeout=30)
        eventually_sync(lambda: ended(out.failed, "failed"), timeout=30)

        def overdue() -> None:
            resp = http.get("/api/v1/instances", params={"overdue": overdue_seconds})
            assert resp.status_code == 200, resp.text
            assert resp.json()["instances"], "no wake is overdue yet"

        eventually_sync(overdue, timeout=30, interval=0.2, what="an overdue wake")
    return out
