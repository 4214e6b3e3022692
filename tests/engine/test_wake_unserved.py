"""An operator's wake of an instance whose flow version the node does not serve is refused
(``version_not_served``) and changes nothing; a node that serves it wakes it."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import BaseModel

from flowpark.engine import Engine
from flowpark.engine.records import InstanceState
from flowpark.errors import ErrorCode, VersionNotServed
from flowpark.flows import Backoff, Bag, Capability, Flow, StepContext
from flowpark.flows.catalog import Catalog
from flowpark.testing import FlowHarness, Scripted


class Start(BaseModel):
    job: str = "j-1"


class Job(BaseModel):
    state: str


class Check(Capability):
    id = "job.check"
    idempotent = True
    puts = (Job,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job(state="running"))


def _done(bag: Bag) -> bool:
    return bag.get(Job).state == "done"


def _flow(version: str) -> Flow:
    return Flow("job.wait", version, input=Start).poll_until(
        Check(), until=_done, interval=Backoff.fixed("PT1M"), timeout="PT1H"
    )


async def test_a_wake_on_a_node_without_the_version_is_refused_and_changes_nothing() -> None:
    status = Scripted(Job(state="running"))
    async with FlowHarness.open([_flow("1.0.0")], substitutes={"job.check": status}) as h:
        inst = (await h.start("job.wait", {})).instance
        assert inst.state is InstanceState.SUSPENDED
        v2_only = Catalog()
        v2_only.register(_flow("2.0.0"))
        other = Engine(h.store, v2_only, h.clock, replace(h.engine.config, node_id="v2"))
        with pytest.raises(VersionNotServed) as refused:
            await other.wake_now(inst.id)
        assert refused.value.code is ErrorCode.VERSION_NOT_SERVED
        assert "job.wait@1.0.0" in refused.value.message
        after = await h.instance(inst.id)
        assert (after.state, after.wake_at, after.lease_owner) == (
            InstanceState.SUSPENDED,
            inst.wake_at,
            None,
        )
        assert status.calls == 1  # no attempt ran
        woken = await h.engine.wake_now(inst.id)  # the node that serves it wakes it
        assert woken is not None and status.calls == 2
