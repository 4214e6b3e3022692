"""A signed delivery's id is unique per flow and signal across instances (both stores):
its replay to the instance it reached answers the first signal and stores nothing new;
its replay to another instance - the same signed bytes, so the signature still verifies -
is 409 ``signal_delivery_replayed`` and stores nothing there."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from tests.api.test_signed_signals import SECRET, _signals, signed_headers
from tests.support.api import DOCUMENTS, assert_problem, start_document
from tests.support.server import LiveServer, live_server

MANY_PAGES = 10_000


@pytest.fixture
def signed(store_url: str) -> Iterator[LiveServer]:
    with live_server(store_url, signal_secrets={"ocr": SECRET}) as server:
        yield server


async def test_a_delivery_replayed_to_another_instance_is_refused_and_stores_nothing(
    signed: LiveServer,
) -> None:
    async with signed.client() as client, signed.client(token=None) as hook:
        first, second = [
            (await start_document(client, pages=MANY_PAGES)).json()["instanceId"] for _ in range(2)
        ]
        body = json.dumps({"jobId": "job-replayed", "status": "completed"})
        headers = signed_headers(body, msg_id=f"msg_{uuid.uuid4().hex}")
        to_first = await hook.post(
            f"{DOCUMENTS}/{first}/signals/ocr.completed", content=body, headers=headers
        )
        again = await hook.post(
            f"{DOCUMENTS}/{first}/signals/ocr.completed", content=body, headers=headers
        )
        to_second = await hook.post(
            f"{DOCUMENTS}/{second}/signals/ocr.completed", content=body, headers=headers
        )
        assert to_first.status_code == 202, to_first.text
        assert again.status_code == 202 and again.json()["created"] is False, again.text
        problem = assert_problem(to_second, 409, "signal_delivery_replayed")
        assert "job-replayed" not in to_second.text and SECRET not in to_second.text
        assert problem["instanceId"] == second
        assert await _signals(client, second) == []
        assert len(await _signals(client, first)) == 1
        # a new delivery id to an instance that does not exist: 404, and nothing recorded,
        # so it then reaches the second instance as any delivery would
        fresh = signed_headers(body, msg_id=f"msg_{uuid.uuid4().hex}")
        unknown = await hook.post(
            f"{DOCUMENTS}/{uuid.uuid4()}/signals/ocr.completed", content=body, headers=fresh
        )
        assert_problem(unknown, 404, "instance_not_found")
        ok = await hook.post(
            f"{DOCUMENTS}/{second}/signals/ocr.completed", content=body, headers=fresh
        )
        assert ok.status_code == 202, ok.text
