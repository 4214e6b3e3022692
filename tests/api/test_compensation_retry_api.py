"""Compensations that failed for good over the API, on both stores: the instance view
names them, the list filter finds them, and ``POST .../compensations/retry`` runs them
again (idempotent by key, recorded with the actor), with problems for bad requests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from flowpark.client import AsyncClient, Conflict
from flowpark.engine.records import InstanceState
from flowpark.flows import CapabilityOptions, Flow, RetryPolicy
from flowpark.runtime.app import create_app
from flowpark.settings import Settings
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Job, Order, Start
from tests.support.api import assert_problem
from tests.support.server import TOKEN, LiveServer, live_server

OPS, VIEWER = "ops-secret", "viewer-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate,viewer:{VIEWER}:read"
LIST = "/api/v1/instances"


class Undo(Start):
    id = "t.undo"
    idempotent = True
    puts = ()
    options = CapabilityOptions(retry=RetryPolicy(maximum_tries=2))


def _flow() -> Flow:
    flow = Flow("t.undo-api", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(Undo())
    flow.await_signal(READY)
    return flow


@dataclass
class Served:
    h: FlowHarness
    server: LiveServer
    undo: Scripted


@pytest.fixture
async def served(store_url: str) -> AsyncIterator[Served]:
    undo = Scripted(
        RuntimeError("refused: token=s3cr3t-value"),
        RuntimeError("refused: token=s3cr3t-value"),
        RuntimeError("still refused"),
        None,
    )
    flows = [_flow()]
    subs = {"t.start": Scripted(Job(job_id="j")), "t.undo": undo}
    async with FlowHarness.open(
        flows, database_url=store_url, migrate=False, substitutes=subs
    ) as h:

        def factory(s: Settings) -> FastAPI:
            return create_app(s, clock=h.clock, flows=[lambda _deps: flows])

        with live_server(
            store_url, app_factory=factory, run_sweeper=False, api_tokens=TOKENS
        ) as srv:
            yield Served(h, srv, undo)


def retry_url(instance_id: str) -> str:
    return f"{LIST}/{instance_id}/compensations/retry"


async def test_a_failed_compensation_is_shown_listed_and_retried_until_it_clears(
    served: Served,
) -> None:
    h = served.h
    inst = (await h.start("t.undo-api", {"order_id": "o-1"})).instance
    clean = (await h.start("t.undo-api", {"order_id": "o-2"})).instance
    await h.engine.cancel(inst.id)
    await h.wait_until(lambda i: i.state is not InstanceState.SUSPENDED, inst.id)
    async with served.server.client(token=OPS) as client:
        view = (await client.get(f"{LIST}/{inst.id}")).json()
        assert view["state"] == "cancelled"
        (failed,) = view["compensationFailures"]
        assert failed["capabilityId"] == "t.undo" and failed["tries"] == 2
        assert failed["step"] == {
            "stepId": 0,
            "kind": "capability",
            "label": "t.start",
            "capabilityId": "t.start",
        }
        assert failed["error"] == {"code": "RuntimeError", "message": "refused: token=***"}
        (detail,) = view["error"]["details"]["compensation_failures"]
        assert detail["undoes"] == "t.start" and "s3cr3t" not in str(view)
        listed = (await client.get(LIST, params={"compensationFailed": "true"})).json()
        assert [r["instanceId"] for r in listed["instances"]] == [inst.id]

        first = await client.post(retry_url(inst.id), headers={"Idempotency-Key": "r-1"})
        assert first.status_code == 200, first.text
        answer = first.json()
        assert answer["retried"] == [
            {"stepId": 0, "scope": 0, "capabilityId": "t.undo", "step": failed["step"]}
        ]
        assert (answer["state"], answer["stillFailed"], answer["actor"]) == (
            "cancelled",
            1,
            "ops",
        )
        repeat = await client.post(retry_url(inst.id), headers={"Idempotency-Key": "r-1"})
        assert repeat.status_code == 200 and repeat.json() == answer
        assert served.undo.calls == 3  # the repeat ran nothing
        view = (await client.get(f"{LIST}/{inst.id}")).json()
        assert view["compensationFailures"][0]["error"]["message"] == "still refused"

        # the Python client's call: the same route and answer
        async with AsyncClient(served.server.base_url, OPS) as python:
            second = await python.retry_compensations(inst.id, idempotency_key="r-2")
            assert (second.state, second.still_failed) == (InstanceState.CANCELLED, 0)
            with pytest.raises(Conflict) as refused:
                await python.retry_compensations(clean.id)
            assert refused.value.code == "compensation_not_failed"
        view = (await client.get(f"{LIST}/{inst.id}")).json()
        assert view["state"] == "cancelled" and view["compensationFailures"] == []
        assert "compensation_failures" not in view["error"]["details"]
        assert [(a["action"], a["actor"]) for a in view["actions"]] == [
            ("retry_compensations", "ops"),
            ("retry_compensations", "ops"),
        ]
        kinds = [(r["kind"], r["try"], r["outcome"]) for r in view["journal"]]
        assert kinds[-4:] == [
            ("retry", 1, "success"),
            ("compensation", 3, "failure"),
            ("retry", 2, "success"),
            ("compensation", 4, "success"),
        ]
        listed = (await client.get(LIST, params={"compensationFailed": "true"})).json()
        assert listed["instances"] == []

        # nothing (left) to retry: a problem with a stable code, not an error
        for target in (inst.id, clean.id):
            resp = await client.post(retry_url(target))
            assert_problem(resp, 409, "compensation_not_failed")
    assert served.undo.calls == 4


async def test_bad_retry_requests_are_problems(served: Served) -> None:
    inst = (await served.h.start("t.undo-api", {"order_id": "o-1"})).instance
    async with served.server.client(token=OPS) as client:
        assert_problem(await client.post(retry_url("not-an-id")), 404, "instance_not_found")
        unknown = "01936b2e-b144-7a5d-83e7-31c28f9a0b14"
        assert_problem(await client.post(retry_url(unknown)), 404, "instance_not_found")
        long_key = {"Idempotency-Key": "k" * 201}
        resp = await client.post(retry_url(inst.id), headers=long_key)
        assert_problem(resp, 400, "idempotency_key_invalid")
        get = await client.get(retry_url(inst.id))
        assert_problem(get, 405, "method_not_allowed")
        bad = await client.get(LIST, params={"compensationFailed": "perhaps"})
        assert_problem(bad, 422, "input_invalid")
    async with served.server.client(token=VIEWER) as viewer:
        assert_problem(await viewer.post(retry_url(inst.id)), 403, "forbidden")
    assert served.undo.calls == 0


UNDONE = {"stepId": 0, "kind": "capability", "label": "t.start", "capabilityId": "t.start"}


async def test_a_compensation_waiting_for_its_next_try_is_named_as_a_compensation(
    served: Served,
) -> None:
    h = served.h
    inst = (await h.start("t.undo-api", {"order_id": "o-w"})).instance
    await h.engine.cancel(inst.id)  # t.undo's first try fails: it waits for its second
    parked = await h.instance(inst.id)
    assert (parked.state, parked.ending) == (InstanceState.SUSPENDED, InstanceState.CANCELLED)
    async with served.server.client(token=OPS) as client:
        view = (await client.get(f"{LIST}/{inst.id}")).json()
        (row,) = [
            r
            for r in (await client.get(LIST, params={"flow": "t.undo-api"})).json()["instances"]
            if r["instanceId"] == inst.id
        ]
    async with httpx.AsyncClient(base_url=served.server.base_url, timeout=30) as console:
        assert (await console.post("/ui/sign-in", data={"token": OPS})).status_code == 303
        page = (await console.get(f"/ui/instances/{inst.id}")).text
    # the compensating capability and the step it undoes, as compensationFailures name them
    for waiting in (view["waiting"], row["waiting"]):
        assert waiting["kind"] == "retry" and waiting["capabilityId"] == "t.undo"
        assert (waiting["stepId"], waiting["undoes"]) == (0, UNDONE)
    assert "of compensation <code>t.undo</code>, undoing step 0" in page


async def test_the_retry_answer_names_the_step_each_compensation_undoes(served: Served) -> None:
    h = served.h
    inst = (await h.start("t.undo-api", {"order_id": "o-n"})).instance
    await h.engine.cancel(inst.id)
    await h.wait_until(lambda i: i.state is not InstanceState.SUSPENDED, inst.id)
    async with served.server.client(token=OPS) as client:
        answer = (await client.post(retry_url(inst.id))).json()
        view = (await client.get(f"{LIST}/{inst.id}")).json()
    (retried,) = answer["retried"]
    assert retried == {"stepId": 0, "scope": 0, "capabilityId": "t.undo", "step": UNDONE}
    assert view["waiting"] is None  # ended again
