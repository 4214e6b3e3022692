"""Heartbeating capabilities, streams and business outcomes in the engine: the production
engine and store on the virtual clock (plus fenced stream writes on both stores)."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from flowpark.engine.ports import StreamWrite
from flowpark.engine.records import InstanceState, NewInstance, Outcome, StepKind, StepRow
from flowpark.errors import StaleFencingToken
from flowpark.flows import (
    Capability,
    CapabilityOptions,
    Decision,
    Flow,
    RetryPolicy,
    StepContext,
    Stream,
)
from flowpark.store import SqlStore
from flowpark.testing import FlowHarness
from tests.engine.pacing import Paced

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HEARTBEAT = timedelta(seconds=30)
EVERY = timedelta(seconds=2)


class Start(BaseModel):
    pass


class Mark(BaseModel):
    round: int


class Line(BaseModel):
    text: str


LOG = Stream("Log", Line, max_bytes=50)


def beating(**changes: Any) -> CapabilityOptions:
    values: dict[str, Any] = {
        "execute_timeout": timedelta(hours=1),
        "heartbeat_timeout": HEARTBEAT,
        "retry": RetryPolicy(maximum_tries=2),
    }
    values.update(changes)
    return CapabilityOptions(**values)


class Script(Capability):
    """A capability whose body is a test function ``body(ctx)``."""

    def __init__(self, cap_id: str, body: Any, options: CapabilityOptions | None = None) -> None:
        self.id = cap_id  # type: ignore[misc]
        self.body = body
        if options is not None:
            self.options = options  # type: ignore[misc]

    async def execute(self, ctx: StepContext) -> Decision | None:
        return await self.body(ctx)  # type: ignore[no-any-return]


class After(Capability):
    id = "after"

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, ctx: StepContext) -> None:
        self.calls += 1


def flow(*steps: Capability, name: str = "hb.test", streams: tuple[Stream, ...] = ()) -> Flow:
    built = Flow(name, "1.0.0", input=Start, streams=streams)
    for cap in steps:
        built.step(cap)
    return built


async def rows(h: FlowHarness, instance_id: str, capability_id: str) -> list[StepRow]:
    snap = await h.snapshot(instance_id)
    return [r for r in snap.steps if r.capability_id == capability_id and r.kind is StepKind.STEP]


async def test_a_try_reads_the_checkpoint_its_predecessor_recorded() -> None:
    seen: list[tuple[int, Mark | None]] = []

    async def body(ctx: StepContext) -> None:
        seen.append((ctx.try_number, ctx.last_heartbeat_value(Mark)))
        if ctx.try_number == 1:
            await ctx.heartbeat(Mark(round=1))
            await ctx.heartbeat(Mark(round=2))
            raise RuntimeError("connection reset")

    async with FlowHarness.open([flow(Script("work", body, beating()))]) as h:
        inst_id = (await h.start("hb.test", {})).instance.id
        await h.engine.drain()
        (failed,) = await rows(h, inst_id, "work")
        assert (failed.error_type, failed.next_try_at) == (
            "RuntimeError",
            h.clock.now() + timedelta(seconds=1),
        )
        await h.advance_to_next_wake(inst_id)
        await h.engine.drain()
        assert (await h.instance(inst_id)).state is InstanceState.COMPLETED
        assert seen == [(1, None), (2, Mark(round=2))]
        beat = await h.store.runs.last_heartbeat(inst_id, 0, 0)
        assert beat is not None and (beat.try_number, beat.value) == (1, {"round": 2})


async def test_an_unchanged_value_is_written_once_per_third_of_the_timeout_a_change_at_once() -> (
    None
):
    async def body(ctx: StepContext) -> None:
        for i in range(12):  # rounds at 0, 2, ... 22 s
            await ctx.heartbeat("same" if i < 10 else "other")
            await ctx.sleep(EVERY)

    paced = Paced(Script("work", body, beating()))
    async with FlowHarness.open([flow(paced)]) as h:
        paced.clock = h.clock
        t0 = h.clock.now()
        written: list[tuple[Any, float, float]] = []
        record = h.store.runs.record_heartbeat

        async def spy(
            instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
        ) -> Any:
            written.append((value, (now - t0).total_seconds(), (lease_until - t0).total_seconds()))
            return await record(instance_id, token, value, now, lease_until)

        h.store.runs.record_heartbeat = spy  # type: ignore[method-assign]
        await h.start("hb.test", {})
        await h.engine.drain()
        # third of 30 s: "same" at 0 and 10 s (not at 2..8 or 12..18), "other" at once at
        # 20 s and not again at 22 s; each write renews the lease by the heartbeat timeout
        assert written == [("same", 0, 30), ("same", 10, 40), ("other", 20, 50)]


async def test_a_try_whose_heartbeats_stop_is_cancelled_on_its_live_node_and_retried() -> None:
    stuck = asyncio.Event()
    cancelled: list[int] = []

    async def body(ctx: StepContext) -> None:
        if ctx.try_number > 1:
            return
        await ctx.heartbeat("started")
        stuck.set()
        try:
            await ctx.sleep(timedelta(hours=1))  # hung: no heartbeat any more
        except asyncio.CancelledError:
            cancelled.append(ctx.try_number)
            raise

    async with FlowHarness.open([flow(Script("work", body, beating()))]) as h:
        t0 = h.clock.now()
        inst_id = (await h.start("hb.test", {})).instance.id
        await stuck.wait()
        h.clock.advance(HEARTBEAT)  # the watchdog on the node itself fires
        await h.engine.drain()
        (lost,) = await rows(h, inst_id, "work")
        assert (lost.error_type, lost.committed_at, lost.next_try_at) == (
            "heartbeat_timeout",
            t0 + HEARTBEAT,
            t0 + HEARTBEAT + timedelta(seconds=1),
        )
        assert "recorded no heartbeat for 0:00:30" in (lost.error_detail or "")
        assert cancelled == [1]
        await h.advance_to_next_wake(inst_id)
        await h.engine.drain()
        assert (await h.instance(inst_id)).state is InstanceState.COMPLETED
        assert [r.try_number for r in await rows(h, inst_id, "work")] == [1, 2]


async def test_closing_a_node_cancels_its_try_which_commits_nothing() -> None:
    stuck = asyncio.Event()
    cancelled: list[int] = []

    async def body(ctx: StepContext) -> None:
        await ctx.heartbeat("started")
        stuck.set()
        try:
            await asyncio.Future()
        except asyncio.CancelledError:
            cancelled.append(ctx.try_number)
            raise

    async with FlowHarness.open([flow(Script("work", body, beating()))]) as h:
        inst_id = (await h.start("hb.test", {})).instance.id
        await stuck.wait()
        assert await h.engine.close() == [inst_id]
        assert cancelled == [1]  # the try does not outlive its run
        inst = await h.instance(inst_id)
        # its lease given up: the next claim, on any node, runs it again from its checkpoint
        assert inst.state is InstanceState.SUSPENDED and inst.lease_owner is None
        assert inst.try_number == 1
        assert await rows(h, inst_id, "work") == []
        assert inst.heartbeat_value == "started"


async def test_a_write_past_the_streams_bound_is_dropped_and_reported_false() -> None:
    answers: list[bool] = []

    async def body(ctx: StepContext) -> None:
        for text in ("x" * 20, "y" * 20, "z", "é" * 5):
            answers.append(await ctx.write(LOG, Line(text=text)))

    async with FlowHarness.open([flow(Script("log", body), streams=(LOG,))]) as h:
        inst_id = (await h.start("hb.test", {})).instance.id
        assert (await h.instance(inst_id)).state is InstanceState.COMPLETED
        # {"text":"xxxxxxxxxxxxxxxxxxxx"} is 31 bytes of 50: a second one would pass the bound
        # and is dropped; a smaller one still fits (12 bytes: 43); "ééééé" is 21 bytes in
        # UTF-8 and would make 64
        assert answers == [True, False, True, False]
        stored = await h.store.streams.read_stream(inst_id, "Log")
        assert [m.payload["text"] for m in stored] == ["x" * 20, "z"]
        assert stored[0].sequence < stored[1].sequence


async def test_writing_a_stream_the_flow_does_not_declare_fails_the_try() -> None:
    async def body(ctx: StepContext) -> None:
        await ctx.write(LOG, Line(text="hello"))

    async with FlowHarness.open([flow(Script("log", body))]) as h:
        inst = (await h.start("hb.test", {})).instance
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == "flow.step_failed"
        assert inst.failure.details["error_type"] == "StreamNotDeclared"
        assert "declares no stream 'Log'" in inst.failure.message


async def test_business_outcomes_end_the_flow_without_retries() -> None:
    async def fails(ctx: StepContext) -> Decision:
        return ctx.fail("order.rejected", "the order was rejected", order="o-1")

    async def completes(ctx: StepContext) -> Decision:
        return ctx.complete({"done": ctx.try_number})

    retrying = CapabilityOptions(retry=RetryPolicy(maximum_tries=5))
    after = After()
    route = After()
    failing = flow(Script("decide", fails, retrying), name="hb.fail").on_failure(
        lambda b: b.step(route)
    )
    failing.step(after)
    async with FlowHarness.open(
        [failing, flow(Script("finish", completes, retrying), After(), name="hb.complete")]
    ) as h:
        failed = (await h.start("hb.fail", {})).instance
        assert failed.state is InstanceState.FAILED
        assert failed.failure is not None
        assert (failed.failure.code, failed.failure.details) == ("order.rejected", {"order": "o-1"})
        assert [r.outcome for r in await rows(h, failed.id, "decide")] == [Outcome.SUCCESS]
        assert (route.calls, after.calls) == (0, 0)  # a decision is not a failure to route

        done = (await h.start("hb.complete", {})).instance
        assert (done.state, done.result) == (InstanceState.COMPLETED, {"done": 1})
        assert await h.calls(done.id, "after") == 0  # completed early


async def test_a_stream_write_under_a_stale_token_is_refused(sql_store: SqlStore) -> None:
    new = NewInstance(
        id=str(uuid.uuid4()),
        flow_name="hb.test",
        flow_version="1.0.0",
        input={},
        created_at=T0,
        deadline_at=None,
        lease_owner="a",
        lease_expires_at=T0 + timedelta(seconds=30),
    )
    inst, _ = await sql_store.intake.create_instance(new)
    old = inst.fencing_token
    assert await sql_store.streams.write_stream(
        StreamWrite(inst.id, "Log", {"n": 1}, 7, T0), 100, token=old
    )
    await sql_store.runs.release(inst.id, old, T0)
    claim = await sql_store.runs.claim(inst.id, "b", T0, T0 + timedelta(seconds=30))
    assert claim is not None and claim.fencing_token > old
    with pytest.raises(StaleFencingToken) as info:
        await sql_store.streams.write_stream(
            StreamWrite(inst.id, "Log", {"n": 2}, 7, T0), 100, token=old
        )
    assert info.value.code == "stale_fencing_token"
    assert await sql_store.streams.write_stream(
        StreamWrite(inst.id, "Log", {"n": 3}, 7, T0), 100, token=claim.fencing_token
    )
    await sql_store.runs.finish(inst.id, claim.fencing_token, T0, InstanceState.COMPLETED)
    with pytest.raises(StaleFencingToken):  # ended: no try writes any more
        await sql_store.streams.write_stream(
            StreamWrite(inst.id, "Log", {"n": 4}, 7, T0), 100, token=claim.fencing_token
        )
    assert [m.payload["n"] for m in await sql_store.streams.read_stream(inst.id, "Log")] == [1, 3]


async def test_a_cancel_stops_a_heartbeating_try_at_its_next_heartbeat_write() -> None:
    reached, go = asyncio.Event(), asyncio.Event()
    rounds: list[float] = []

    async def body(ctx: StepContext) -> None:
        while True:  # a wait that never ends by itself
            rounds.append((ctx.now - t0).total_seconds())
            await ctx.heartbeat("waiting")
            if len(rounds) == 2:
                reached.set()
                await go.wait()
            await ctx.sleep(EVERY)

    compensated: list[str] = []

    async def undo(ctx: StepContext) -> None:
        compensated.append(ctx.instance_id)

    built = flow(Script("prepare", lambda ctx: asyncio.sleep(0)), name="hb.cancel")
    built.compensate_with(Script("prepare.undo", undo))
    built.step(Paced(Script("work", body, beating())))
    async with FlowHarness.open([built]) as h:
        built.items[1].capability.clock = h.clock  # type: ignore[union-attr]
        t0 = h.clock.now()
        inst_id = (await h.start("hb.cancel", {})).instance.id
        await reached.wait()
        flagged = await h.engine.cancel(inst_id)  # held by this node's try: flagged only
        assert flagged.state is InstanceState.RUNNING and flagged.cancel_requested
        go.set()
        await h.engine.drain()
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.CANCELLED
        assert inst.failure is not None and inst.failure.code == "flow.cancelled"
        assert compensated == [inst_id]
        # heartbeats at 0 s (written) ... 10 s (written: a third of 30 s): that write
        # learned of the cancel; the try committed nothing
        assert rounds == [0, 2, 4, 6, 8, 10]
        assert await rows(h, inst_id, "work") == []
        assert inst.try_number is None and inst.lease_owner is None


async def test_a_cancel_learned_at_a_heartbeat_cancels_the_try_there() -> None:
    """The heartbeat whose write learned of the cancel does not return: the try's task is
    cancelled while it waits there (``asyncio.CancelledError``, as ``execute_timeout``
    does), so nothing after it runs; no engine-made exception reaches the capability."""
    reached, go = asyncio.Event(), asyncio.Event()
    raised: list[type[BaseException]] = []
    after: list[int] = []

    async def body(ctx: StepContext) -> None:
        for n in range(20):
            try:
                await ctx.heartbeat({"n": n})  # a changed value: written every time
            except BaseException as exc:
                raised.append(type(exc))
                raise
            after.append(n)
            if n == 1:
                reached.set()
                await go.wait()
            await ctx.sleep(EVERY)

    built = flow(Paced(Script("work", body, beating())), name="hb.cancel.there")
    async with FlowHarness.open([built]) as h:
        built.items[0].capability.clock = h.clock  # type: ignore[union-attr]
        inst_id = (await h.start("hb.cancel.there", {})).instance.id
        await reached.wait()
        assert (await h.engine.cancel(inst_id)).cancel_requested
        go.set()
        await h.engine.drain()
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.CANCELLED
        assert raised == [asyncio.CancelledError]
        assert after == [0, 1]  # heartbeat 2 learned of it and never returned
        assert await rows(h, inst_id, "work") == []


async def test_a_cancel_reaches_a_try_that_catches_every_exception() -> None:
    """A provider client's ``except Exception`` around its calls does not swallow the cancel
    out of ``ctx.heartbeat``: it is asyncio's cancellation of the try, no ``Exception``."""
    reached, go = asyncio.Event(), asyncio.Event()
    rounds: list[float] = []
    swallowed: list[BaseException] = []

    async def body(ctx: StepContext) -> None:
        for _ in range(20):  # would outlive the cancel by 10 rounds if it were swallowed
            rounds.append((ctx.now - t0).total_seconds())
            try:
                await ctx.heartbeat("waiting")
            except Exception as exc:  # noqa: BLE001 - what the test is about
                swallowed.append(exc)
            if len(rounds) == 2:
                reached.set()
                await go.wait()
            await ctx.sleep(EVERY)

    built = flow(Paced(Script("work", body, beating())), name="hb.cancel.catchall")
    async with FlowHarness.open([built]) as h:
        built.items[0].capability.clock = h.clock  # type: ignore[union-attr]
        t0 = h.clock.now()
        inst_id = (await h.start("hb.cancel.catchall", {})).instance.id
        await reached.wait()
        assert (await h.engine.cancel(inst_id)).cancel_requested
        go.set()
        await h.engine.drain()
        inst = await h.instance(inst_id)
        assert inst.state is InstanceState.CANCELLED
        assert inst.failure is not None and inst.failure.code == "flow.cancelled"
        assert swallowed == []
        assert rounds == [0, 2, 4, 6, 8, 10]  # stopped at the write that learned of it
        assert await rows(h, inst_id, "work") == []


async def test_a_heartbeat_without_a_heartbeat_timeout_is_kept_in_memory_only() -> None:
    seen: list[str | None] = []

    async def body(ctx: StepContext) -> None:
        await ctx.heartbeat("local")
        seen.append(ctx.last_heartbeat_value(str))

    async with FlowHarness.open([flow(Script("plain", body))]) as h:
        inst = (await h.start("hb.test", {})).instance
        assert inst.state is InstanceState.COMPLETED, inst.failure
        assert seen == ["local"]
        assert await h.store.runs.last_heartbeat(inst.id, 0, 0) is None
