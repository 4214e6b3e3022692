"""The console's review queue without a browser: the list reads its filters from the query
string, the forms post with the session's CSRF token and the operate scope, and refusals are
error pages naming their code."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from flowpark.engine.ports import ReviewFilter
from flowpark.testing import Scripted
from tests.api.operator_support import Operated, operated
from tests.engine.flows import poll_flow
from tests.support.server import TOKEN

OPS = "ops-secret"
VIEW = "view-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate,viewer:{VIEW}:read"


def _escalate(ctx: Any) -> None:
    ctx.request_review(ctx.input.order_id, "the check did not finish in time")


@pytest.fixture
async def op(store_url: str) -> AsyncIterator[Operated]:
    async with operated(
        store_url,
        [poll_flow()],
        substitutes={"t.escalate": Scripted(_escalate)},
        api_tokens=TOKENS,
    ) as running:
        yield running


@asynccontextmanager
async def _signed_in(op: Operated, token: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=op.server.base_url, timeout=30.0) as http:
        assert (await http.post("/ui/sign-in", data={"token": token})).status_code == 303
        yield http


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def _review(op: Operated, order: str) -> tuple[str, str]:
    inst = (await op.h.start("t.poll", {"order_id": order}, version="1.0.0")).instance
    await op.h.wait_until(lambda i: i.state.ended, inst.id)
    [item] = await op.h.store.reviews.find_reviews(ReviewFilter(instance_id=inst.id))
    return inst.id, item.id


async def test_the_queue_filters_by_query_string_and_acts_by_form_posts(op: Operated) -> None:
    one, first = await _review(op, "o-first")
    two, second = await _review(op, "o-second")
    async with _signed_in(op, OPS) as ops, _signed_in(op, TOKEN) as other:
        page = await ops.get("/ui/reviews", params={"instance": one})
        assert page.status_code == 200
        assert f'data-review="{first}"' in page.text and f'data-review="{second}"' not in page.text
        assert f'href="/ui/instances/{one}"' in page.text
        assert 'data-testid="dev-token"' not in page.text  # the node does not accept it
        csrf = _csrf(page.text)

        no_csrf = await ops.post(f"/ui/reviews/{first}/claim", data={"csrf": "x"})
        assert no_csrf.status_code == 403 and "csrf_invalid" in no_csrf.text
        claim = await ops.post(
            f"/ui/reviews/{first}/claim", data={"csrf": csrf, "back": "/ui/reviews?state=claimed"}
        )
        assert claim.status_code == 303
        assert claim.headers["location"].startswith("/ui/reviews?state=claimed&done=")
        shown = await ops.get(claim.headers["location"])
        assert "Claimed by ops: o-first." in shown.text and f'data-review="{first}"' in shown.text
        assert f'data-review="{second}"' not in shown.text  # open: not in state=claimed

        theirs = await other.get("/ui/reviews")
        refused = await other.post(
            f"/ui/reviews/{first}/resolve", data={"csrf": _csrf(theirs.text), "note": "x"}
        )
        assert refused.status_code == 409 and 'data-code="review_claimed"' in refused.text
        gone = await ops.post("/ui/reviews/no-such/claim", data={"csrf": csrf})
        assert gone.status_code == 404 and 'data-code="review_not_found"' in gone.text
        elsewhere = await ops.post(
            f"/ui/reviews/{second}/dismiss",
            data={"csrf": csrf, "note": "duplicate", "back": "https://evil.example/"},
        )
        assert elsewhere.headers["location"].startswith("/ui/reviews?done=")
        instance_page = await ops.get(f"/ui/instances/{two}")
        assert 'data-testid="instance-reviews"' in instance_page.text
        assert ">dismissed</span>" in instance_page.text


async def test_a_read_only_token_sees_no_forms_and_cannot_post(op: Operated) -> None:
    _, review_id = await _review(op, "o-read")
    async with _signed_in(op, VIEW) as viewer:
        page = await viewer.get("/ui/reviews")
        assert f'data-review="{review_id}"' in page.text
        assert 'data-testid="review-forms"' not in page.text
        refused = await viewer.post(
            f"/ui/reviews/{review_id}/claim", data={"csrf": _csrf(page.text)}
        )
        assert refused.status_code == 403
        odd = await viewer.get("/ui/reviews", params={"instance": "not-an-id"})
        assert odd.status_code == 200 and "is not an instance id" in odd.text
        bogus = await viewer.get("/ui/reviews", params={"state": "bogus"})
        assert bogus.status_code == 200 and "is not a review state" in bogus.text


async def test_a_forms_note_keeps_its_lines_and_refuses_control_characters(op: Operated) -> None:
    """A browser sends a textarea's lines with CR LF: stored with LF; an ESC in a note is an
    error page naming input_invalid, and the review is left as it was."""
    _, review = await _review(op, "o-form-note")
    async with _signed_in(op, OPS) as ops:
        csrf = _csrf((await ops.get("/ui/reviews")).text)
        evil = await ops.post(
            f"/ui/reviews/{review}/resolve", data={"csrf": csrf, "note": "x\x1b]0;owned\x07"}
        )
        assert evil.status_code == 422 and "input_invalid" in evil.text
        assert (await op.h.store.reviews.get_review(review)).state == "open"
        done = await ops.post(
            f"/ui/reviews/{review}/resolve", data={"csrf": csrf, "note": "one\r\ntwo"}
        )
        assert done.status_code == 303
    assert (await op.h.store.reviews.get_review(review)).note == "one\ntwo"
