"""Correlation keys on the production engine (virtual clock, SQLite): a step's
``ctx.correlate`` is written with its row and held while the instance lives; another live
instance recording it fails its step for good with ``correlation_key_in_use``; every ending
releases it; a failed try and a compensation record none."""

from __future__ import annotations

from pydantic import BaseModel

from flowpark import Capability, Correlate, Flow, Signal, StepContext
from flowpark.engine.ports import Commit
from flowpark.engine.records import Ack, InstanceState, Outcome, StepKind
from flowpark.testing import FlowHarness


class Build(BaseModel):
    run_id: str
    fail_after: bool = False


class Started(BaseModel):
    run_id: str


class Done(BaseModel):
    run_id: str


DONE = Signal("ci.done", Done, correlate=Correlate("ci", key=lambda p: p.run_id))


class StartBuild(Capability):
    id = "ci.start"
    puts = (Started,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.correlate("ci", ctx.input.run_id)
        ctx.correlate("ci", ctx.input.run_id)  # a repeat records it once
        ctx.correlate("ci.log", f"log-{ctx.input.run_id}")
        if ctx.input.fail_after and ctx.try_number == 1:
            raise RuntimeError("the CI answered 500")  # this try's keys are not recorded
        ctx.put(Started(run_id=ctx.input.run_id))


class Undo(Capability):
    id = "ci.undo"

    async def execute(self, ctx: StepContext) -> None:
        ctx.correlate("ci", "undo")  # refused: a compensation records no key


def build_flow() -> Flow:
    return (
        Flow("ci.build", "1.0.0", input=Build)
        .step(StartBuild())
        .await_signal(DONE)
        .returns(lambda bag: bag.get(Done).run_id)
    )


async def held(h: FlowHarness, instance_id: str) -> list[tuple[str, str]]:
    return [(c.provider, c.key) for c in await h.store.correlations.held(instance_id)]


async def test_a_recorded_key_is_held_while_the_instance_waits_and_released_at_its_end() -> None:
    async with FlowHarness.open([build_flow()]) as h:
        inst = (await h.start("ci.build", {"run_id": "r-1"})).instance
        assert inst.state is InstanceState.SUSPENDED
        assert await held(h, inst.id) == [("ci", "r-1"), ("ci.log", "log-r-1")]
        found = await h.store.correlations.holder("ci.build", "ci", "r-1")
        assert found is not None and found.instance_id == inst.id
        # the key was written with the step's row: the same instant
        row = next(r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "ci.start")
        assert found.created_at == row.committed_at
        await h.signal(inst.id, "ci.done", {"run_id": "r-1"})
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED
        assert await held(h, inst.id) == []
        assert await h.store.correlations.holder("ci.build", "ci", "r-1") is None


async def test_a_key_another_live_instance_holds_fails_the_step_for_good() -> None:
    async with FlowHarness.open([build_flow()]) as h:
        first = (await h.start("ci.build", {"run_id": "r-7"})).instance
        second = (await h.start("ci.build", {"run_id": "r-7"})).instance
        assert second.state is InstanceState.FAILED
        assert second.failure is not None and second.failure.code == "flow.step_failed"
        rows = [r for r in (await h.snapshot(second.id)).steps if r.kind is StepKind.STEP]
        assert [(r.outcome, r.error_type, r.final) for r in rows] == [
            (Outcome.FAILURE, "correlation_key_in_use", True)
        ]
        assert "r-7" in (rows[0].error_detail or "") and first.id in (rows[0].error_detail or "")
        assert await held(h, second.id) == []  # not even its other, free key
        assert await held(h, first.id) == [("ci", "r-7"), ("ci.log", "log-r-7")]
        # once the holder ends (cancelled here), the key is free for a new instance
        await h.engine.cancel(first.id)
        assert await held(h, first.id) == []
        third = (await h.start("ci.build", {"run_id": "r-7"})).instance
        assert third.state is InstanceState.SUSPENDED
        assert await held(h, third.id) == [("ci", "r-7"), ("ci.log", "log-r-7")]


async def test_a_failed_try_records_no_key_and_its_retry_does() -> None:
    from flowpark import CapabilityOptions, RetryPolicy

    class Retried(StartBuild):
        options = CapabilityOptions(retry=RetryPolicy(maximum_tries=2))

    flow = (
        Flow("ci.build", "1.0.0", input=Build)
        .step(Retried())
        .await_signal(DONE)
        .returns(lambda bag: bag.get(Done).run_id)
    )
    async with FlowHarness.open([flow]) as h:
        inst = (await h.start("ci.build", {"run_id": "r-2", "fail_after": True})).instance
        assert await held(h, inst.id) == []  # the first try failed: parked for its retry
        await h.advance_to_next_wake(inst.id)
        assert (await h.instance(inst.id)).state is InstanceState.SUSPENDED
        assert await held(h, inst.id) == [("ci", "r-2"), ("ci.log", "log-r-2")]


async def test_a_compensation_records_no_key() -> None:
    flow = (
        Flow("ci.build", "1.0.0", input=Build)
        .step(StartBuild())
        .compensate_with(Undo())
        .fail("ci.refused")
    )
    async with FlowHarness.open([flow]) as h:
        inst = (await h.start("ci.build", {"run_id": "r-3"})).instance
        undo = [r for r in (await h.snapshot(inst.id)).steps if r.kind is StepKind.COMPENSATION]
        assert undo and undo[-1].outcome is Outcome.FAILURE
        assert undo[-1].error_type == "ValueError"
        assert "compensation" in (undo[-1].error_detail or "")
        assert await held(h, inst.id) == []


async def test_the_keys_ride_on_the_write_that_carries_the_row() -> None:
    async with FlowHarness.open([build_flow()]) as h:
        commits: list[Commit] = []
        commit = h.store.runs.commit

        async def spied(value: Commit) -> Ack:
            commits.append(value)
            return await commit(value)

        h.store.runs.commit = spied  # type: ignore[method-assign,assignment]
        inst = (await h.start("ci.build", {"run_id": "r-9"})).instance
        assert inst.state is InstanceState.SUSPENDED
        # one write: the step's row, its keys and the wait's park together
        assert [([r.capability_id for r in c.rows], c.park is not None) for c in commits] == [
            (["ci.start"], True)
        ]
        assert [(k.provider, k.key) for k in commits[0].correlations] == [
            ("ci", "r-9"),
            ("ci.log", "log-r-9"),
        ]


async def test_a_refused_key_of_a_row_committed_at_once_fails_its_step_too() -> None:
    class StartAndReview(StartBuild):
        async def execute(self, ctx: StepContext) -> None:
            ctx.request_review("run", "look at it")  # its row is committed at once
            await super().execute(ctx)

    flow = (
        Flow("ci.build", "1.0.0", input=Build)
        .step(StartAndReview())
        .await_signal(DONE)
        .returns(lambda bag: bag.get(Done).run_id)
    )
    async with FlowHarness.open([flow]) as h:
        first = (await h.start("ci.build", {"run_id": "r-5"})).instance
        second = (await h.start("ci.build", {"run_id": "r-5"})).instance
        assert first.state is InstanceState.SUSPENDED
        assert second.state is InstanceState.FAILED
        rows = [r for r in (await h.snapshot(second.id)).steps if r.kind is StepKind.STEP]
        assert [(r.error_type, r.final) for r in rows] == [("correlation_key_in_use", True)]
        reviews = await h.store.reads.list_reviews()
        assert [r["instance_id"] for r in reviews] == [first.id]  # the refused try's: none
