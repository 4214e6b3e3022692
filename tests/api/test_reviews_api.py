"""The review queue over HTTP: a timed-out instance's escalation is listed, filtered,
claimed and resolved (recorded with the token's name and the engine clock's instant), with
``review_closed``, ``review_claimed`` and ``review_not_found`` problems; the same on both
stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from flowpark.testing import Scripted
from tests.api.operator_support import Operated, operated
from tests.engine.flows import poll_flow
from tests.support.api import assert_problem, instant
from tests.support.server import TOKEN

OPS = "ops-secret"
BO = "bo-secret"
VIEW = "view-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate,bo:{BO}:read+operate,viewer:{VIEW}:read"
REVIEWS = "/api/v1/reviews"


def _escalate(ctx: Any) -> None:
    ctx.request_review(ctx.input.order_id, "the check did not finish in time", {"n": 1})


@pytest.fixture
async def op(module_store_url: str) -> AsyncIterator[Operated]:
    async with operated(
        module_store_url,
        [poll_flow()],
        substitutes={"t.escalate": Scripted(_escalate)},
        api_tokens=TOKENS,
    ) as running:
        yield running


async def _timed_out(op: Operated, order: str) -> str:
    inst = (await op.h.start("t.poll", {"order_id": order}, version="1.0.0")).instance
    await op.h.wait_until(lambda i: i.state.ended, inst.id)
    return inst.id


async def test_a_timed_out_instance_is_reviewed_claimed_and_resolved(op: Operated) -> None:
    instance_id = await _timed_out(op, "o-review")
    async with op.client(OPS) as ops, op.client(BO) as bo:
        listed = (await ops.get(REVIEWS, params={"instanceId": instance_id})).json()
        assert [(i["subject"], i["state"], i["flow"]) for i in listed] == [
            ("o-review", "open", "t.poll")
        ]
        review_id = listed[0]["id"]
        assert (await ops.get(f"{REVIEWS}/{review_id}")).json() == listed[0]
        claimed_at = op.h.clock.now()
        claim = await ops.post(f"{REVIEWS}/{review_id}/claim")
        assert claim.status_code == 200, claim.text
        assert claim.json()["state"] == "claimed" and claim.json()["claimedBy"] == "ops"
        assert instant(claim.json()["claimedAt"]) == claimed_at
        taken = await bo.post(f"{REVIEWS}/{review_id}/resolve", json={"note": "mine"})
        assert_problem(taken, 409, "review_claimed")
        assert taken.json()["claimedBy"] == "ops"
        mine = await ops.get(REVIEWS, params={"claimedBy": "ops", "state": "claimed"})
        assert review_id in [i["id"] for i in mine.json()]
        op.h.clock.advance(timedelta(minutes=3))
        done = await ops.post(f"{REVIEWS}/{review_id}/resolve", json={"note": "re-ran it"})
        assert done.status_code == 200, done.text
        body = done.json()
        assert (body["state"], body["closedBy"], body["note"]) == ("resolved", "ops", "re-ran it")
        assert instant(body["closedAt"]) == claimed_at + timedelta(minutes=3)
        again = await ops.post(f"{REVIEWS}/{review_id}/dismiss")
        assert_problem(again, 409, "review_closed")
        assert again.json()["state"] == "resolved"
        assert_problem(await ops.get(f"{REVIEWS}/no-such-review"), 404, "review_not_found")
        assert_problem(await ops.post(f"{REVIEWS}/no-such/claim"), 404, "review_not_found")
        still_open = await ops.get(REVIEWS, params={"state": ["open", "claimed"]})
        assert review_id not in [i["id"] for i in still_open.json()]


async def test_actions_need_the_operate_scope_and_bodies_are_checked(op: Operated) -> None:
    instance_id = await _timed_out(op, "o-scopes")
    async with op.client(VIEW) as reader, op.client(OPS) as ops:
        review_id = (await reader.get(REVIEWS, params={"instanceId": instance_id})).json()[0]["id"]
        assert_problem(await reader.post(f"{REVIEWS}/{review_id}/claim"), 403, "forbidden")
        unknown = await ops.post(f"{REVIEWS}/{review_id}/dismiss", json={"nope": 1})
        assert_problem(unknown, 422, "input_invalid")
        odd = await ops.get(REVIEWS, params={"instanceId": "d\\?ÇhW"})
        assert (odd.status_code, odd.json()) == (200, [])  # names no instance: no item
        bogus = await ops.get(REVIEWS, params={"state": "bogus"})
        assert_problem(bogus, 422, "input_invalid")


async def test_a_note_holds_no_control_character_but_a_tab_and_a_line_feed(op: Operated) -> None:
    """A note is shown to other operators, in their terminals too: ESC (an OSC title, a
    CSI), a C1 control, DEL or a carriage return in it is refused, and nothing is done."""
    instance_id = await _timed_out(op, "o-note")
    async with op.client(OPS) as ops:
        review_id = (await ops.get(REVIEWS, params={"instanceId": instance_id})).json()[0]["id"]
        for note in ("\x1b]0;owned\x07", "red \x1b[31m", "csi \x9b2J", "del \x7f", "a\r\nb"):
            refused = await ops.post(f"{REVIEWS}/{review_id}/resolve", json={"note": note})
            problem = assert_problem(refused, 422, "input_invalid")
            assert [e["loc"] for e in problem["errors"]] == [["body", "note"]], problem
        assert (await ops.get(f"{REVIEWS}/{review_id}")).json()["state"] == "open"
        note = "re-ran the OCR:\n\tpage 1 by hand"
        done = await ops.post(f"{REVIEWS}/{review_id}/resolve", json={"note": note})
        assert done.status_code == 200, done.text
        assert done.json()["note"] == note
