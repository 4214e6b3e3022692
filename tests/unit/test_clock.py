"""The clocks' timer primitive, ``Clock.call_later``: on the virtual clock, callbacks fire
when the clock is moved to or past their due instant, in due order, and not once cancelled;
the system clock hands them to the event loop. No real waiting: the virtual clock moves."""

from __future__ import annotations

import asyncio
import contextvars
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowpark.engine.clock import Clock, SystemClock, VirtualClock

T0 = datetime(2026, 1, 1, tzinfo=UTC)
S = timedelta(seconds=1)


def recorder() -> tuple[list[Any], Any]:
    fired: list[Any] = []

    def make(label: Any) -> Any:
        return lambda: fired.append(label)

    return fired, make


def test_timers_fire_when_the_clock_reaches_their_due_instant_in_due_order() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    clock.call_later(3 * S, cb("c"))
    clock.call_later(1 * S, cb("a"))
    clock.call_later(2 * S, cb("b"))
    clock.advance(S - timedelta(microseconds=1))
    assert fired == []  # not before its due instant
    clock.advance(timedelta(microseconds=1))
    assert fired == ["a"]  # at its due instant exactly, within set()
    clock.set(T0 + 10 * S)  # one move past both: in due order
    assert fired == ["a", "b", "c"]
    clock.advance(10 * S)
    assert fired == ["a", "b", "c"]  # once each


def test_timers_due_at_the_same_instant_fire_in_the_order_they_were_set() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    for label in ("x", "y", "z"):
        clock.call_later(5 * S, cb(label))
    clock.call_later(4 * S, cb("first"))
    clock.advance(5 * S)
    assert fired == ["first", "x", "y", "z"]


def test_a_cancelled_timer_does_not_fire_and_cancel_is_idempotent() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    kept = clock.call_later(2 * S, cb("kept"))
    dropped = clock.call_later(1 * S, cb("dropped"))
    dropped.cancel()
    dropped.cancel()
    assert clock.next_sleeper_due() == T0 + 2 * S  # a cancelled timer waits for nothing
    clock.advance(5 * S)
    assert fired == ["kept"]
    kept.cancel()  # after it fired: nothing happens
    assert clock.next_sleeper_due() is None


def test_a_callback_may_cancel_a_timer_due_in_the_same_move() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    later = clock.call_later(2 * S, cb("later"))

    def first() -> None:
        fired.append("first")
        later.cancel()

    clock.call_later(1 * S, first)
    clock.advance(3 * S)
    assert fired == ["first"]


def test_a_callback_may_set_a_new_timer_which_fires_when_its_own_instant_comes() -> None:
    clock = VirtualClock(T0)
    fired: list[datetime] = []

    def tick() -> None:  # re-arms itself, as the heartbeat watchdog does
        fired.append(clock.now())
        if len(fired) < 3:
            clock.call_later(2 * S, tick)

    clock.call_later(2 * S, tick)
    clock.advance(3 * S)
    assert fired == [T0 + 3 * S]  # fired by the move to 3 s, and seeing 3 s
    assert clock.next_sleeper_due() == T0 + 5 * S  # 2 s after the instant it was set
    clock.advance(10 * S)
    assert fired == [T0 + 3 * S, T0 + 13 * S]  # one move fires it once
    clock.advance(2 * S)
    assert fired == [T0 + 3 * S, T0 + 13 * S, T0 + 15 * S]
    assert clock.next_sleeper_due() is None


async def test_a_delay_of_zero_or_less_fires_on_the_next_loop_turn_never_within_the_call() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    clock.call_later(timedelta(0), cb("zero"))
    clock.call_later(-S, cb("negative"))
    clock.call_later(timedelta(0), cb("cancelled")).cancel()
    assert fired == []
    await asyncio.sleep(0)
    assert fired == ["zero", "negative"]
    assert clock.now() == T0  # the clock did not move


async def test_next_sleeper_due_covers_sleepers_and_timers() -> None:
    clock = VirtualClock(T0)
    assert clock.next_sleeper_due() is None
    timer = clock.call_later(10 * S, lambda: None)
    sleeper = asyncio.ensure_future(clock.sleep(20 * S))
    await asyncio.sleep(0)
    assert clock.next_sleeper_due() == T0 + 10 * S
    timer.cancel()
    assert clock.next_sleeper_due() == T0 + 20 * S
    clock.advance(20 * S)
    await sleeper
    assert clock.next_sleeper_due() is None


async def test_timers_and_sleepers_due_in_one_move_all_run() -> None:
    clock = VirtualClock(T0)
    order: list[str] = []

    async def sleeper() -> None:
        await clock.sleep(1 * S)
        order.append("sleeper")

    task = asyncio.ensure_future(sleeper())
    await asyncio.sleep(0)
    clock.call_later(2 * S, lambda: order.append("timer"))
    clock.advance(5 * S)
    assert order == ["timer"]  # a callback runs within set(); a sleeper wakes on the loop
    await task
    assert order == ["timer", "sleeper"]


def test_many_cancelled_timers_do_not_pile_up() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    keep = [clock.call_later((i + 1) * S, cb(i)) for i in range(0, 1000, 100)]
    for _ in range(1000):  # short tries that never let their timers fire
        clock.call_later(30 * S, cb("never")).cancel()
    assert len(clock._timers) < 200
    assert len(keep) == 10
    clock.advance(timedelta(hours=1))
    assert fired == list(range(0, 1000, 100))


def test_a_callback_runs_in_the_context_current_when_it_was_set() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    clock = VirtualClock(T0)
    seen: list[str] = []
    token = var.set("at call_later")
    clock.call_later(S, lambda: seen.append(var.get()))
    var.reset(token)
    clock.advance(S)
    assert seen == ["at call_later"]


async def test_a_failing_callback_is_reported_to_the_loop_and_the_others_still_fire() -> None:
    clock = VirtualClock(T0)
    fired, cb = recorder()
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))

    def boom() -> None:
        raise RuntimeError("boom")

    clock.call_later(S, boom)
    clock.call_later(2 * S, cb("after"))
    clock.advance(2 * S)
    assert fired == ["after"]
    assert [type(c["exception"]) for c in reported] == [RuntimeError]


def test_a_failing_callback_without_a_loop_is_raised_from_set() -> None:
    clock = VirtualClock(T0)

    def boom() -> None:
        raise RuntimeError("boom")

    clock.call_later(S, boom)
    with pytest.raises(RuntimeError, match="boom"):
        clock.advance(S)


async def test_the_system_clock_hands_timers_to_the_event_loop() -> None:
    clock: Clock = SystemClock()
    loop = asyncio.get_running_loop()
    fired, cb = recorder()
    soon: asyncio.Future[str] = loop.create_future()
    handle = clock.call_later(-S, lambda: soon.set_result("soon"))
    later = clock.call_later(timedelta(hours=1), cb("later"))
    assert isinstance(handle, asyncio.TimerHandle) and isinstance(later, asyncio.TimerHandle)
    assert 3599 < later.when() - loop.time() <= 3600  # on the loop's clock, in seconds
    assert not soon.done()  # not within the call
    assert await asyncio.wait_for(soon, 10) == "soon"  # due at once: no real waiting
    later.cancel()
    assert later.cancelled() and fired == []


def test_the_clocks_satisfy_the_protocol() -> None:
    clocks: list[Clock] = [SystemClock(), VirtualClock(T0)]
    for clock in clocks:
        assert callable(clock.call_later)
