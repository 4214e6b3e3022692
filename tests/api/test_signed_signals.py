"""Signed signal webhooks: with ``FLOWPARK_SIGNAL_SECRETS`` holding ``ocr``, the sample's
``ocr.completed`` route takes a Standard Webhooks signature instead of a bearer token.

A real HTTP client (httpx, no ``Authorization`` header) signs with the ``standardwebhooks``
library: the signed signal completes the document; a wrong secret, a stale timestamp and
missing headers are 401 ``signature_invalid`` with nothing stored; a replayed
``webhook-id`` stores nothing new.
"""

from __future__ import annotations

import base64
import json
import shutil
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.support.api import DOCUMENTS, start_document, wait_for_state
from tests.support.server import LiveServer, live_server

SECRET = "whsec_" + base64.b64encode(b"the-ocr-providers-shared-secret!").decode()
WRONG = "whsec_" + base64.b64encode(b"not-the-secret-the-node-holds!!!").decode()
MANY_PAGES = 10_000


@pytest.fixture(scope="module")
def signed(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    path = tmp_path_factory.mktemp("signed") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", signal_secrets={"ocr": SECRET}) as server:
        yield server


def signed_headers(
    body: str, *, secret: str = SECRET, msg_id: str | None = None, at: datetime | None = None
) -> dict[str, str]:
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    at = at or datetime.now(UTC)
    return {
        "content-type": "application/json",
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, at, body),
    }


async def _parked_document(client: httpx.AsyncClient) -> tuple[str, str]:
    doc_id = f"doc-{uuid.uuid4().hex[:12]}"
    resp = await start_document(client, doc_id, pages=MANY_PAGES)
    assert resp.status_code == 202, resp.text
    instance_id = resp.json()["instanceId"]
    jobs = (await client.get("/fake/ocr/jobs")).json()
    job_id = next(j["jobId"] for j in jobs if j["documentId"] == doc_id)
    assert (await client.post(f"/fake/ocr/jobs/{job_id}/complete")).status_code == 200
    return instance_id, job_id


async def _signals(client: httpx.AsyncClient, instance_id: str) -> list[dict[str, Any]]:
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    return view["signals"]  # type: ignore[no-any-return]


async def test_a_signed_signal_without_a_bearer_token_completes_a_document(
    signed: LiveServer,
) -> None:
    async with signed.client() as client, httpx.AsyncClient(base_url=signed.base_url) as hook:
        instance_id, job_id = await _parked_document(client)
        body = json.dumps({"jobId": job_id, "status": "completed"})
        url = f"{DOCUMENTS}/{instance_id}/signals/ocr.completed"
        headers = signed_headers(body)
        assert "authorization" not in {k.lower() for k in hook.headers}

        resp = await hook.post(url, content=body, headers=headers)
        assert resp.status_code == 202, resp.text
        assert resp.json()["created"] is True

        view = await wait_for_state(client, instance_id, timeout=10)
        assert view["state"] == "completed", view["error"]
        assert [r["capabilityId"] for r in view["journal"]].count("ocr.completed") == 1

        # the same delivery again (a provider's retry): nothing new stored
        again = await hook.post(url, content=body, headers=headers)
        assert again.status_code == 202, again.text
        assert again.json()["created"] is False
        assert again.json()["signalId"] == resp.json()["signalId"]
        assert len(await _signals(client, instance_id)) == 1


@pytest.mark.parametrize(
    "case", ["wrong secret", "stale timestamp", "no signature", "bearer only", "tampered body"]
)
async def test_a_bad_signature_is_401_signature_invalid_and_stores_nothing(
    signed: LiveServer, case: str
) -> None:
    async with signed.client() as client, httpx.AsyncClient(base_url=signed.base_url) as hook:
        instance_id, job_id = await _parked_document(client)
        body = json.dumps({"jobId": job_id, "status": "completed"})
        url = f"{DOCUMENTS}/{instance_id}/signals/ocr.completed"
        headers = {
            "wrong secret": lambda: signed_headers(body, secret=WRONG),
            "stale timestamp": lambda: signed_headers(
                body, at=datetime.now(UTC) - timedelta(minutes=10)
            ),
            "no signature": lambda: {"content-type": "application/json"},
            "bearer only": lambda: dict(client.headers) | {"content-type": "application/json"},
            "tampered body": lambda: signed_headers(body.replace("completed", "failed")),
        }[case]()

        resp = await hook.post(url, content=body, headers=headers)

        assert resp.status_code == 401, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["code"] == "signature_invalid"
        assert SECRET not in resp.text
        assert await _signals(client, instance_id) == []
        view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
        assert view["state"] == "suspended"


async def test_the_provider_route_finds_a_document_by_the_job_id_its_upload_recorded(
    signed: LiveServer,
) -> None:
    async with signed.client() as client, httpx.AsyncClient(base_url=signed.base_url) as hook:
        instance_id, job_id = await _parked_document(client)
        url = "/api/v1/providers/ocr/signals/ocr.completed"
        unknown = json.dumps({"jobId": f"{job_id}-not-ours", "status": "completed"})
        resp = await hook.post(url, content=unknown, headers=signed_headers(unknown))
        assert resp.status_code == 404, resp.text
        assert resp.json()["code"] == "correlation_key_unknown"
        assert await _signals(client, instance_id) == []

        body = json.dumps({"jobId": job_id, "status": "completed"})
        resp = await hook.post(url, content=body, headers=signed_headers(body))
        assert resp.status_code == 202, resp.text
        assert resp.json()["instanceId"] == instance_id
        view = await wait_for_state(client, instance_id, timeout=10)
        assert view["state"] == "completed", view["error"]
