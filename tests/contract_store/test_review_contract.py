"""What every store promises about the review queue (:class:`flowpark.engine.ports.Reviews`):
items written with a journal row are listed and filtered; a claim, a resolve and a dismiss
are recorded with who and when; refusals are the same on every store."""

from __future__ import annotations

import pytest

from flowpark.engine.ports import (
    Commit,
    ReviewAct,
    ReviewFilter,
    ReviewState,
    ReviewVerb,
    Store,
)
from flowpark.engine.records import ReviewRequest
from flowpark.errors import ReviewClaimed, ReviewClosed, ReviewNotFound
from tests.support.journal import FLOW, at, new_instance, step

FLOW_NAME = FLOW[0]


async def _with_reviews(store: Store, *ids: str) -> str:
    """An instance whose first journal row asked for reviews ``ids``."""
    record, _ = await store.intake.create_instance(new_instance())
    reviews = tuple(ReviewRequest(i, f"doc {i}", "late", {"n": 1}) for i in ids)
    row = step(record.id, step_id=1, committed_at=at(2))
    await store.runs.commit(Commit(record.id, 1, at(2), at(32), rows=(row,), reviews=reviews))
    return record.id


async def test_items_are_open_with_their_instance_and_flow(store: Store) -> None:
    instance_id = await _with_reviews(store, "r-1", "r-2")
    items = await store.reviews.find_reviews(ReviewFilter())
    assert [(r.id, r.state, r.instance_id, r.flow) for r in items] == [
        ("r-1", ReviewState.OPEN, instance_id, FLOW_NAME),
        ("r-2", ReviewState.OPEN, instance_id, FLOW_NAME),
    ]
    first = items[0]
    assert first.details == {"n": 1} and first.created_at == at(2)
    assert (first.claimed_by, first.closed_by, first.note) == (None, None, None)
    assert await store.reviews.get_review("r-2") == items[1]
    assert await store.reviews.find_reviews(ReviewFilter(), after=first.sequence) == items[1:]
    assert await store.reviews.find_reviews(ReviewFilter(), limit=1) == items[:1]
    assert await store.reviews.oldest_open() == at(2)


async def test_claim_then_resolve_records_who_and_when(store: Store) -> None:
    await _with_reviews(store, "r-1")
    claimed = await store.reviews.act_on_review(ReviewAct("r-1", ReviewVerb.CLAIM, "ana", at(10)))
    assert (claimed.state, claimed.claimed_by, claimed.claimed_at) == (
        ReviewState.CLAIMED,
        "ana",
        at(10),
    )
    again = await store.reviews.act_on_review(ReviewAct("r-1", ReviewVerb.CLAIM, "ana", at(11)))
    assert again == claimed  # a repeat by the claimant changes nothing
    done = await store.reviews.act_on_review(
        ReviewAct("r-1", ReviewVerb.RESOLVE, "ana", at(20), "re-ran the OCR")
    )
    assert (done.state, done.closed_by, done.closed_at, done.note) == (
        ReviewState.RESOLVED,
        "ana",
        at(20),
        "re-ran the OCR",
    )
    assert done.claimed_by == "ana" and done.claimed_at == at(10)
    assert await store.reviews.get_review("r-1") == done
    assert await store.reviews.oldest_open() is None


async def test_refusals_are_the_same_on_every_store(store: Store) -> None:
    await _with_reviews(store, "r-1", "r-2")
    await store.reviews.act_on_review(ReviewAct("r-1", ReviewVerb.CLAIM, "ana", at(10)))
    for verb in ReviewVerb:
        with pytest.raises(ReviewClaimed) as claimed:
            await store.reviews.act_on_review(ReviewAct("r-1", verb, "bo", at(11)))
        assert claimed.value.fields["claimed_by"] == "ana"
    dismissed = await store.reviews.act_on_review(
        ReviewAct("r-2", ReviewVerb.DISMISS, "bo", at(12), None)
    )  # an open item needs no claim first
    assert dismissed.state is ReviewState.DISMISSED and dismissed.closed_by == "bo"
    for verb in ReviewVerb:
        with pytest.raises(ReviewClosed) as closed:
            await store.reviews.act_on_review(ReviewAct("r-2", verb, "bo", at(13)))
        assert closed.value.fields["state"] == "dismissed"
    with pytest.raises(ReviewNotFound):
        await store.reviews.get_review("nope")
    with pytest.raises(ReviewNotFound):
        await store.reviews.act_on_review(ReviewAct("nope", ReviewVerb.CLAIM, "ana", at(14)))


async def test_filters_select_by_state_instance_flow_and_claimant(store: Store) -> None:
    one = await _with_reviews(store, "r-1", "r-2")
    two = await _with_reviews(store, "r-3")
    await store.reviews.act_on_review(ReviewAct("r-2", ReviewVerb.CLAIM, "ana", at(10)))
    await store.reviews.act_on_review(ReviewAct("r-3", ReviewVerb.RESOLVE, "bo", at(10)))

    async def ids(where: ReviewFilter) -> list[str]:
        return [r.id for r in await store.reviews.find_reviews(where)]

    assert await ids(ReviewFilter(states=(ReviewState.OPEN,))) == ["r-1"]
    assert await ids(ReviewFilter(states=(ReviewState.OPEN, ReviewState.CLAIMED))) == [
        "r-1",
        "r-2",
    ]
    assert await ids(ReviewFilter(instance_id=two)) == ["r-3"]
    assert await ids(ReviewFilter(instance_id=one, claimed_by="ana")) == ["r-2"]
    assert await ids(ReviewFilter(flow=FLOW_NAME)) == ["r-1", "r-2", "r-3"]
    assert await ids(ReviewFilter(flow="other.flow")) == []
    counts = await store.reviews.count_reviews()
    assert counts == {
        ReviewState.OPEN: 1,
        ReviewState.CLAIMED: 1,
        ReviewState.RESOLVED: 1,
        ReviewState.DISMISSED: 0,
    }
