"""The instance view shows what each execution put (redacted by the capability's hook,
bounded in size) and, for a failed instance, the step where it failed."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from flowpark.api.models import InstanceView
from flowpark.api.values import MAX_VALUE_CHARS
from flowpark.flows import Backoff, Capability, Flow, HttpTrigger, StepContext
from tests.api.operator_support import operated


class Order(BaseModel):
    order_id: str


class Session(BaseModel):
    account: str
    api_key: str
    nested: dict[str, Any] = {}


class Progress(BaseModel):
    state: str
    blob: str = ""


class Login(Capability):
    id = "v.login"
    idempotent = True
    puts = (Session,)
    secret_fields = ("api_key", "password")

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Session(account="acme", api_key="sk-live-1", nested={"password": "hunter2"}))


class Check(Capability):
    id = "v.check"
    idempotent = True
    puts = (Progress,)

    async def execute(self, ctx: StepContext) -> None:
        big = "x" * (MAX_VALUE_CHARS * 2) if ctx.input.order_id == "big" else ""
        ctx.put(Progress(state="RUNNING", blob=big))


class Boom(Capability):
    id = "v.boom"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        raise RuntimeError("provider said no")


def values_flow() -> Flow:
    flow = Flow("v.poll", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/v-poll"))
    flow.step(Login())
    flow.poll_until(
        Check(),
        until=lambda bag: bag.get(Progress).state == "DONE",
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(minutes=10),
        reads=(Progress,),
    )
    return flow


def failing_flow() -> Flow:
    flow = Flow("v.fail", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/v-fail"))
    flow.step(Login())
    flow.step(Boom())
    return flow


def refusing_flow() -> Flow:
    flow = Flow("v.refuse", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/v-ref"))
    flow.step(Login())
    flow.fail("v.refused", "the order was refused")
    return flow


async def test_each_execution_shows_its_put_values_redacted_and_bounded(store_url: str) -> None:
    async with operated(store_url, [values_flow(), failing_flow(), refusing_flow()]) as op:
        h = op.h
        small = (await h.start("v.poll", {"order_id": "o-1"})).instance.id
        await h.advance_to_next_wake(small)
        big = (await h.start("v.poll", {"order_id": "big"})).instance.id
        async with op.client() as client:
            view = (await client.get(f"/api/v1/instances/{small}")).json()
            InstanceView.model_validate(view)
            by_step = {(r["capabilityId"], r["scope"]): r for r in view["journal"]}
            login = by_step[("v.login", 0)]
            assert login["values"] == {
                "Session": {"account": "acme", "api_key": "***", "nested": {"password": "***"}}
            }
            assert login["valuesTruncated"] is False
            for scope in (0, 1):
                assert by_step[("v.check", scope)]["values"] == {
                    "Progress": {"state": "RUNNING", "blob": ""}
                }
            # each attempt's tries carry the same values
            tries = [t for a in view["attempts"] for t in a["tries"]]
            assert [t["values"]["Progress"]["state"] for t in tries] == ["RUNNING", "RUNNING"]

            cut = (await client.get(f"/api/v1/instances/{big}")).json()
            row = next(r for r in cut["journal"] if r["capabilityId"] == "v.check")
            assert row["valuesTruncated"] is True
            shown = row["values"]["Progress"]
            assert isinstance(shown, str) and shown.endswith(" characters)")
            assert len(shown) < MAX_VALUE_CHARS + 40

        # the journal keeps what was put: later steps read the real secret
        snap = await h.snapshot(small)
        assert snap.steps[0].values["Session"]["api_key"] == "sk-live-1"


async def test_a_failed_instance_names_the_step_it_failed_at(store_url: str) -> None:
    async with operated(store_url, [values_flow(), failing_flow(), refusing_flow()]) as op:
        h = op.h
        failed = (await h.start("v.fail", {"order_id": "o-2"})).instance
        refused = (await h.start("v.refuse", {"order_id": "o-3"})).instance
        assert failed.state == "failed" and refused.state == "failed"
        async with op.client() as client:
            view = (await client.get(f"/api/v1/instances/{failed.id}")).json()
            InstanceView.model_validate(view)
            assert view["error"]["code"] == "flow.step_failed"
            assert view["error"]["step"] == {
                "stepId": 1,
                "kind": "capability",
                "label": "v.boom",
                "capabilityId": "v.boom",
            }
            other = (await client.get(f"/api/v1/instances/{refused.id}")).json()
            assert other["error"]["step"] == {
                "stepId": 1,
                "kind": "fail",
                "label": "fail v.refused",
                "capabilityId": None,
            }
            running = (await h.start("v.poll", {"order_id": "o-4"})).instance
            parked = (await client.get(f"/api/v1/instances/{running.id}")).json()
            assert parked["error"] is None


class Decline(Capability):
    id = "v.decline"
    idempotent = True

    async def execute(self, ctx: StepContext) -> Any:
        return ctx.fail("v.declined", "the provider declined")


async def test_a_step_that_decides_to_fail_is_named(store_url: str) -> None:
    flow = Flow("v.decline", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/v-dec"))
    flow.step(Login())
    flow.step(Decline())
    async with operated(store_url, [flow]) as op:
        failed = (await op.h.start("v.decline", {"order_id": "o-5"})).instance
        async with op.client() as client:
            view = (await client.get(f"/api/v1/instances/{failed.id}")).json()
        assert view["error"]["code"] == "v.declined"
        assert view["error"]["step"]["stepId"] == 1
        assert view["error"]["step"]["capabilityId"] == "v.decline"
        row = next(r for r in view["journal"] if r["capabilityId"] == "v.decline")
        assert row["outcome"] == "success"  # the execution ran; it decided to fail
