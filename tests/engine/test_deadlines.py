"""Deadlines are instants stored before the first call they bound: a node that dies in the
middle of that call (its run cancelled, its lease left to lapse) does not move them.

Node A starts the instance on its own virtual clock; its call is held mid-way and never
returns. Node B, one lease later on another clock, takes the instance over and must honour
the end instant A stored: on the memory store, and on SQLite and PostgreSQL where a test
counts the statements a start makes (``sql_store_url``).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import event

from flowpark.engine.clock import VirtualClock
from flowpark.engine.decide.deadlines import (
    POLL_BUDGET,
    RETRY_TOTAL,
    SIGNAL_TIMEOUT,
    ends_at,
    open_budget,
)
from flowpark.engine.ports.operator import InstanceFilter
from flowpark.engine.records import InstanceState, StepKind
from flowpark.flows import Backoff, Capability, CapabilityOptions, Flow, RetryPolicy, StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import After, Check, Job, Order, Start, Status, await_flow, done
from tests.postgres.nodes import INTERVAL, Held, slow_flow, slow_subs
from tests.support.harness import sql_of

LEASE = timedelta(seconds=30)
SCAN = timedelta(seconds=1)
HOUR = timedelta(hours=1)


async def _dead_node_holds(h: FlowHarness, held: Held, flow: str) -> tuple[asyncio.Task, str]:  # type: ignore[type-arg]
    """Node A (``h.engine``) starts ``flow``; its call is held; A 'dies' (never resumes)."""
    started = asyncio.create_task(h.start(flow, {"order_id": "o-1"}))
    await asyncio.wait_for(held.entered.wait(), 10)
    (instance_id,) = [i.id for i in await _running(h)]
    return started, instance_id


async def _running(h: FlowHarness) -> list:  # type: ignore[type-arg]
    page = await h.store.operator.list_instances(InstanceFilter(), limit=10)
    return [await h.instance(row.id) for row in page.rows]


async def _bury(started: asyncio.Task) -> None:  # type: ignore[type-arg]
    started.cancel()
    await asyncio.gather(started, return_exceptions=True)


async def test_a_poll_budget_survives_a_node_dying_in_attempt_zeros_call(
    store_url: str | None,
) -> None:
    held = Held(Status(done=False))
    async with FlowHarness.open(
        [slow_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=slow_subs(held, Status(done=False)),
    ) as h:
        t0 = h.clock.now()
        started, instance_id = await _dead_node_holds(h, held, "t.slow")
        snap = await h.snapshot(instance_id)
        (budget,) = [r for r in snap.steps if r.kind is StepKind.DEADLINE]
        assert budget.capability_id == POLL_BUDGET
        assert ends_at(budget) == t0 + HOUR  # stored before attempt 0's call started
        assert not [r for r in snap.steps if r.capability_id == "t.slow"]  # no row yet

        clock_b = VirtualClock(t0 + LEASE + SCAN)
        b = h.with_engine(node_id="node-b", clock=clock_b)
        assert (await b.sweep()).advanced == 1  # B re-runs attempt 0 and parks
        inst = await h.instance(instance_id)
        assert inst.state is InstanceState.SUSPENDED
        snap = await h.snapshot(instance_id)
        shown = open_budget(inst.state, snap.steps)
        assert shown is not None and shown.ends_at == t0 + HOUR  # not B's entry + 1 h
        assert shown.started_at == t0

        while inst.state is InstanceState.SUSPENDED:
            assert inst.wake_at is not None and inst.wake_at <= t0 + HOUR
            clock_b.set(inst.wake_at)
            await b.sweep()
            inst = await h.instance(instance_id)
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == "flow.poll_not_satisfied"
        assert clock_b.now() == t0 + HOUR  # ended at A's instant, not 31 s later
        await _bury(started)


class FirstSlow(Capability):
    """``t.slow`` with nothing to read, so it can be the flow's first node (substituted)."""

    id = "t.slow"
    idempotent = True
    puts = (Status,)
    options = CapabilityOptions(execute_timeout=HOUR)

    async def execute(self, ctx: StepContext) -> None:  # pragma: no cover - substituted
        return None


