"""document.process over HTTP on a real server: start, park in one row, complete.

The session server (``live``) runs the samples with a 0.05 s/page fake OCR, a 0.2 s sweep
and no OCR webhook, so a document finishes through the parked poll alone.
"""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta

import httpx

from flowpark.samples.document_processing import Waits
from tests.support.api import (
    DOCUMENTS,
    all_events,
    instant,
    start_document,
    wait_for_state,
)
from tests.support.db import query, sqlite_path
from tests.support.server import LiveServer

#: The first wait of the OCR poll's backoff, after jitter: [initial * (1 - jitter), initial].
FIRST_WAIT = (Waits.OCR_POLLING.initial * (1 - Waits.OCR_POLLING.jitter), Waits.OCR_POLLING.initial)
JOURNAL_FIELDS = {"stepId", "scope", "capabilityId", "outcome"}
#: Enough pages that the fake OCR (0.05 s/page) stays pending for the whole test.
MANY_PAGES = 10_000


async def test_start_answers_202_with_the_instance_and_its_location(
    client: httpx.AsyncClient, doc_id: str, key: str
) -> None:
    resp = await client.post(
        DOCUMENTS,
        json={"documentId": doc_id, "pages": MANY_PAGES},
        headers={"Idempotency-Key": key},
    )

    assert resp.status_code == 202, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert body["status"] == "suspended"
    instance_id = body["instanceId"]
    assert uuid.UUID(instance_id).version == 7
    assert set(body) <= {"instanceId", "status", "awaiting"}
    assert resp.headers["location"].endswith(f"/api/v1/instances/{instance_id}")
    # the Location resolves (relative to the request URL when relative)
    followed = await client.get(str(resp.url.join(resp.headers["location"])))
    assert followed.status_code == 200
    assert followed.json()["instanceId"] == instance_id


async def test_a_waiting_document_is_one_suspended_row_with_a_wake_and_no_lease(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str
) -> None:
    before = datetime.now(UTC)
    resp = await start_document(client, doc_id, pages=MANY_PAGES)
    instance_id = resp.json()["instanceId"]

    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()

    assert view["instanceId"] == instance_id
    assert (view["flow"], view["version"]) == ("document.process", "1.0.0")
    assert view["state"] == "suspended"
    assert view["lease"] is None
    assert view["result"] is None and view["error"] is None
    assert view["input"] == {
        "documentId": doc_id,
        "contentType": "application/pdf",
        "pages": MANY_PAGES,
    }
    created = instant(view["createdAt"])
    assert before - timedelta(seconds=1) <= created <= datetime.now(UTC)
    wake_at = instant(view["wakeAt"])
    # parked after attempt 0 until the backoff's first (jittered) wait has passed
    status_rows = [r for r in view["journal"] if r["capabilityId"] == "ocr.status"]
    assert len(status_rows) == 1
    attempt0 = instant(status_rows[0]["startedAt"])
    low, high = FIRST_WAIT
    assert attempt0 + low - timedelta(milliseconds=50) <= wake_at
    assert wake_at <= attempt0 + high + timedelta(seconds=1)
    assert isinstance(view["wakeStepId"], int)
    assert view["wakeScope"] == 1  # the next attempt
    assert view["tries"] == 2
    assert instant(view["deadlineAt"]) == created + Waits.DEADLINE

    journal = view["journal"]
    for row in journal:
        assert set(row) >= JOURNAL_FIELDS, row
        assert row["outcome"] == "success"
    assert [(r["kind"], r["capabilityId"], r["scope"]) for r in journal] == [
        ("deadline", "retry.total", 0),  # the upload's retry window, before its first try
        ("step", "ocr.upload", 0),
        ("deadline", "poll.budget", 0),  # the budget, stored before attempt 0's call
        ("deadline", "retry.total", 0),  # attempt 0's retry window
        ("step", "ocr.status", 0),
    ]
    assert len({r["stepId"] for r in journal}) == 3
    budget = view["budget"]
    assert budget["kind"] == "poll.budget"
    assert budget["stepId"] == journal[2]["stepId"] == view["wakeStepId"]
    assert instant(budget["startedAt"]) == instant(journal[2]["startedAt"]) <= attempt0
    assert instant(budget["endsAt"]) == instant(budget["startedAt"]) + Waits.OCR_BUDGET
    assert 0 <= budget["usedRatio"] < 0.5

    # what is stored: one row, suspended, wake set, no lease
    rows = query(
        live.database_url,
        "SELECT state, wake_at, wake_step_id, wake_scope, lease_owner, "
        "lease_expires_at FROM flow_instance WHERE id = ?",
        (instance_id,),
    )
    assert len(rows) == 1
    state, raw_wake, wake_step, wake_scope, lease_owner, lease_expires = rows[0]
    assert state == "suspended"
    assert raw_wake is not None
    assert (wake_step, wake_scope) == (view["wakeStepId"], view["wakeScope"])
    assert lease_owner is None and lease_expires is None


