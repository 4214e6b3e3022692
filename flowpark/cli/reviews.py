"""``flowpark reviews ...``: the review queue (items flows' ``request_review`` wrote):
list and show items, claim one, resolve or dismiss it with a note."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from flowpark.cli._client import (
    DEFAULT_URL,
    AsJson,
    Token,
    Url,
    _api,
    _json,
    _short,
    out,
    print_table,
    segment,
    shown_id,
)

__all__ = ["reviews_app"]

reviews_app = typer.Typer(
    help="The review queue: list, show, claim, resolve and dismiss review items.",
    no_args_is_help=True,
)


class ReviewStateOpt(StrEnum):
    open = "open"
    claimed = "claimed"
    resolved = "resolved"
    dismissed = "dismissed"


ReviewId = Annotated[str, typer.Argument(metavar="REVIEW", help="The review's id.")]
Note = Annotated[str | None, typer.Option("--note", metavar="TEXT", help="What was done, and why.")]


@reviews_app.command("list")
def list_reviews(
    url: Url = DEFAULT_URL,
    token: Token = None,
    state: Annotated[
        list[ReviewStateOpt] | None,
        typer.Option("--state", help="State (repeat for any of several)."),
    ] = None,
    instance: Annotated[
        str | None,
        typer.Option("--instance", metavar="ID", help="Of this instance (an id or its start)."),
    ] = None,
    flow: Annotated[str | None, typer.Option("--flow", metavar="NAME", help="Flow name.")] = None,
    claimed_by: Annotated[
        str | None, typer.Option("--claimed-by", metavar="NAME", help="Claimed by this person.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, metavar="N", help="Page size.")] = 100,
    after: Annotated[
        int | None,
        typer.Option("--after", min=0, metavar="SEQUENCE", help="Items after this sequence."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """List review items, oldest first (the filters of GET /api/v1/reviews)."""
    with _api(url, token) as api:
        params: dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = [s.value for s in state]
        if instance:
            params["instanceId"] = api.resolve(instance)
        if flow:
            params["flow"] = flow
        if claimed_by:
            params["claimedBy"] = claimed_by
        if after is not None:
            params["after"] = after
        items = api.call("GET", "/api/v1/reviews", params=params)
    if as_json:
        _json(items)
        return
    table = Table(box=None, header_style="bold")
    table.add_column("REVIEW", no_wrap=True)
    for column in ("STATE", "SUBJECT", "REASON", "INSTANCE", "FLOW", "CLAIMED BY", "CREATED"):
        table.add_column(column, overflow="fold")
    for i in items:
        table.add_row(
            i["id"],
            i["state"],
            Text(i["subject"]),
            Text(i["reason"]),
            shown_id(i["instanceId"]),
            i["flow"] or "-",
            Text(i["claimedBy"] or "-"),
            _short(i["createdAt"]),
        )
    print_table(table)
    out.print(f"{len(items)} review(s)")


def _print_review(item: dict[str, Any], instance: dict[str, Any] | None) -> None:
    out.print(Text.assemble((item["id"], "bold"), f"  {item['state']}"))
    out.print(Text(f"subject: {item['subject']}"))
    out.print(Text(f"reason: {item['reason']}"))
    if item.get("details"):
        out.print(Text(f"details: {json.dumps(item['details'], ensure_ascii=False)}"))
    out.print(f"created: {_short(item['createdAt'])}")
    if item.get("claimedBy"):
        out.print(Text(f"claimed by {item['claimedBy']} at {_short(item['claimedAt'])}"))
    if item.get("closedBy"):
        out.print(Text(f"{item['state']} by {item['closedBy']} at {_short(item['closedAt'])}"))
    if item.get("note"):
        out.print(Text(f"note: {item['note']}"))
    if instance is None:
        out.print(Text(f"instance: {item['instanceId']} (purged)"))
        return
    line = f"instance: {instance['instanceId']}  {instance['flow']}@{instance['version']}"
    out.print(Text(f"{line}  {instance['state']}"))
    error = instance.get("error")
    if error:
        out.print(Text(f"error: {error['code']}: {error['message']}"))
    out.print(f"(flowpark instances show {instance['instanceId']} for its journal)")


@reviews_app.command("show")
def show(
    review_id: ReviewId, url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False
) -> None:
    """One review item: why it was asked for, who claimed or closed it, and its instance's
    state and error."""
    from flowpark.cli._client import EXIT_NOT_FOUND

    with _api(url, token) as api:
        item = api.call("GET", f"/api/v1/reviews/{segment(review_id)}")
        try:
            instance = api.call("GET", f"/api/v1/instances/{segment(item['instanceId'])}")
        except typer.Exit as exc:  # the instance was purged since: the item stays
            if exc.exit_code != EXIT_NOT_FOUND:
                raise
            instance = None
    if as_json:
        _json({**item, "instance": instance})
        return
    _print_review(item, instance)


def _act(
    url: str, token: str | None, review_id: str, verb: str, note: str | None
) -> dict[str, Any]:
    body = {"note": note} if note is not None else None
    with _api(url, token) as api:
        answer: dict[str, Any] = api.call(
            "POST", f"/api/v1/reviews/{segment(review_id)}/{verb}", body=body
        )
    return answer


def _said(item: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _json(item)
        return
    who = item["closedBy"] or item["claimedBy"]
    when = item["closedAt"] or item["claimedAt"]
    out.print(Text(f"review {item['id']}: {item['state']} by {who} at {_short(when)}"))


@reviews_app.command("claim")
def claim(
    review_id: ReviewId, url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False
) -> None:
    """Claim an open review (yours to resolve or dismiss). Exit 5 when another person
    claimed it or it is closed."""
    _said(_act(url, token, review_id, "claim", None), as_json)


@reviews_app.command("resolve")
def resolve(
    review_id: ReviewId,
    url: Url = DEFAULT_URL,
    token: Token = None,
    note: Note = None,
    as_json: AsJson = False,
) -> None:
    """Resolve a review (open, or claimed by you) with a note. Exit 5 when another person
    claimed it or it is closed already."""
    _said(_act(url, token, review_id, "resolve", note), as_json)


@reviews_app.command("dismiss")
def dismiss(
    review_id: ReviewId,
    url: Url = DEFAULT_URL,
    token: Token = None,
    note: Note = None,
    as_json: AsJson = False,
) -> None:
    """Dismiss a review (nothing to do) with a note. Exit 5 when another person claimed
    it or it is closed already."""
    _said(_act(url, token, review_id, "dismiss", note), as_json)
