"""Idempotency-Key on POST /api/v1/documents: same key and body -> same instance, one row;
another body -> 422 ``idempotency_key_reused``; no key -> 400 ``idempotency_key_missing``."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.support.api import DOCUMENTS, assert_problem
from tests.support.db import count_instances
from tests.support.server import LiveServer

PAGES = 10_000  # stays pending: nothing moves while the test looks


async def test_same_key_and_body_returns_the_same_instance_and_creates_one(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str, key: str
) -> None:
    body = {"documentId": doc_id, "pages": PAGES}
    first = await client.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key})
    second = await client.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key})

    assert first.status_code == 202, first.text
    assert second.status_code == 202, second.text
    assert second.json()["instanceId"] == first.json()["instanceId"]
    assert second.json()["status"] == "suspended"
    assert second.headers["location"] == first.headers["location"]
    assert count_instances(live.database_url, doc_id) == 1


async def test_same_body_written_differently_is_the_same_request(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str, key: str
) -> None:
    first = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": PAGES}, headers={"Idempotency-Key": key}
    )
    reordered = json.dumps({"pages": PAGES, "documentId": doc_id}, indent=2).encode()
    second = await client.post(
        DOCUMENTS,
        content=reordered,
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
    )

    assert second.status_code == 202, second.text
    assert second.json()["instanceId"] == first.json()["instanceId"]
    assert count_instances(live.database_url, doc_id) == 1


async def test_concurrent_repeats_of_one_key_create_one_instance(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str, key: str
) -> None:
    body = {"documentId": doc_id, "pages": PAGES}
    answers = await asyncio.gather(
        *(client.post(DOCUMENTS, json=body, headers={"Idempotency-Key": key}) for _ in range(10))
    )

    assert [a.status_code for a in answers] == [202] * 10, [a.text for a in answers]
    assert len({a.json()["instanceId"] for a in answers}) == 1
    assert count_instances(live.database_url, doc_id) == 1


async def test_same_key_with_another_body_is_a_422_problem(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str, key: str
) -> None:
    first = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": PAGES}, headers={"Idempotency-Key": key}
    )
    assert first.status_code == 202

    other = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": PAGES - 1}, headers={"Idempotency-Key": key}
    )

    assert_problem(other, 422, "idempotency_key_reused")
    assert count_instances(live.database_url, doc_id) == 1
    # the key still answers the first request
    again = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": PAGES}, headers={"Idempotency-Key": key}
    )
    assert again.json()["instanceId"] == first.json()["instanceId"]


async def test_another_key_starts_another_instance(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str
) -> None:
    body = {"documentId": doc_id, "pages": PAGES}
    one = await client.post(DOCUMENTS, json=body, headers={"Idempotency-Key": f"{doc_id}-1"})
    two = await client.post(DOCUMENTS, json=body, headers={"Idempotency-Key": f"{doc_id}-2"})

    assert one.status_code == two.status_code == 202
    assert one.json()["instanceId"] != two.json()["instanceId"]
    assert count_instances(live.database_url, doc_id) == 2


@pytest.mark.parametrize("headers", [{}, {"Idempotency-Key": ""}], ids=["absent", "empty"])
async def test_without_a_key_it_is_a_400_problem_and_nothing_starts(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str, headers: dict[str, str]
) -> None:
    resp = await client.post(DOCUMENTS, json={"documentId": doc_id, "pages": 1}, headers=headers)

    assert_problem(resp, 400, "idempotency_key_missing")
    assert count_instances(live.database_url, doc_id) == 0


async def test_an_overlong_key_is_a_400_problem(
    client: httpx.AsyncClient, live: LiveServer, doc_id: str
) -> None:
    resp = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": 1}, headers={"Idempotency-Key": "k" * 5000}
    )

    assert_problem(resp, 400)
    assert count_instances(live.database_url, doc_id) == 0


async def test_an_invalid_body_does_not_use_up_the_key(
    client: httpx.AsyncClient, doc_id: str, key: str
) -> None:
    bad = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": "many"}, headers={"Idempotency-Key": key}
    )
    assert_problem(bad, 422, "input_invalid")

    good = await client.post(
        DOCUMENTS, json={"documentId": doc_id, "pages": PAGES}, headers={"Idempotency-Key": key}
    )
    assert good.status_code == 202, good.text
