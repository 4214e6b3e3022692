"""A wait's ``on_warning`` capability on a real node (SQLite, real time, the node's own sweep):
an extension made at once moves the warning with the end; the capability runs once at the
moved warning (a review requested then), and the wait still times out at the moved end."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

from pydantic import BaseModel

from flowpark.flows import Backoff, Bag, Capability, Flow, HttpTrigger, StepContext
from flowpark.runtime.app import create_app
from tests.support.api import wait_for_state
from tests.support.server import live_server

ROUTE = "/api/v1/ladder"


class Order(BaseModel):
    order: str


class State(BaseModel):
    done: bool = False


class Check(Capability):
    id = "ladder.check"
    idempotent = True
    puts = (State,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(State(done=False))  # never done: the wait runs to its end


class AskForReview(Capability):
    id = "ladder.ask_review"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        ctx.request_review(ctx.input.order, "the budget is nearly spent")


def _done(bag: Bag) -> bool:
    return bag.get(State).done


def _flow() -> Flow:
    return Flow("ladder", "1.0.0", input=Order, trigger=HttpTrigger("POST", ROUTE)).poll_until(
        Check(),
        until=_done,
        interval=Backoff.fixed("PT1S"),
        timeout="PT3S",
        reads=(State,),
        warn_before="PT1S",
        on_warning=AskForReview(),
    )


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def test_a_served_wait_runs_its_warning_once_and_times_out_at_the_moved_end(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "ladder.db"
    shutil.copyfile(_sqlite_template, path)
    app = lambda s: create_app(s, flows=[lambda _deps: [_flow()]])  # noqa: E731
    with live_server(f"sqlite:///{path}", app_factory=app, timer_scan_interval=0.5) as node:
        async with node.client() as http:
            resp = await http.post(ROUTE, json={"order": "o-9"}, headers={"Idempotency-Key": "o-9"})
            assert resp.status_code == 202, resp.text
            instance = resp.json()["instanceId"]
            first = (await http.get(f"/api/v1/instances/{instance}")).json()["budget"]
            extended = await http.post(
                f"/api/v1/instances/{instance}/budget", json={"extendBy": "PT2S"}
            )
            assert extended.status_code == 200, extended.text
            budget = (await http.get(f"/api/v1/instances/{instance}")).json()["budget"]
            # both instants moved by the extension
            assert _at(budget["endsAt"]) - _at(first["endsAt"]) == timedelta(seconds=2)
            assert _at(budget["warnsAt"]) - _at(first["warnsAt"]) == timedelta(seconds=2)
            view = await wait_for_state(http, instance, timeout=30)
            reviews = (await http.get("/api/v1/reviews")).json()
            events = (await http.get("/api/v1/events")).json()
    assert view["state"] == "failed", view
    assert view["error"]["code"] == "flow.poll_not_satisfied", view["error"]
    [review] = reviews
    assert (review["instanceId"], review["subject"]) == (instance, "o-9")
    warn_at, end_at = _at(budget["warnsAt"]), _at(budget["endsAt"])
    # the review was asked at the (moved) warning, before the end; the end came as stored
    assert warn_at <= _at(review["createdAt"]) < end_at
    assert _at(view["updatedAt"]) >= end_at
    assert [e["name"] for e in events if e["name"] == "budget.warning"] == ["budget.warning"]
    asked = [row for row in view["journal"] if row["capabilityId"] == "ladder.ask_review"]
    assert len(asked) == 1
