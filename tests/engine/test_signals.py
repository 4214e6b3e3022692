"""Signals: stored first, taken exactly once, ending a wait early (both stores)."""

from __future__ import annotations

import asyncio

import pytest

from app.engine.journal import InstanceState, StepKind
from app.errors import InputInvalid, InstanceEnded, InstanceNotFound, SignalNotDeclared
from app.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, await_flow, poll_flow

ORDER = {"order_id": "o-1"}


def subs(check: Scripted, start: Scripted | None = None) -> dict[str, Scripted]:
    return {"t.start": start or Scripted(Job(job_id="j")), "t.check": check,
            "t.undo": Scripted(None), "t.escalate": Scripted(None), "t.after": Scripted(None)}


async def test_a_signal_delivered_before_the_wait_is_taken_first_with_no_attempt() -> None:
    check = Scripted(Status(done=False))
    holder: dict[str, FlowHarness] = {}

    async def start_and_signal_early(ctx: object) -> Job:
        h = holder["h"]
        # the instance is running (leased by this run): the signal waits in the mailbox
        _, created = await h.engine.deliver_signal(ctx.instance_id, "t.ready",  # type: ignore[attr-defined]
                                                   {"job_id": "j"})
        assert created
        return Job(job_id="j")

    async with FlowHarness.open([poll_flow()],
                                substitutes=subs(check, Scripted(start_and_signal_early))) as h:
        holder["h"] = h
        inst = (await h.start("t.poll", ORDER)).instance
        assert inst.state is InstanceState.COMPLETED
        assert check.calls == 0
        assert await h.calls(inst.id, "t.ready", StepKind.SIGNAL) == 1


async def test_signal_answers_for_unknown_undeclared_invalid_and_ended() -> None:
    async with FlowHarness.open([poll_flow()], substitutes=subs(Scripted(Status()))) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        with pytest.raises(InstanceNotFound):
            await h.engine.deliver_signal("no-such-id", "t.ready", {"job_id": "j"})
        with pytest.raises(SignalNotDeclared):
            await h.engine.deliver_signal(inst.id, "t.other", {})
        with pytest.raises(InputInvalid):
            await h.engine.deliver_signal(inst.id, "t.ready", {"job_id": 5})
        assert await h.journal.list_signals(inst.id) == []
        await h.engine.cancel(inst.id)
        with pytest.raises(InstanceEnded):
            await h.engine.deliver_signal(inst.id, "t.ready", {"job_id": "j"}, "late")
        assert await h.journal.list_signals(inst.id) == []


async def test_await_signal_parks_without_a_timer_call_and_times_out_durably() -> None:
    async with FlowHarness.open([await_flow()], substitutes=subs(Scripted(Status()))) as h:
        waiting = (await h.start("t.await", ORDER)).instance
        assert waiting.state is InstanceState.SUSPENDED
        assert waiting.wake_at is not None
        await h.engine.deliver_signal(waiting.id, "t.ready", {"job_id": "payload-1"})
        done = await h.instance(waiting.id)
        assert done.state is InstanceState.COMPLETED and done.result == {"job_id": "payload-1"}

        silent = (await h.start("t.await", {"order_id": "o-2"})).instance
        await h.advance_to_next_wake(silent.id)
        final = await h.instance(silent.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "t.no_callback"


async def test_signals_are_listed_in_arrival_order_within_one_millisecond() -> None:
    holder: dict[str, FlowHarness] = {}

    async def deliver_many(ctx: object) -> Job:
        # the clock does not move: every delivery has the same instant; the instance is
        # running, so all of them wait in the mailbox
        for n in range(20):
            await holder["h"].engine.deliver_signal(
                ctx.instance_id, "t.ready", {"job_id": f"j{n}"}, f"k{n}")  # type: ignore[attr-defined]
        return Job(job_id="j")

    async with FlowHarness.open([await_flow()],
                                substitutes=subs(Scripted(Status()),
                                                 Scripted(deliver_many))) as h:
        holder["h"] = h
        inst = (await h.start("t.await", ORDER)).instance
        assert inst.state is InstanceState.COMPLETED
        assert inst.result == {"job_id": "j0"}  # the first to arrive is taken
        listed = await h.journal.list_signals(inst.id)
        assert [s.payload["job_id"] for s in listed] == [f"j{n}" for n in range(20)]
        assert [s.taken_at is not None for s in listed] == [True] + [False] * 19


async def test_a_signal_and_a_due_sweep_race_to_exactly_one_continuation(store_url: str) -> None:
    check = Scripted(Status(done=False))
    async with FlowHarness.open([poll_flow()], database_url=store_url, migrate=False,
                                substitutes=subs(check)) as h:
        ids = [(await h.start("t.poll", {"order_id": f"o-{i}"})).instance.id for i in range(8)]
        wake = max([(await h.instance(i)).wake_at for i in ids])  # type: ignore[type-var]
        h.clock.set(wake)
        a = h.with_engine(node_id="node-a")
        b = h.with_engine(node_id="node-b")
        barrier = asyncio.Barrier(len(ids) + 1)

        async def deliver(instance_id: str) -> None:
            await barrier.wait()
            await a.deliver_signal(instance_id, "t.ready", {"job_id": "j"}, "hook")

        async def sweep() -> None:
            await barrier.wait()
            await b.sweep()

        await asyncio.gather(sweep(), *(deliver(i) for i in ids))
        for _ in range(3):  # whatever is still due (a lease lost to the race) finishes
            await h.sweep()
        for instance_id in ids:
            inst = await h.instance(instance_id)
            assert inst.state is InstanceState.COMPLETED, inst
            snap = await h.snapshot(instance_id)
            keys = [(r.step_id, r.scope, r.kind, r.try_number) for r in snap.steps]
            assert len(keys) == len(set(keys))
            assert sum(1 for r in snap.steps if r.kind is StepKind.SIGNAL) <= 1
            assert sum(1 for r in snap.steps if r.capability_id == "t.after") == 1
