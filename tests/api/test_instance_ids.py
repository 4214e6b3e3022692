"""Instance ids in paths on both stores: an id that is not a canonical UUID string names no
instance, on every route that takes one, answered exactly as an unknown id (404
``instance_not_found``), never a 500 (PostgreSQL stores ids as ``uuid``; SQLite as text).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.api import DOCUMENTS, assert_problem, start_document
from tests.support.server import live_server

SSE = {"Accept": "text/event-stream"}

#: Ids that cannot name an instance. ``{known}`` is an existing instance's id, which
#: PostgreSQL's uuid input would read as that instance in every other spelling.
NOT_IDS = [
    "not-a-uuid",
    "{known_upper}",
    "{known_hex}",
    "{{{known}}}",
    "urn:uuid:{known}",
    "{known} ",
    "{known_short}",
    "01a22fac-b7c5-7d5a-b879-c2ae65cc796g",
    "0" * 36,
    "x" * 5000,
]


def _routes(instance_id: str) -> list[tuple[str, str, dict[str, object]]]:
    """Every route family that takes an instance id in its path."""
    signal: dict[str, object] = {"json": {"jobId": "j"}}
    return [
        ("GET", f"/api/v1/instances/{instance_id}", {}),
        ("POST", f"/api/v1/instances/{instance_id}/cancel", {}),
        ("POST", f"/api/v1/instances/{instance_id}/signals/ocr.completed", signal),
        ("POST", f"{DOCUMENTS}/{instance_id}/signals/ocr.completed", signal),
        ("GET", f"/api/v1/instances/{instance_id}/streams/JobProgress", {}),
        ("GET", f"/api/v1/instances/{instance_id}/streams/JobProgress", {"headers": SSE}),
    ]


@pytest.fixture
async def client(store_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client on a server of its own over ``store_url`` (SQLite and PostgreSQL)."""
    with live_server(store_url) as server:
        async with server.client() as http:
            yield http


async def _answer(
    client: httpx.AsyncClient, method: str, path: str, kwargs: dict[str, object]
) -> tuple[int, str]:
    resp = await client.request(method, path, **kwargs)  # type: ignore[arg-type]
    body = assert_problem(resp, resp.status_code)
    return resp.status_code, body["code"]


async def test_a_non_uuid_id_is_answered_as_an_unknown_id_on_every_route(
    client: httpx.AsyncClient,
) -> None:
    started = await start_document(client, pages=500)
    assert started.status_code == 202, started.text
    known = started.json()["instanceId"]
    assert str(uuid.UUID(known)) == known
    spellings = {
        "known": known,
        "known_upper": known.upper(),
        "known_hex": uuid.UUID(known).hex,
        "known_short": known[:-1],
    }
    unknown = str(uuid.uuid4())
    for method, path, kwargs in _routes(unknown):
        assert await _answer(client, method, path, dict(kwargs)) == (404, "instance_not_found"), (
            path
        )
    for pattern in NOT_IDS:
        not_id = pattern.format(**spellings)
        for method, path, kwargs in _routes(not_id):
            assert await _answer(client, method, path, dict(kwargs)) == (
                404,
                "instance_not_found",
            ), (method, path[:120])
    # a path holding a control character is refused before any look-up (422)
    for method, path, kwargs in _routes("%00"):
        assert await _answer(client, method, path, dict(kwargs)) == (422, "input_invalid"), path
    # the instance itself is untouched, and still found by its own id
    view = (await client.get(f"/api/v1/instances/{known}")).json()
    assert view["instanceId"] == known and view["state"] == "suspended"
    assert view["signals"] == []