async def test_a_document_completes_through_the_parked_poll(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    # 20 pages at 0.05 s/page (a 1 s job): attempt 0, right after the upload, sees
    # "pending" even on a loaded machine; attempt 1 (after 2.5-5 s) sees "completed"
    resp = await start_document(client, doc_id, pages=20)
    assert resp.status_code == 202, resp.text
    instance_id = resp.json()["instanceId"]
    assert resp.json()["status"] == "suspended"  # answered once attempt 0 parked it
    parked = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    # on a loaded machine attempt 1 may be done already; else the parked row names its wake
    first_wake = instant(parked["wakeAt"]) if parked["state"] == "suspended" else None

    view = await wait_for_state(
        client, instance_id, timeout=Waits.OCR_POLLING.initial.total_seconds() + 15
    )

    assert view["state"] == "completed", view["error"]
    assert view["result"] == {"documentId": doc_id, "fieldCount": 20}
    assert view["error"] is None
    assert view["wakeAt"] is None and view["lease"] is None
    assert view["budget"] is None  # ended: no wait runs
    journal = view["journal"]
    caps = [r["capabilityId"] for r in journal]
    assert caps.count("ocr.upload") == 1
    assert caps.count("document.extract") == 1
    polls = [r for r in journal if r["capabilityId"] == "ocr.status"]
    assert [r["scope"] for r in polls] == list(range(len(polls)))
    assert len(polls) >= 2
    assert len({r["stepId"] for r in polls}) == 1
    assert all(r["outcome"] == "success" for r in journal)
    # the journal is in order: upload, the polls, extract
    assert caps.index("ocr.upload") < caps.index("ocr.status")
    assert caps.index("document.extract") > max(i for i, c in enumerate(caps) if c == "ocr.status")
    # attempt 1 ran when the parked row was due, not before
    if first_wake is None:
        first_wake = instant(view["attempts"][1]["scheduledAt"])
    assert instant(polls[1]["startedAt"]) >= first_wake
    assert instant(polls[1]["startedAt"]) <= first_wake + timedelta(seconds=5)

    events = [e for e in await all_events(client) if e["name"] == "document.processed"]
    mine = [e for e in events if e["payload"]["documentId"] == doc_id]
    assert len(mine) == 1
    assert mine[0]["payload"] == {"documentId": doc_id, "fieldCount": 20}


async def test_the_ocr_webhook_signal_ends_the_wait_without_another_poll(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    resp = await start_document(client, doc_id, pages=MANY_PAGES)
    instance_id = resp.json()["instanceId"]
    parked = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    jobs = (await client.get("/fake/ocr/jobs")).json()
    job_id = next(j["jobId"] for j in jobs if j["documentId"] == doc_id)
    done = await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    assert done.status_code == 200, done.text

    # what the provider's webhook sends
    signal = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed",
        json={"jobId": job_id, "status": "completed"},
        headers={"Idempotency-Key": f"ocr-{job_id}"},
    )
    assert signal.status_code == 202, signal.text
    view = await wait_for_state(client, instance_id, timeout=10)

    assert view["state"] == "completed", view["error"]
    assert view["result"] == {"documentId": doc_id, "fieldCount": MANY_PAGES}
    journal = view["journal"]
    signal_rows = [r for r in journal if r["capabilityId"] == "ocr.completed"]
    assert len(signal_rows) == 1
    assert signal_rows[0]["stepId"] == parked["wakeStepId"]
    assert [r["scope"] for r in journal if r["capabilityId"] == "ocr.status"] == [0]
    assert [r["capabilityId"] for r in journal].count("document.extract") == 1


async def test_events_and_reviews_use_camel_case_fields(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    resp = await start_document(client, doc_id, pages=MANY_PAGES)
    instance_id = resp.json()["instanceId"]
    jobs = (await client.get("/fake/ocr/jobs")).json()
    job_id = next(j["jobId"] for j in jobs if j["documentId"] == doc_id)
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    await client.post(f"{DOCUMENTS}/{instance_id}/signals/ocr.completed", json={"jobId": job_id})
    await wait_for_state(client, instance_id, ("completed",), timeout=10)

    event = next(e for e in await all_events(client) if e["payload"]["documentId"] == doc_id)
    assert event["instanceId"] == instance_id
    assert event["name"] == "document.processed"
    instant(event["createdAt"])
    assert not [k for k in event if "_" in k], event


async def test_reviews_use_camel_case_fields(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str
) -> None:
    # the budget path that fills the queue runs on the virtual clock elsewhere; here a
    # stored item is enough to pin the HTTP shape
    review_id = uuid.uuid4().hex
    with closing(sqlite3.connect(sqlite_path(live.database_url), timeout=30)) as conn:
        conn.execute(
            "INSERT INTO flow_review_item (id, instance_id, subject, reason, details, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?)",
            (
                review_id,
                "instance-x",
                doc_id,
                "late",
                '{"jobId": "j"}',
                "2026-01-02 03:04:05.000000",
            ),
        )
        conn.commit()

    resp = await client.get("/api/v1/reviews", params={"limit": 1000})

    assert resp.status_code == 200
    item = next(i for i in resp.json() if i["id"] == review_id)
    assert item["instanceId"] == "instance-x"
    assert item["subject"] == doc_id and item["reason"] == "late"
    assert item["details"] == {"jobId": "j"}
    assert instant(item["createdAt"]) == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert not [k for k in item if "_" in k], item


async def test_openapi_documents_the_trigger(client: httpx.AsyncClient) -> None:
    spec = (await client.get("/openapi.json")).json()
    assert "post" in spec["paths"][DOCUMENTS]
    assert "/api/v1/instances/{instance_id}" in spec["paths"]
    docs = await client.get("/docs")
    assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]
