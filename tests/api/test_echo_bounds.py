"""What a problem echoes of a request is bounded, on both stores: a huge signal, flow,
stream or route name, instance id, header value or body key is answered as its first 100
characters and an ellipsis, never whole."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from flowpark.api.problems import problem
from flowpark.api.streams import _cursor
from flowpark.errors import SHOWN_CHARS, ErrorCode, InputInvalid, shown
from tests.api.operator_support import Operated, operated
from tests.support.api import assert_problem

HUGE = "n" * 5000
CUT = HUGE[:SHOWN_CHARS] + "…"


@pytest.fixture
async def op(store_url: str) -> AsyncIterator[Operated]:
    async with operated(store_url) as running:
        yield running


def assert_bounded(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    body = assert_problem(resp, status, code)
    assert HUGE[: SHOWN_CHARS + 1] not in resp.text, resp.text[:300]
    assert len(body["detail"]) < 400, body["detail"]
    return body


def test_shown_keeps_a_short_value_and_cuts_a_long_one() -> None:
    assert shown("ocr.completed") == "ocr.completed"
    assert shown("x" * SHOWN_CHARS) == "x" * SHOWN_CHARS
    assert shown(HUGE) == CUT and len(CUT) == SHOWN_CHARS + 1
    assert shown(12345, 3) == "123…"
    with pytest.raises(InputInvalid) as refused:  # a stream's Last-Event-ID
        _cursor(HUGE, None)
    assert CUT in refused.value.message and HUGE[: SHOWN_CHARS + 1] not in refused.value.message


async def test_every_echoed_name_is_cut(op: Operated) -> None:
    inst = (await op.h.start("t.await", {"order_id": "o-huge"})).instance
    base = f"/api/v1/instances/{inst.id}"
    async with op.client() as client:
        signal = await client.post(f"{base}/signals/{HUGE}", json={"job_id": "j"})
        flow = await client.get(f"/api/v1/flows/{HUGE}")
        # the query takes at most 200 characters: those are cut too
        version = await client.get("/api/v1/flows/t.await", params={"version": HUGE[:200]})
        stream = await client.get(f"{base}/streams/{HUGE}")
        route = await client.get(f"/api/v1/nowhere/{HUGE}")
        instance = await client.get(f"/api/v1/instances/{HUGE}")
        key = await client.post(
            "/api/v1/instances/actions", json={"action": "wake", "filter": {HUGE: 1}}
        )
    assert assert_bounded(signal, 404, "signal_not_declared")["signal"] == CUT
    assert assert_bounded(flow, 404, "flow_not_found")["flow"] == CUT
    assert assert_bounded(version, 404, "flow_not_found")["version"] == CUT
    assert assert_bounded(stream, 404, "stream_not_declared")["stream"] == CUT
    assert shown(f"/api/v1/nowhere/{HUGE}") in assert_bounded(route, 404, "not_found")["detail"]
    assert assert_bounded(instance, 404, "instance_not_found")["instanceId"] == CUT
    problem = assert_bounded(key, 422, "input_invalid")
    assert ["body", "filter", CUT] in [e["loc"] for e in problem["errors"]]


def test_a_problem_bounds_any_text_a_raise_site_left_long() -> None:
    answer = problem(ErrorCode.NO_BUDGET, "d" * 5000, flow=HUGE, tries=3)
    body = json.loads(bytes(answer.body))
    assert len(body["detail"]) == 2001 and body["detail"].endswith("…")
    assert len(body["flow"]) == 501 and body["tries"] == 3
