"""A repeat of an operator action's ``Idempotency-Key``, on both stores: it answers what the
first request answered (its refusal too: the same status and problem), is 409
``action_in_progress`` while the first still acts, and runs the action itself once the
first's record has been pending past its bound (its request's node died), acting once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from flowpark.api import actions
from flowpark.api.auth import Principal
from flowpark.api.problems import problem_members
from flowpark.engine.decide.deadlines import POLL_BUDGET
from flowpark.engine.node.operator import extend_budget
from flowpark.engine.ports.operator import OperatorAction
from flowpark.engine.records import StepKind
from flowpark.errors import FlowparkError, InputInvalid, RepeatedRefusal
from tests.api.operator_support import Operated, operated
from tests.support.api import assert_problem, instant
from tests.support.server import TOKEN

OPS = "ops-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate"
#: Past the bound a pending record is taken for lost at (two leases of the default 30 s).
PAST_THE_BOUND = timedelta(seconds=61)


@pytest.fixture
async def op(store_url: str) -> AsyncIterator[Operated]:
    async with operated(store_url, api_tokens=TOKENS) as running:
        yield running


def url(instance_id: str, action: str = "") -> str:
    return f"/api/v1/instances/{instance_id}" + (f"/{action}" if action else "")


async def pending(op: Operated, instance_id: str, action: str, key: str) -> OperatorAction:
    """The record a request leaves that recorded its action and whose node then died."""
    record = OperatorAction(
        id=op.h.engine.new_id(),
        instance_id=instance_id,
        action=action,
        actor="ops",
        acted_at=op.h.clock.now(),
        details={"pending": True},
        idempotency_key=key,
    )
    stored, created = await op.h.store.operator.record_action(record)
    assert created
    return stored


async def test_a_refused_extension_is_refused_again_by_its_key_with_the_same_problem(
    op: Operated,
) -> None:
    h = op.h
    waiting = (await h.start("t.await", {"order_id": "o-nb"})).instance
    key = {"Idempotency-Key": "nb-1"}
    async with op.client(OPS) as client:
        first = await client.post(url(waiting.id, "budget"), json={"extendBy": 60}, headers=key)
        repeat = await client.post(url(waiting.id, "budget"), json={"extendBy": 60}, headers=key)
        view = (await client.get(url(waiting.id))).json()
    problem = assert_problem(first, 409, "no_budget")
    assert_problem(repeat, 409, "no_budget")
    assert repeat.content == first.content  # code, title, detail and fields alike
    assert problem["instanceId"] == waiting.id
    (action,) = view["actions"]
    assert (action["action"], action["outcome"], action["code"]) == (
        "extend_budget",
        "refused",
        "no_budget",
    )
    assert action["details"]["problem"]["detail"] == problem["detail"]
    assert action["details"]["status"] == 409


async def test_a_refused_retry_of_compensations_is_refused_again_by_its_key(
    op: Operated,
) -> None:
    h = op.h
    ended = (await h.start("t.poll", {"order_id": "o-rc"}, version="1.0.0")).instance
    await h.engine.cancel(ended.id)  # its compensation succeeded: nothing to retry
    key = {"Idempotency-Key": "rc-1"}
    async with op.client(OPS) as client:
        first = await client.post(url(ended.id, "compensations/retry"), headers=key)
        repeat = await client.post(url(ended.id, "compensations/retry"), headers=key)
    assert_problem(first, 409, "compensation_not_failed")
    assert (repeat.status_code, repeat.content) == (first.status_code, first.content)


async def test_a_refused_operator_signal_is_refused_again_with_its_errors(op: Operated) -> None:
    h = op.h
    waiting = (await h.start("t.await", {"order_id": "o-sg"})).instance
    ops = Principal("ops", frozenset({"operate"}))
    with pytest.raises(InputInvalid) as first:
        await actions.signal(h.engine, ops, waiting.id, "t.ready", {"job_id": 5}, "sg-1")
    with pytest.raises(RepeatedRefusal) as repeat:
        await actions.signal(h.engine, ops, waiting.id, "t.ready", {"job_id": "j"}, "sg-1")
    assert repeat.value.code == first.value.code == "input_invalid"
    assert problem_members(repeat.value) == problem_members(first.value)
    assert problem_members(first.value)["errors"][0]["loc"] == ["job_id"]
    assert (await h.instance(waiting.id)).state.value == "suspended"  # the repeat sent none
    async with op.client(OPS) as client:
        view = (await client.get(url(waiting.id))).json()
    assert [(a["action"], a["outcome"], a["code"]) for a in view["actions"]] == [
        ("signal", "refused", "input_invalid")
    ]


async def test_a_repeat_while_the_first_acts_is_409_then_past_the_bound_it_acts_once(
    op: Operated,
) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-ip"}, version="1.0.0")).instance
    first = await pending(op, inst.id, "wake", "ip-1")
    key = {"Idempotency-Key": "ip-1"}
    async with op.client(OPS) as client:
        h.clock.advance(PAST_THE_BOUND - timedelta(seconds=2))
        early = await client.post(url(inst.id, "wake"), headers=key)
        assert await h.calls(inst.id, "t.check") == 1  # nothing ran
        h.clock.advance(timedelta(seconds=2))
        late = await client.post(url(inst.id, "wake"), headers=key)
        again = await client.post(url(inst.id, "wake"), headers=key)
        view = (await client.get(url(inst.id))).json()
    problem = assert_problem(early, 409, "action_in_progress")
    assert early.headers["retry-after"] == "1"
    assert (problem["actionId"], problem["action"]) == (first.id, "wake")
    assert instant(problem["rerunAt"]) == first.acted_at + timedelta(seconds=60)
    assert late.status_code == 200, late.text
    assert late.json()["woken"] is True and late.json()["actionId"] == first.id
    assert instant(late.json()["actedAt"]) == h.clock.now()
    assert (again.status_code, again.content) == (200, late.content)
    assert await h.calls(inst.id, "t.check") == 2  # the one wake ran one attempt
    (action,) = view["actions"]
    assert (action["actionId"], action["outcome"], action["details"]["runs"]) == (
        first.id,
        "done",
        2,
    )


async def test_an_extension_whose_answer_was_lost_is_not_made_twice(op: Operated) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-lost"}, version="1.0.0")).instance
    first = await pending(op, inst.id, "extend_budget", "lost-1")
    # the first request extended the budget, then its node died before storing the answer
    done = await extend_budget(h.engine, inst.id, timedelta(minutes=5), first.id)
    h.clock.advance(PAST_THE_BOUND)
    async with op.client(OPS) as client:
        rerun = await client.post(
            url(inst.id, "budget"), json={"extendBy": 300}, headers={"Idempotency-Key": "lost-1"}
        )
        view = (await client.get(url(inst.id))).json()
    assert rerun.status_code == 200, rerun.text
    answer = rerun.json()
    assert instant(answer["endsAt"]) == done.ends_at
    assert instant(answer["previousEndsAt"]) == done.previous_ends_at
    assert answer["extended"] is True and answer["cappedByDeadline"] is False
    budget_rows = [
        r
        for r in (await h.snapshot(inst.id)).steps
        if r.kind is StepKind.DEADLINE and r.capability_id == POLL_BUDGET
    ]
    assert [r.try_number for r in budget_rows] == [1, 2]  # extended once
    assert budget_rows[1].values["actionId"] == first.id
    assert view["budget"]["extensions"] == 1


async def test_a_refusal_that_says_try_again_leaves_the_key_to_act(op: Operated) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-busy"}, version="1.0.0")).instance
    ops = Principal("ops", frozenset({"operate"}))
    held = await h.store.runs.claim(
        inst.id, "other-node", h.clock.now(), h.clock.now() + timedelta(minutes=1)
    )
    assert held is not None  # another node runs it now
    with pytest.raises(FlowparkError) as busy:
        await actions.extend(h.engine, ops, inst.id, timedelta(minutes=1), "busy-1")
    assert busy.value.code == "instance_busy"
    await h.store.runs.release(inst.id, held.fencing_token, h.clock.now())
    status, answer = await actions.extend(h.engine, ops, inst.id, timedelta(minutes=1), "busy-1")
    assert status == 200 and answer.extended is True
    (action,) = await h.store.operator.actions_of(inst.id)
    assert action.details["answer"]["extended"] is True and action.details["runs"] == 2


async def test_a_repeated_bulk_skips_an_instance_the_first_batch_still_acts_on(
    op: Operated,
) -> None:
    h = op.h
    inst = (await h.start("t.poll", {"order_id": "o-bk"}, version="1.0.0")).instance
    await pending(op, inst.id, "wake", "bulk:bk-1")
    body = {"action": "wake", "filter": {"flow": "t.poll"}}
    async with op.client(OPS) as client:
        answer = await client.post(
            "/api/v1/instances/actions", json=body, headers={"Idempotency-Key": "bk-1"}
        )
    assert answer.status_code == 200, answer.text
    (result,) = [r for r in answer.json()["results"] if r["instanceId"] == inst.id]
    assert (result["outcome"], result["code"]) == ("skipped", "action_in_progress")
    assert await h.calls(inst.id, "t.check") == 1
