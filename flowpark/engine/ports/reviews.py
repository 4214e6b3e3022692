"""The review queue (:class:`Reviews`): items that ``request_review`` wrote with a journal
row, and what people do with them: claim one, then resolve or dismiss it with a note, each
recorded with who and when.

An item is ``open`` until someone claims it (``claimed``); ``resolved`` and ``dismissed``
close it. A claim by its claimant again changes nothing; one by another person is refused
(``review_claimed``), and so is a resolve or dismiss by another than the claimant. Nothing
is done to a closed item (``review_closed``). An open item may be resolved or dismissed
without a claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

__all__ = [
    "ReviewAct",
    "ReviewFilter",
    "ReviewRecord",
    "ReviewState",
    "ReviewVerb",
    "Reviews",
    "act_on",
]


class ReviewState(StrEnum):
    """Where a review item is: ``open``, ``claimed``, ``resolved``, ``dismissed``."""

    OPEN = "open"
    CLAIMED = "claimed"
    RESOLVED = "resolved"
    DISMISSED = "dismissed"

    @property
    def closed(self) -> bool:
        """Resolved or dismissed."""
        return self in (ReviewState.RESOLVED, ReviewState.DISMISSED)


class ReviewVerb(StrEnum):
    """What a person does with an item: ``claim``, ``resolve``, ``dismiss``."""

    CLAIM = "claim"
    RESOLVE = "resolve"
    DISMISS = "dismiss"


@dataclass(frozen=True)
class ReviewRecord:
    """One review item as stored.

    Attributes:
        sequence: its place in the queue (grows with each item written).
        id: the item's id.
        instance_id: the instance that asked for it.
        flow: the instance's flow name ("" when the instance was purged).
        subject, reason, details: what ``request_review`` said.
        created_at: when its journal row was committed (aware UTC).
        state: where it is.
        claimed_by / claimed_at: who claimed it and when (None until claimed).
        closed_by / closed_at / note: who resolved or dismissed it, when, and their note.
    """

    sequence: int
    id: str
    instance_id: str
    flow: str
    subject: str
    reason: str
    details: dict[str, Any]
    created_at: datetime
    state: ReviewState = ReviewState.OPEN
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    closed_by: str | None = None
    closed_at: datetime | None = None
    note: str | None = None


@dataclass(frozen=True)
class ReviewFilter:
    """Which items a list selects (every field given must hold).

    Attributes:
        states: any of these states (empty: any state).
        instance_id: of this instance.
        flow: of instances of this flow name.
        claimed_by: claimed (or closed after a claim) by this person.
    """

    states: tuple[ReviewState, ...] = ()
    instance_id: str | None = None
    flow: str | None = None
    claimed_by: str | None = None

    def selects(self, record: ReviewRecord) -> bool:
        """Whether ``record`` passes the filter (the in-memory store's test)."""
        return (
            (not self.states or record.state in self.states)
            and (self.instance_id is None or record.instance_id == self.instance_id)
            and (self.flow is None or record.flow == self.flow)
            and (self.claimed_by is None or record.claimed_by == self.claimed_by)
        )


@dataclass(frozen=True)
class ReviewAct:
    """A person's action on an item.

    Attributes:
        review_id: the item.
        verb: claim, resolve or dismiss.
        actor: who (the acting token's name).
        at: the engine clock's now (aware UTC).
        note: the closing note (resolve, dismiss; None for a claim).
    """

    review_id: str
    verb: ReviewVerb
    actor: str
    at: datetime
    note: str | None = None


def act_on(record: ReviewRecord, act: ReviewAct) -> dict[str, Any] | None:
    """The columns ``act`` changes on ``record``, or None when it changes nothing (a claim
    repeated by its claimant). Both stores decide with this one function, then write the
    change only if the item is still as read.

    Raises:
        ReviewClosed: the item is resolved or dismissed (``review_closed``).
        ReviewClaimed: another person claimed it (``review_claimed``).
    """
    from flowpark.errors import ReviewClaimed, ReviewClosed

    if record.state.closed:
        raise ReviewClosed(
            f"review {record.id} is {record.state.value} already (by {record.closed_by})",
            review_id=record.id,
            state=record.state.value,
            closed_by=record.closed_by,
        )
    if record.state is ReviewState.CLAIMED and record.claimed_by != act.actor:
        raise ReviewClaimed(
            f"review {record.id} is claimed by {record.claimed_by}: only they can "
            f"{act.verb.value} it",
            review_id=record.id,
            claimed_by=record.claimed_by,
        )
    if act.verb is ReviewVerb.CLAIM:
        if record.state is ReviewState.CLAIMED:
            return None
        return {"state": ReviewState.CLAIMED.value, "claimed_by": act.actor, "claimed_at": act.at}
    state = ReviewState.RESOLVED if act.verb is ReviewVerb.RESOLVE else ReviewState.DISMISSED
    return {"state": state.value, "closed_by": act.actor, "closed_at": act.at, "note": act.note}


class Reviews(Protocol):
    """The review queue: list, read, and act on its items."""

    async def find_reviews(
        self, where: ReviewFilter, limit: int = 100, after: int | None = None
    ) -> list[ReviewRecord]:
        """Items ``where`` selects, oldest first (by ``sequence``), after the ``after``
        sequence (a page's cursor), at most ``limit``."""
        ...

    async def get_review(self, review_id: str) -> ReviewRecord:
        """One item.

        Raises:
            ReviewNotFound: no such item (``review_not_found``).
        """
        ...

    async def act_on_review(self, act: ReviewAct) -> ReviewRecord:
        """Claim, resolve or dismiss an item (see :func:`act_on`); the item as it is after.

        Raises:
            ReviewNotFound: no such item (``review_not_found``).
            ReviewClosed: it is closed (``review_closed``).
            ReviewClaimed: another person claimed it (``review_claimed``).
        """
        ...

    async def count_reviews(self) -> dict[ReviewState, int]:
        """How many items are in each state (every state present, 0 when none)."""
        ...

    async def oldest_open(self) -> datetime | None:
        """When the oldest item not closed (open or claimed) was created, or None."""
        ...