def poll_first_flow() -> Flow:
    """``t.pollfirst`` 1.0.0: a poll of ``t.slow`` as the first node (1 h budget) -> after."""
    flow = Flow("t.pollfirst", "1.0.0", input=Order)
    flow.poll_until(
        FirstSlow(), until=done, interval=Backoff.fixed(INTERVAL), timeout=HOUR, reads=(Status,)
    )
    flow.step(After())
    return flow


async def test_a_first_node_polls_budget_is_stored_with_the_instance(sql_store_url: str) -> None:
    """The poll is entered at the start's instant: its budget row goes in with the instance
    (the start's one statement), so no write precedes attempt 0's call; a node that takes
    the instance over reads the same end."""
    held = Held(Status(done=False))
    async with FlowHarness.open(
        [poll_first_flow()],
        database_url=sql_store_url,
        migrate=False,
        substitutes={"t.slow": Scripted(held, Status(done=False)), "t.after": Scripted(None)},
    ) as h:
        t0 = h.clock.now()
        writes: list[str] = []

        def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
            if not statement.lstrip().upper().startswith("SELECT"):
                writes.append(statement)

        event.listen(sql_of(h).engine.sync_engine, "before_cursor_execute", count)
        started, instance_id = await _dead_node_holds(h, held, "t.pollfirst")
        event.remove(sql_of(h).engine.sync_engine, "before_cursor_execute", count)
        inst = await h.instance(instance_id)
        snap = await h.snapshot(instance_id)
        (budget,) = snap.steps  # in attempt 0's call: the budget only
        assert budget.kind is StepKind.DEADLINE and budget.capability_id == POLL_BUDGET
        assert budget.started_at == inst.created_at == t0
        assert ends_at(budget) == t0 + HOUR
        if sql_of(h).is_postgresql:
            assert len(writes) == 1, writes  # the start's one statement, then the call

        clock_b = VirtualClock(t0 + LEASE + SCAN)
        b = h.with_engine(node_id="node-b", clock=clock_b)
        assert (await b.sweep()).advanced == 1  # B re-runs attempt 0 and parks
        snap = await h.snapshot(instance_id)
        assert [r for r in snap.steps if r.kind is StepKind.DEADLINE] == [budget]
        shown = open_budget((await h.instance(instance_id)).state, snap.steps)
        assert shown is not None and (shown.started_at, shown.ends_at) == (t0, t0 + HOUR)
        await _bury(started)


class RetriedCheck(Check):
    options = CapabilityOptions(
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=10),
            backoff_coefficient=1.0,
            total_duration=timedelta(minutes=5),
        )
    )


def retry_flow() -> Flow:
    """start -> ``t.check`` (retried for 5 min in all) -> after."""
    flow = Flow("t.retried", "1.0.0", input=Order)
    flow.step(Start())
    flow.step(RetriedCheck())
    flow.step(After())
    return flow


