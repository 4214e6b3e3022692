"""Operator actions and the explain view on both stores: wake (exactly one attempt),
cancel, bulk actions, idempotency by key, history with the acting token's name, 409 once
ended; ``waiting``, ``budget`` and per-attempt ``attempts`` with every try's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from flowpark.engine.records import NewInstance
from tests.api.operator_support import FAILING, Operated, operated
from tests.support.api import assert_problem, instant
from tests.support.server import TOKEN

OPS = "ops-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate"


@pytest.fixture
async def op(store_url: str) -> AsyncIterator[Operated]:
    async with operated(store_url, api_tokens=TOKENS) as running:
        yield running


def url(instance_id: str, action: str = "") -> str:
    return f"/api/v1/instances/{instance_id}" + (f"/{action}" if action else "")


async def test_wake_runs_the_next_poll_attempt_once_now_and_is_recorded(op: Operated) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-1"}, version="1.0.0")).instance
    assert inst.wake_at is not None and inst.wake_scope == 1
    assert await h.calls(inst.id, "t.check") == 1
    h.clock.advance(timedelta(seconds=5))
    woken_at = h.clock.now()
    async with op.client(OPS) as client:
        resp = await client.post(url(inst.id, "wake"), headers={"Idempotency-Key": "w-1"})
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        again = await client.post(url(inst.id, "wake"), headers={"Idempotency-Key": "w-1"})
        view = (await client.get(url(inst.id))).json()
    assert answer["woken"] is True and answer["state"] == "suspended"
    assert answer["actor"] == "ops" and instant(answer["actedAt"]) == woken_at
    # exactly one attempt more (scope 1), at the wake's instant; the repeat did nothing
    assert await h.calls(inst.id, "t.check") == 2
    assert again.status_code == 200 and again.json() == answer
    snap = await h.snapshot(inst.id)
    scope1 = [r for r in snap.steps if r.capability_id == "t.check" and r.scope == 1]
    assert [r.started_at for r in scope1] == [woken_at]
    assert snap.instance.wake_scope == 2
    assert instant(answer["wakeAt"]) == snap.instance.wake_at == woken_at + timedelta(minutes=1)
    assert [a["action"] for a in view["actions"]] == ["wake"]
    assert view["actions"][0]["actor"] == "ops"
    assert view["waiting"]["attempt"] == 2


async def test_wake_of_a_retry_wait_runs_the_next_try_now(op: Operated) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": f"{FAILING}w"}, version="1.0.0")).instance
    assert inst.wake_kind is not None and inst.wake_kind.value == "retry"
    async with op.client(OPS) as client:
        resp = await client.post(url(inst.id, "wake"))
        view = (await client.get(url(inst.id))).json()
    assert resp.json()["woken"] is True
    tries = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.check"]
    assert [(r.scope, r.try_number, str(r.outcome)) for r in tries] == [
        (0, 1, "failure"),
        (0, 2, "success"),
    ]
    assert view["waiting"]["kind"] == "poll"
    attempt = view["attempts"][0]
    assert attempt["attempt"] == 0 and attempt["outcome"] == "success"
    assert [t["error"] for t in attempt["tries"]] == [
        {"type": "RuntimeError", "detail": "provider answered 503"},
        None,
    ]
    assert view["tries"] == 3  # t.start, and t.check twice


async def test_wake_is_a_clear_no_op_when_not_parked_on_a_poll_and_409_once_ended(
    op: Operated,
) -> None:
    h = op.h
    waiting = (await h.start("t.await", {"order_id": "o-s"})).instance
    stuck = await op.stuck()
    ended = (await h.start("t.poll", {"order_id": "o-e"}, version="1.0.0")).instance
    await h.engine.cancel(ended.id)
    async with op.client(OPS) as client:
        on_signal = (await client.post(url(waiting.id, "wake"))).json()
        running = (await client.post(url(stuck, "wake"))).json()
        gone = await client.post(url(ended.id, "wake"))
        gone_cancel = await client.post(url(ended.id, "cancel"))
    assert (on_signal["woken"], on_signal["state"]) == (False, "suspended")
    assert "signal" in on_signal["reason"]
    assert (running["woken"], running["state"]) == (False, "running")
    assert "not parked" in running["reason"]
    assert_problem(gone, 409, "instance_ended")
    assert_problem(gone_cancel, 409, "instance_ended")


async def test_cancel_is_idempotent_by_key_and_recorded_with_the_token_name(
    op: Operated,
) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-c"}, version="1.0.0")).instance
    async with op.client(OPS) as client:
        first = await client.post(url(inst.id, "cancel"), headers={"Idempotency-Key": "c-1"})
        repeat = await client.post(url(inst.id, "cancel"), headers={"Idempotency-Key": "c-1"})
        other = await client.post(url(inst.id, "cancel"), headers={"Idempotency-Key": "c-2"})
        view = (await client.get(url(inst.id))).json()
    assert first.status_code == 200 and first.json()["state"] == "cancelled"
    assert repeat.status_code == 200 and repeat.json() == first.json()
    assert_problem(other, 409, "instance_ended")
    assert [(a["action"], a["actor"]) for a in view["actions"]] == [("cancel", "ops")]
    assert view["error"]["code"] == "flow.cancelled"


async def test_bulk_wake_dry_run_counts_then_records_in_bounded_batches_the_sweep_runs(
    op: Operated,
) -> None:
    h = op.h
    polls = [
        (await h.start("t.poll", {"order_id": f"o-b{i}"}, version="1.0.0")).instance.id
        for i in range(3)
    ]
    await h.start("t.await", {"order_id": "o-other"})
    body: dict[str, Any] = {"action": "wake", "filter": {"waiting": "poll"}}
    async with op.client(OPS) as client:
        dry = (await client.post("/api/v1/instances/actions", json={**body, "dryRun": True})).json()
        first = await client.post(
            "/api/v1/instances/actions", json={**body, "limit": 2}, headers={"Idempotency-Key": "b"}
        )
        assert first.status_code == 200, first.text
        cursor = first.json()["nextCursor"]
        second = (
            await client.post(
                "/api/v1/instances/actions",
                json={**body, "limit": 2, "cursor": cursor},
                headers={"Idempotency-Key": "b"},
            )
        ).json()
        retried = (
            await client.post(
                "/api/v1/instances/actions",
                json={**body, "limit": 2},
                headers={"Idempotency-Key": "b"},
            )
        ).json()
        bad = await client.post("/api/v1/instances/actions", json={**body, "limit": 5000})
    assert (dry["matched"], dry["acted"]) == (3, 0)
    assert first.json()["acted"] == 2 and cursor is not None
    assert second["acted"] == 1 and second["nextCursor"] is None
    assert first.json()["queued"] is True and second["queued"] is True
    results = first.json()["results"] + second["results"]
    assert sorted(r["instanceId"] for r in results) == sorted(polls)
    assert {(r["outcome"], r["state"], r["status"]) for r in results} == {
        ("acted", "suspended", 202)
    }
    for instance_id in polls:  # recorded, not run: the answer waited for no call
        assert await h.calls(instance_id, "t.check") == 1
        inst = await h.instance(instance_id)
        assert inst.woken and inst.wake_at == h.clock.now()
    await h.sweep()
    for instance_id in polls:  # each woken once: attempt 0 at start, attempt 1 by the sweep
        assert await h.calls(instance_id, "t.check") == 2
        assert not (await h.instance(instance_id)).woken  # the park after it cleared it
    assert retried["acted"] == 2  # the same key: the first answers, nothing recorded again
    await h.sweep()
    for instance_id in polls:
        assert await h.calls(instance_id, "t.check") == 2
    assert_problem(bad, 422, "input_invalid")


async def test_explain_shows_what_it_waits_for_its_budget_and_each_attempt(
    op: Operated,
) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-x"}, version="1.0.0")).instance
    await h.advance_to_next_wake(inst.id)  # attempt 1, on time
    wake = (await h.instance(inst.id)).wake_at
    assert wake is not None
    h.clock.set(wake + timedelta(seconds=7))  # attempt 2, 7 s late
    await h.sweep()
    h.clock.advance(timedelta(seconds=30))
    snap = await h.snapshot(inst.id)
    entered = min(r.started_at for r in snap.steps if r.capability_id == "t.check")
    async with op.client() as client:
        view = (await client.get(url(inst.id))).json()
    assert view["waiting"] == {
        "kind": "poll",
        "stepId": 1,
        "capabilityId": "t.check",
        "attempt": 3,
        "wakeAt": view["wakeAt"],
    }
    budget = view["budget"]
    assert instant(budget["startedAt"]) == entered
    assert instant(budget["endsAt"]) == entered + timedelta(minutes=10)
    used = (h.clock.now() - entered) / timedelta(minutes=10)
    assert budget["usedRatio"] == pytest.approx(used, abs=1e-3)
    attempts = view["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1, 2]
    assert [a["outcome"] for a in attempts] == ["success"] * 3
    assert attempts[1]["latenessSeconds"] == 0.0
    assert attempts[2]["latenessSeconds"] == 7.0
    assert all(len(a["tries"]) == 1 for a in attempts)


async def test_an_extended_budget_survives_a_restart_and_bounds_the_next_decisions(
    op: Operated,
) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-ext"}, version="1.0.0")).instance
    snap = await h.snapshot(inst.id)
    entered = min(r.started_at for r in snap.steps if r.capability_id == "t.check")
    await h.advance_to_next_wake(inst.id)  # attempt 1
    async with op.client(OPS) as client:
        resp = await client.post(
            url(inst.id, "budget"), json={"extendBy": "PT5M"}, headers={"Idempotency-Key": "e"}
        )
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        repeat = await client.post(
            url(inst.id, "budget"), json={"extendBy": "PT5M"}, headers={"Idempotency-Key": "e"}
        )
        view = (await client.get(url(inst.id))).json()
        row = (await client.get("/api/v1/instances")).json()
    assert answer["extended"] is True and answer["actor"] == "ops"
    assert instant(answer["previousEndsAt"]) == entered + timedelta(minutes=10)
    assert instant(answer["endsAt"]) == entered + timedelta(minutes=15)
    assert repeat.json() == answer  # the same key: extended once
    assert instant(view["budget"]["endsAt"]) == entered + timedelta(minutes=15)
    assert view["budget"]["extensions"] == 1
    assert view["state"] == "suspended" and view["waiting"]["kind"] == "poll"
    assert [(a["action"], a["actor"]) for a in view["actions"]] == [("extend_budget", "ops")]
    listed = next(r for r in row["instances"] if r["instanceId"] == inst.id)
    assert instant(listed["budgetEndsAt"]) == entered + timedelta(minutes=15)
    # another node (a fresh engine: nothing in memory) runs it to its end
    other = h.with_engine(node_id="node-2")
    for _ in range(100):
        current = await h.instance(inst.id)
        if current.state.ended:
            break
        assert current.wake_at is not None
        if current.wake_at > h.clock.now():
            h.clock.set(current.wake_at)
        await other.sweep()
    final = await h.instance(inst.id)
    assert final.state.value == "failed" and final.failure is not None
    assert final.failure.code == "t.not_done"
    assert h.clock.now() == entered + timedelta(minutes=15)
    assert await h.calls(inst.id, "t.check") == 15  # minutes 0-14: the extended budget


async def test_an_extension_never_passes_the_flow_deadline_and_needs_a_poll(
    op: Operated,
) -> None:
    h = op.h
    capped = (await h.start("t.poll", {"order_id": "o-cap"}, version="3.0.0")).instance
    waiting = (await h.start("t.await", {"order_id": "o-sig"})).instance
    ended = (await h.start("t.poll", {"order_id": "o-end"}, version="1.0.0")).instance
    await h.engine.cancel(ended.id)
    async with op.client(OPS) as client:
        resp = await client.post(url(capped.id, "budget"), json={"extendBy": "PT1H"})
        again = await client.post(url(capped.id, "budget"), json={"extendBy": 60})
        no_poll = await client.post(url(waiting.id, "budget"), json={"extendBy": "PT1H"})
        gone = await client.post(url(ended.id, "budget"), json={"extendBy": "PT1H"})
        bad = [
            await client.post(url(capped.id, "budget"), json=body)
            for body in (
                {"extendBy": "PT0S"},
                {"extendBy": "soon"},
                {},
                {"extendBy": -5},
                {"extendBy": True},  # not 1 second
            )
        ]
    assert resp.status_code == 200, resp.text
    assert resp.json()["cappedByDeadline"] is True
    assert instant(resp.json()["endsAt"]) == capped.deadline_at
    assert (again.json()["extended"], again.json()["cappedByDeadline"]) == (False, True)
    assert_problem(no_poll, 409, "no_budget")
    assert_problem(gone, 409, "instance_ended")
    for answer in bad:
        assert_problem(answer, 422, "input_invalid")
    assert (await h.instance(capped.id)).state.value == "suspended"


async def test_a_repeated_key_answers_the_first_answer_byte_for_byte_even_once_ended(
    op: Operated,
) -> None:
    h = op.h
    woken = (await h.start("t.poll", {"order_id": "o-r1"}, version="1.0.0")).instance
    extended = (await h.start("t.poll", {"order_id": "o-r2"}, version="1.0.0")).instance
    cancelled = (await h.start("t.poll", {"order_id": "o-r3"}, version="1.0.0")).instance
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        (woken.id, "wake", None),
        (extended.id, "budget", {"extendBy": 60}),
        (cancelled.id, "cancel", None),
    ]
    async with op.client(OPS) as client:
        firsts = [
            await client.post(url(i, a), json=body, headers={"Idempotency-Key": "r-1"})
            for i, a, body in calls
        ]
        for instance_id in (woken.id, extended.id):
            await h.engine.cancel(instance_id)
        repeats = [
            await client.post(url(i, a), json=body, headers={"Idempotency-Key": "r-1"})
            for i, a, body in calls
        ]
        fresh = [
            await client.post(url(i, a), json=body, headers={"Idempotency-Key": "r-2"})
            for i, a, body in calls
        ]
    for first, repeat in zip(firsts, repeats, strict=True):
        assert first.status_code == 200, first.text
        assert (repeat.status_code, repeat.content) == (first.status_code, first.content)
    for answer in fresh:  # a new key on an ended instance is refused
        assert_problem(answer, 409, "instance_ended")


ACTIONS = "/api/v1/instances/actions"


async def test_a_bulk_action_with_an_empty_filter_needs_all(op: Operated) -> None:
    h = op.h
    polls = [
        (await h.start("t.poll", {"order_id": f"o-all{i}"}, version="1.0.0")).instance.id
        for i in range(2)
    ]
    empty: list[dict[str, Any]] = [
        {"action": "cancel"},
        {"action": "cancel", "filter": {}},
        {"action": "cancel", "filter": {"stuck": False, "state": []}, "all": False},
        {"action": "wake", "dryRun": True},
    ]
    async with op.client(OPS) as client:
        refused = [await client.post(ACTIONS, json=body) for body in empty]
        ill_typed = await client.post(ACTIONS, json={"action": "cancel", "all": "true"})
        dry = await client.post(ACTIONS, json={"action": "cancel", "all": True, "dryRun": True})
        assert [(await h.instance(i)).state.value for i in polls] == ["suspended"] * 2
        done = await client.post(ACTIONS, json={"action": "cancel", "all": True})
        narrowed = await client.post(
            ACTIONS, json={"action": "cancel", "all": True, "filter": {"flow": "t.none"}}
        )
    for answer in refused:
        assert_problem(answer, 422, "bulk_filter_missing")
        assert '"all": true' in answer.json()["detail"]
    assert_problem(ill_typed, 422, "input_invalid")  # strict: a string is not a boolean
    assert dry.status_code == 200, dry.text
    assert dry.json() == {
        "action": "cancel",
        "dryRun": True,
        "matched": 2,
        "actionable": 2,
        "acted": 0,
    }
    assert done.status_code == 200, done.text
    assert done.json()["acted"] == 2 and done.json()["nextCursor"] is None
    assert sorted(r["instanceId"] for r in done.json()["results"]) == sorted(polls)
    assert [(await h.instance(i)).state.value for i in polls] == ["cancelled"] * 2
    assert narrowed.json()["matched"] == 0  # all: true with a filter: the filter still holds


async def test_a_bulk_action_refuses_a_cursor_it_never_gave_out_dry_run_or_not(
    op: Operated,
) -> None:
    body = {"action": "wake", "filter": {"flow": "t.poll"}, "cursor": "not-a-cursor"}
    async with op.client(OPS) as client:
        answers = [
            await client.post(ACTIONS, json=body),
            await client.post(ACTIONS, json={**body, "dryRun": True}),
        ]
    for answer in answers:
        problem = assert_problem(answer, 422, "input_invalid")
        assert [e["loc"] for e in problem["errors"]] == [["body", "cursor"]]


async def test_every_instance_a_bulk_wake_matches_is_acted_on_or_skipped_with_a_code(
    op: Operated,
) -> None:
    """A bulk wake lists, then wakes: an instance a node runs meanwhile (here: under a live
    lease) or one that waits for a signal is skipped with a code, never left without one
    (a skip's code was null) and never in neither count."""
    h = op.h
    parked = (await h.start("t.poll", {"order_id": "o-p"}, version="1.0.0")).instance.id
    awaiting = (await h.start("t.await", {"order_id": "o-a"})).instance.id
    now = h.clock.now()
    running, _ = await h.store.intake.create_instance(
        NewInstance(
            id=h.engine.new_id(),
            flow_name="t.poll",
            flow_version="1.0.0",
            input={"order_id": "o-r"},
            created_at=now,
            deadline_at=None,
            lease_owner="other-node",
            lease_expires_at=now + timedelta(seconds=30),
        )
    )
    async with op.client(OPS) as client:
        resp = await client.post(ACTIONS, json={"action": "wake", "all": True})
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert answer["matched"] == 3 and answer["acted"] + answer["skipped"] == 3, answer
    by_id = {r["instanceId"]: r for r in answer["results"]}
    assert by_id[parked]["outcome"] == "acted"
    assert (by_id[running.id]["outcome"], by_id[running.id]["code"]) == (
        "skipped",
        "instance_busy",
    )
    assert (by_id[awaiting]["outcome"], by_id[awaiting]["code"]) == (
        "skipped",
        "waits_for_signal",
    )
    assert all(r["outcome"] == "acted" or r["code"] for r in answer["results"])
