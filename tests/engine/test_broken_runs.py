"""Errors outside any capability call fail the instance once; they never wedge it."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, Field

from flowpark.engine.records import InstanceState, StepKind
from flowpark.flows import Capability, Flow, StepContext
from flowpark.testing import FlowHarness, Scripted


class When(BaseModel):
    at: datetime = Field(strict=True)


class Undo(Capability):
    id = "b.undo"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        return None


class Stamp(Capability):
    id = "b.stamp"
    puts = (When,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(When(at=datetime(2026, 1, 1, tzinfo=UTC)))


def flow(returns: object) -> Flow:
    f = Flow("b.flow", "1.0.0", input=When)
    f.step(Stamp()).compensate_with(Undo())
    f.returns(returns)  # type: ignore[arg-type]
    return f


async def test_strict_models_read_back_what_they_wrote() -> None:
    async with FlowHarness.open([flow(lambda bag: bag.get(When))]) as h:
        started = await h.start("b.flow", {"at": "2026-02-03T04:05:06Z"})
        assert started.instance.state is InstanceState.COMPLETED
        assert started.instance.result == {"at": "2026-01-01T00:00:00Z"}


async def test_a_result_with_datetimes_is_stored_as_iso_strings() -> None:
    returns = lambda bag: {"at": datetime(2026, 5, 1, tzinfo=UTC)}  # noqa: E731
    async with FlowHarness.open([flow(returns)]) as h:
        started = await h.start("b.flow", {"at": "2026-02-03T04:05:06Z"})
        assert started.instance.state is InstanceState.COMPLETED
        assert started.instance.result == {"at": "2026-05-01T00:00:00Z"}


async def test_an_unstorable_result_fails_the_instance_once_and_compensates() -> None:
    undo = Scripted(None)
    returns = lambda bag: {"thing": object()}  # noqa: E731
    async with FlowHarness.open([flow(returns)], substitutes={"b.undo": undo}) as h:
        started = await h.start("b.flow", {"at": "2026-02-03T04:05:06Z"})
        inst = started.instance
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code in (
            "flow.expression_failed",
            "flow.internal_error",
        )
        assert undo.calls == 1
        assert await h.calls(inst.id, "b.undo", StepKind.COMPENSATION) == 1
        report = await h.sweep()
        assert report.claimed == 0  # nothing left to re-claim