async def test_a_retry_window_survives_a_node_dying_in_the_first_try(store_url: str | None) -> None:
    held = Held(Status(done=False))
    subs = {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": Scripted(held, *[RuntimeError("down")] * 100),
        "t.after": Scripted(None),
    }
    async with FlowHarness.open(
        [retry_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        t0 = h.clock.now()
        started, instance_id = await _dead_node_holds(h, held, "t.retried")
        (window,) = [
            r for r in (await h.snapshot(instance_id)).steps if r.kind is StepKind.DEADLINE
        ]
        assert (window.capability_id, ends_at(window)) == (RETRY_TOTAL, t0 + timedelta(minutes=5))

        clock_b = VirtualClock(t0 + LEASE + SCAN)
        b = h.with_engine(node_id="node-b", clock=clock_b)
        inst = await h.instance(instance_id)
        while not inst.state.ended:
            if inst.wake_at is not None:
                clock_b.set(max(inst.wake_at, clock_b.now()))
            await b.sweep()
            inst = await h.instance(instance_id)
        assert inst.state is InstanceState.FAILED
        tries = [r for r in (await h.snapshot(instance_id)).steps if r.capability_id == "t.check"]
        # every try started within A's window; none after it (B's window would end 31 s later)
        assert all(r.started_at <= t0 + timedelta(minutes=5) for r in tries)
        # the last try was final because the next would start past A's window
        assert tries[-1].final
        assert tries[-1].committed_at + timedelta(seconds=10) > t0 + timedelta(minutes=5)
        assert tries[-1].committed_at <= t0 + timedelta(minutes=5)
        await _bury(started)


async def test_an_await_signal_timeout_is_stored_with_the_park_and_honoured(
    store_url: str | None,
) -> None:
    subs = {"t.start": Scripted(Job(job_id="j")), "t.after": Scripted(None)}
    async with FlowHarness.open(
        [await_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        t0 = h.clock.now()
        inst = (await h.start("t.await", {"order_id": "o-1"})).instance
        snap = await h.snapshot(inst.id)
        (timeout,) = [r for r in snap.steps if r.kind is StepKind.DEADLINE]
        assert timeout.capability_id == SIGNAL_TIMEOUT
        assert inst.wake_at == ends_at(timeout) and timeout.started_at == t0
        # an early wake (an operator's, a lapsed lease) re-parks at the same instant
        h.clock.advance(timedelta(seconds=5))
        assert await h.engine.wake(inst.id) is not None
        again = await h.instance(inst.id)
        assert again.wake_at == ends_at(timeout)
        assert [r for r in (await h.snapshot(inst.id)).steps if r.kind is StepKind.DEADLINE] == [
            timeout
        ]
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert h.clock.now() == ends_at(timeout) == t0 + HOUR
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "t.no_callback"


async def test_a_retry_woken_after_its_window_ended_starts_no_try(store_url: str | None) -> None:
    calls = Scripted(RuntimeError("down"), RuntimeError("down"), Status(done=True))
    subs = {"t.start": Scripted(Job(job_id="j")), "t.check": calls, "t.after": Scripted(None)}
    async with FlowHarness.open(
        [retry_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        t0 = h.clock.now()
        started = await h.start("t.retried", {"order_id": "o-1"})
        inst = await h.instance(started.instance.id)
        assert inst.state is InstanceState.SUSPENDED  # try 1 failed; try 2 due in 10 s
        assert inst.wake_at == t0 + timedelta(seconds=10)
        h.clock.set(t0 + timedelta(minutes=6))  # the wake comes a minute after the window
        await h.engine.sweep()
        inst = await h.instance(started.instance.id)
        assert inst.state is InstanceState.FAILED
        assert inst.failure is not None and inst.failure.code == "flow.step_failed"
        tries = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.check"]
        assert [(r.try_number, r.error_type, r.final) for r in tries] == [
            (1, "RuntimeError", False),
            (2, "retry_window_ended", True),
        ]
        assert tries[1].started_at == tries[1].committed_at == t0 + timedelta(minutes=6)
        assert calls.calls == 1  # the provider was not called past the window


async def test_a_retry_decided_inside_its_window_but_reached_after_it_starts_no_try(
    store_url: str | None, monkeypatch: Any
) -> None:
    from flowpark.engine.execute.executor import Executor

    calls = Scripted(RuntimeError("down"), Status(done=True))
    subs = {"t.start": Scripted(Job(job_id="j")), "t.check": calls, "t.after": Scripted(None)}
    async with FlowHarness.open(
        [retry_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        t0 = h.clock.now()
        end = t0 + timedelta(minutes=5)
        started = await h.start("t.retried", {"order_id": "o-1"})
        h.clock.set(end - timedelta(milliseconds=1))  # try 2 is decided inside the window
        flush = Executor.flush

        async def slow_flush(self: Executor) -> None:  # the run's writes take 5 ms
            await flush(self)
            h.clock.advance(timedelta(milliseconds=5))

        monkeypatch.setattr(Executor, "flush", slow_flush)
        await h.engine.sweep()
        inst = await h.instance(started.instance.id)
        assert inst.state is InstanceState.FAILED
        tries = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.check"]
        assert [(r.try_number, r.error_type, r.final) for r in tries] == [
            (1, "RuntimeError", False),
            (2, "retry_window_ended", True),
        ]
        assert tries[1].started_at >= end  # refused at the instant it would have started
        assert calls.calls == 1  # the provider was not called past the window
