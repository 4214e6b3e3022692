"""The operator's list and counts (``GET /api/v1/instances``, ``/instances/counts``) on
both stores: every filter, keyset pagination under concurrent starts, counts."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.api.operator_support import FAILING, Operated, operated
from tests.support.api import assert_problem, instant

LIST = "/api/v1/instances"


@dataclass
class Population:
    """One instance in each situation, started one second apart (a first, f last)."""

    op: Operated
    ids: dict[str, str]
    t0: datetime

    def names(self, rows: list[dict[str, Any]]) -> list[str]:
        by_id = {v: k for k, v in self.ids.items()}
        return [by_id.get(r["instanceId"], r["instanceId"]) for r in rows]


@pytest.fixture
async def population(store_url: str) -> AsyncIterator[Population]:
    async with operated(store_url) as op:
        h = op.h
        t0 = h.clock.now()
        ids: dict[str, str] = {}

        async def start(name: str, flow: str, order: str, **kw: Any) -> None:
            ids[name] = (await h.start(flow, {"order_id": order}, **kw)).instance.id
            h.clock.advance(timedelta(seconds=1))

        await start("poll", "t.poll", "o-poll", version="1.0.0", instance_key="key-poll")
        await start("retry", "t.poll", f"{FAILING}1", version="1.0.0")
        await start("signal", "t.await", "o-signal")
        await start("deadline", "t.poll", "o-deadline", version="2.0.0")
        await start("cancelled", "t.poll", "o-cancel", version="1.0.0")
        await h.engine.cancel(ids["cancelled"])
        await start("completed", "t.await", "o-done")
        await h.engine.deliver(ids["completed"], "t.ready", {"job_id": "j"})
        ids["stuck"] = await op.stuck()
        # t0+40s: the retry (due t0+11s) and the deadline (t0+33s) wakes have passed
        h.clock.set(t0 + timedelta(seconds=40))
        yield Population(op, ids, t0)


async def _list(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    resp = await client.get(LIST, params=params)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["nextCursor"] is None
    return body["instances"]  # type: ignore[no-any-return]


NEWEST_FIRST = ["stuck", "completed", "cancelled", "deadline", "signal", "retry", "poll"]


#: (query parameters, the instances they select, newest first)
CASES: list[tuple[dict[str, Any], list[str]]] = [
    ({}, NEWEST_FIRST),
    ({"flow": "t.await"}, ["completed", "signal"]),
    ({"flow": "t.poll", "version": "2.0.0"}, ["deadline"]),
    ({"version": "1.0.0", "flow": "t.poll"}, ["stuck", "cancelled", "retry", "poll"]),
    ({"state": "suspended"}, ["deadline", "signal", "retry", "poll"]),
    ({"state": ["cancelled", "completed"]}, ["completed", "cancelled"]),
    ({"state": "running"}, ["stuck"]),
    ({"overdue": 0}, ["deadline", "retry"]),
    ({"overdue": 20}, ["retry"]),
    ({"overdue": 3600}, []),
    ({"stuck": "true"}, ["stuck"]),
    ({"errorCode": "flow.cancelled"}, ["cancelled"]),
    ({"errorCode": "nothing.like.it"}, []),
    ({"waiting": "poll"}, ["poll"]),
    ({"waiting": "retry"}, ["retry"]),
    ({"waiting": "signal"}, ["signal"]),
    ({"waiting": "deadline"}, ["deadline"]),
    ({"instanceKey": "key-poll"}, ["poll"]),
    ({"compensationFailed": "false"}, NEWEST_FIRST),
    ({"compensationFailed": "true"}, []),  # every compensation succeeded
    ({"flow": "t.poll", "state": "suspended"}, ["deadline", "retry", "poll"]),
]


async def test_each_filter_selects_exactly_its_instances_newest_first(
    population: Population,
) -> None:
    async with population.op.client() as client:
        for params, expected in CASES:
            rows = await _list(client, **params)
            assert population.names(rows) == expected, params


async def test_created_after_and_before_bound_the_creation_instant(
    population: Population,
) -> None:
    t0 = population.t0
    async with population.op.client() as client:
        after = await _list(client, createdAfter=(t0 + timedelta(seconds=3.5)).isoformat())
        before = await _list(client, createdBefore=(t0 + timedelta(seconds=1.5)).isoformat())
        both = await _list(
            client,
            createdAfter=(t0 + timedelta(seconds=0.5)).isoformat(),
            createdBefore=(t0 + timedelta(seconds=2.5)).isoformat(),
        )
        naive = await client.get(LIST, params={"createdAfter": "2026-01-01T00:00:00"})
    assert population.names(after) == ["stuck", "completed", "cancelled"]
    assert population.names(before) == ["retry", "poll"]
    assert population.names(both) == ["signal", "retry"]
    assert_problem(naive, 422, "input_invalid")


async def test_a_row_says_what_it_waits_for_its_attempt_and_budget_end(
    population: Population,
) -> None:
    h = population.op.h
    async with population.op.client() as client:
        rows = {r["instanceId"]: r for r in await _list(client)}
    poll = rows[population.ids["poll"]]
    snap = await h.snapshot(population.ids["poll"])
    entered = min(r.started_at for r in snap.steps if r.capability_id == "t.check")
    assert poll["state"] == "suspended"
    assert poll["waiting"] == {
        "kind": "poll",
        "stepId": 1,
        "capabilityId": "t.check",
        "attempt": 1,
        "wakeAt": poll["wakeAt"],
    }
    assert instant(poll["wakeAt"]) == snap.instance.wake_at
    assert poll["attempt"] == 1
    assert instant(poll["budgetEndsAt"]) == entered + timedelta(minutes=10)
    assert poll["instanceKey"] == "key-poll"
    retry = rows[population.ids["retry"]]
    assert retry["waiting"]["kind"] == "retry"
    assert retry["waiting"]["attempt"] == 0
    signal = rows[population.ids["signal"]]
    assert signal["waiting"]["kind"] == "signal"
    assert signal["waiting"]["capabilityId"] == "t.ready"
    assert signal["budgetEndsAt"] is None
    cancelled = rows[population.ids["cancelled"]]
    assert (cancelled["state"], cancelled["errorCode"], cancelled["waiting"]) == (
        "cancelled",
        "flow.cancelled",
        None,
    )
    stuck = rows[population.ids["stuck"]]
    assert instant(stuck["leaseExpiresAt"]) < h.clock.now()


async def test_bad_parameters_are_problems_not_errors(population: Population) -> None:
    async with population.op.client() as client:
        for params in (
            {"state": "sleeping"},
            {"waiting": "forever"},
            {"overdue": "-1"},
            {"limit": "0"},
            {"limit": "1001"},
            {"cursor": "not-a-cursor"},
            {"cursor": "W10"},
            {"createdBefore": "yesterday"},
            {"compensationFailed": "maybe"},
            {"cursor": _cursor('["2026-01-01T00:00:00+00:00", "x"]')},
            {"cursor": _cursor('["2026-01-01T00:00:00", "01a231fb-c6c3-7b70-a8fe-e4bf8614d75c"]')},
            {"cursor": _cursor('{"a": 1}')},
        ):
            assert_problem(await client.get(LIST, params=params), 422, "input_invalid")


def _cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


async def test_pages_cover_every_instance_once_while_new_ones_start(
    population: Population,
) -> None:
    h = population.op.h
    seen: list[str] = []
    cursor = None
    started_meanwhile: list[str] = []
    async with population.op.client() as client:
        while True:
            params: dict[str, Any] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            resp = await client.get(LIST, params=params)
            assert resp.status_code == 200, resp.text
            page = resp.json()
            assert len(page["instances"]) <= 2
            seen.extend(r["instanceId"] for r in page["instances"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
            # a start between two pages (at the same instant as the newest, and later)
            started = await h.start("t.await", {"order_id": f"o-new-{len(seen)}"})
            started_meanwhile.append(started.instance.id)
    assert len(seen) == len(set(seen)), "a row was listed twice"
    assert set(seen) == set(population.ids.values()), "a row was skipped (or a new one shown)"
    assert population.names([{"instanceId": i} for i in seen]) == NEWEST_FIRST
    assert not set(started_meanwhile) & set(seen)


async def test_counts_by_flow_and_state_with_overdue_and_stuck(population: Population) -> None:
    async with population.op.client() as client:
        resp = await client.get(f"{LIST}/counts")
        assert resp.status_code == 200, resp.text
        counts = resp.json()
        later = (await client.get(f"{LIST}/counts", params={"overdue": 20})).json()
    assert counts["flows"] == {
        "t.poll": {
            "1.0.0": {"suspended": 2, "cancelled": 1, "running": 1},
            "2.0.0": {"suspended": 1},
        },
        "t.await": {"1.0.0": {"suspended": 1, "completed": 1}},
    }
    assert counts["states"] == {"suspended": 4, "cancelled": 1, "running": 1, "completed": 1}
    assert counts["total"] == 7
    assert (counts["overdue"], counts["stuck"]) == (2, 1)
    assert {"flow": "t.poll", "version": "2.0.0", "state": "suspended", "count": 1} in counts[
        "byState"
    ]
    assert (later["overdue"], later["overdueSeconds"]) == (1, 20)
