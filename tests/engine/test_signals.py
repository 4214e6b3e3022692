"""Signals: stored first, taken exactly once, ending a wait early (both stores)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from flowpark.engine.records import InstanceState, StepKind
from flowpark.errors import InputInvalid, InstanceEnded, InstanceNotFound, SignalNotDeclared
from flowpark.flows import Capability, CapabilityOptions, Flow, StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import READY, Job, Order, Start, Status, await_flow, poll_flow
from tests.support.journal import wake_at

ORDER = {"order_id": "o-1"}


def subs(check: Scripted, start: Scripted | None = None) -> dict[str, Scripted]:
    return {
        "t.start": start or Scripted(Job(job_id="j")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }


async def test_a_signal_delivered_before_the_wait_is_taken_first_with_no_attempt() -> None:
    check = Scripted(Status(done=False))
    holder: dict[str, FlowHarness] = {}

    async def start_and_signal_early(ctx: StepContext) -> Job:
        h = holder["h"]
        # the instance is running (leased by this run): the signal waits in the mailbox
        _, created = await h.engine.deliver_signal(
            ctx.instance_id,
            "t.ready",
            {"job_id": "j"},
        )
        assert created
        return Job(job_id="j")

    async with FlowHarness.open(
        [poll_flow()], substitutes=subs(check, Scripted(start_and_signal_early))
    ) as h:
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
        assert await h.store.reads.list_signals(inst.id) == []
        await h.engine.cancel(inst.id)
        with pytest.raises(InstanceEnded):
            await h.engine.deliver_signal(inst.id, "t.ready", {"job_id": "j"}, "late")
        assert await h.store.reads.list_signals(inst.id) == []


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

    async def deliver_many(ctx: StepContext) -> Job:
        # the clock does not move: every delivery has the same instant; the instance is
        # running, so all of them wait in the mailbox
        for n in range(20):
            await holder["h"].engine.deliver_signal(
                ctx.instance_id, "t.ready", {"job_id": f"j{n}"}, f"k{n}"
            )
        return Job(job_id="j")

    async with FlowHarness.open(
        [await_flow()], substitutes=subs(Scripted(Status()), Scripted(deliver_many))
    ) as h:
        holder["h"] = h
        inst = (await h.start("t.await", ORDER)).instance
        assert inst.state is InstanceState.COMPLETED
        assert inst.result == {"job_id": "j0"}  # the first to arrive is taken
        listed = await h.store.reads.list_signals(inst.id)
        assert [s.payload["job_id"] for s in listed] == [f"j{n}" for n in range(20)]
        assert [s.taken_at is not None for s in listed] == [True] + [False] * 19


async def test_a_signal_and_a_due_sweep_race_to_exactly_one_continuation(
    store_url: str | None,
) -> None:
    check = Scripted(Status(done=False))
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=subs(check)
    ) as h:
        ids = [(await h.start("t.poll", {"order_id": f"o-{i}"})).instance.id for i in range(8)]
        wake = max([wake_at(await h.instance(i)) for i in ids])
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


def counting(journal: object, *names: str) -> dict[str, int]:
    """Count calls of the journal's ``names`` methods, each named ``role.method`` (wrapped
    on the role's instance)."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        role_name, method_name = name.split(".")
        role = getattr(journal, role_name)
        method = getattr(role, method_name)

        async def counted(
            *args: object, _name: str = name, _method: object = method, **kwargs: object
        ) -> object:
            calls[_name] += 1
            return await _method(*args, **kwargs)  # type: ignore[operator]

        setattr(role, method_name, counted)
    return calls


async def test_a_delivery_answers_from_the_run_it_started_without_reading_back(
    store_url: str | None,
) -> None:
    check = Scripted(Status(done=False))
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=subs(check)
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        assert inst.state is InstanceState.SUSPENDED
        calls = counting(
            h.store,
            "reads.get_instance",
            "reads.load",
            "runs.load",
            "mailbox.pending_signals",
            "mailbox.get_signal",
            "runs.claim",
        )
        delivery = await h.engine.deliver(inst.id, "t.ready", {"job_id": "j"}, "hook")
        # one read to find the flow; the store delivers and claims in one go, with the
        # journal; the answer is what the run left (no read back)
        assert calls == {
            "reads.get_instance": 1,
            "reads.load": 0,
            "runs.load": 0,
            "mailbox.pending_signals": 0,
            "mailbox.get_signal": 0,
            "runs.claim": 0,
        }
        assert (delivery.created, delivery.state) == (True, InstanceState.COMPLETED)
        assert (delivery.flow_name, delivery.flow_version) == ("t.poll", "1.0.0")
        (stored,) = await h.store.reads.list_signals(inst.id)
        assert delivery.signal == stored
        assert stored.taken_at is not None and stored.taken_step_id == 1
        assert check.calls == 1
        # a repeat answers the first signal as stored, taken, and the state now
        again = await h.engine.deliver(inst.id, "t.ready", {"job_id": "j"}, "hook")
        assert (again.signal, again.created, again.state) == (
            stored,
            False,
            InstanceState.COMPLETED,
        )


async def test_a_signal_that_waits_in_the_mailbox_is_answered_untaken(
    store_url: str | None,
) -> None:
    async with FlowHarness.open(
        [poll_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=subs(Scripted(Status(done=False))),
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        # the instance holds a live lease elsewhere: the signal waits for that run
        claim = await h.store.runs.claim(
            inst.id, "node-b", h.clock.now(), h.clock.now() + timedelta(seconds=30)
        )
        assert claim is not None
        delivery = await h.engine.deliver(inst.id, "t.ready", {"job_id": "j"})
        assert (delivery.created, delivery.state) == (True, InstanceState.RUNNING)
        assert delivery.signal.taken_at is None
        assert [s.id for s in await h.store.mailbox.pending_signals(inst.id)] == [
            delivery.signal.id
        ]


async def test_a_run_that_goes_on_in_the_background_is_answered_as_stored(
    store_url: str | None,
) -> None:
    release = asyncio.Event()

    async def long_wait(ctx: StepContext) -> None:
        await release.wait()

    flow = Flow("t.hook_then_wait", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(READY)
    flow.step(Watch())
    substitutes = {"t.start": Scripted(Job(job_id="j")), "t.watch": Scripted(long_wait)}
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=substitutes
    ) as h:
        inst = (await h.start("t.hook_then_wait", ORDER)).instance
        assert inst.state is InstanceState.SUSPENDED
        delivery = await h.engine.deliver(inst.id, "t.ready", {"job_id": "j"})
        # the run took the signal, then went on in the background at the heartbeating step
        assert (delivery.created, delivery.state) == (True, InstanceState.RUNNING)
        assert delivery.signal.taken_at is not None and delivery.signal.taken_step_id == 1
        assert delivery.signal == (await h.store.reads.list_signals(inst.id))[0]
        release.set()
        await h.engine.drain()
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED


class Watch(Capability):
    id = "t.watch"
    idempotent = True
    options = CapabilityOptions(
        execute_timeout=timedelta(hours=1), heartbeat_timeout=timedelta(seconds=30)
    )

    async def execute(self, ctx: StepContext) -> None:
        return None
