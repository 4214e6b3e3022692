"""Lane: group commit of concurrent submits into batches (flowpark.store.lanes).

Deterministic: the tests never wait on wall-clock time. A batch is held open with an
``asyncio.Event``; "let the loop run" is a bounded number of ``sleep(0)`` yields
(``eventually(..., turns=N)``).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from flowpark.store.lanes import Lane
from tests.support.eventually import eventually


class Recorder:
    """A lane body that records each batch it runs and answers ``answer(item)`` per item.

    ``hold``: when set, each batch waits for it before answering (the batch is in flight).
    """

    def __init__(
        self,
        answer: Callable[[Any], Any] = lambda item: item * 10,
        hold: asyncio.Event | None = None,
    ) -> None:
        self.answer = answer
        self.hold = hold
        self.batches: list[list[Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.entered = asyncio.Event()

    async def __call__(self, items: Sequence[Any]) -> list[Any]:
        self.batches.append(list(items))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.entered.set()
        try:
            if self.hold is not None:
                await self.hold.wait()
            return [self.answer(item) for item in items]
        finally:
            self.in_flight -= 1


async def spin(times: int = 20) -> None:
    """Let every ready callback run a few rounds (no wall-clock wait)."""
    for _ in range(times):
        await asyncio.sleep(0)


async def _install_handler() -> list[dict[str, Any]]:
    """Collect what reaches the running loop's exception handler (e.g. "Future exception
    was never retrieved", reported when such a future is garbage-collected)."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


def _tasks(lane: Lane[Any, Any], items: Sequence[Any]) -> list[asyncio.Task[Any]]:
    return [asyncio.ensure_future(lane.submit(item)) for item in items]


# ------------------------------------------------------------------------- batching


async def test_submits_of_one_loop_iteration_form_one_batch() -> None:
    run = Recorder()
    lane: Lane[int, int] = Lane(run)
    answers = await asyncio.gather(*(lane.submit(n) for n in range(25)))
    assert run.batches == [list(range(25))]  # one call of run, the items in submit order
    assert answers == [n * 10 for n in range(25)]
    assert (lane.batches, lane.items) == (1, 25)


async def test_a_lone_submit_is_a_batch_of_one() -> None:
    run = Recorder()
    lane: Lane[str, str] = Lane(run, max_batch=5, parallel=1)
    assert await lane.submit("a") == "a" * 10
    assert await lane.submit("b") == "b" * 10
    assert run.batches == [["a"], ["b"]]
    assert (lane.batches, lane.items) == (2, 2)


async def test_answers_reach_their_own_callers() -> None:
    """Each caller gets the answer at its own item's position, whatever the batch order."""
    run = Recorder(answer=lambda item: f"answer-{item}")
    lane: Lane[int, str] = Lane(run, max_batch=7, parallel=3)
    items = [5, 3, 9, 0, 1, 8, 2, 7, 6, 4, 11, 10]
    answers = await asyncio.gather(*(lane.submit(n) for n in items))
    assert answers == [f"answer-{n}" for n in items]
    assert [n for batch in run.batches for n in batch] == items
    assert [len(b) for b in run.batches] == [7, 5]


async def test_submits_arriving_while_a_batch_is_in_flight_share_the_next_batch() -> None:
    """Group commit: callers that come while the only batch runs wait and go together."""
    hold = asyncio.Event()
    run = Recorder(hold=hold)
    lane: Lane[int, int] = Lane(run, parallel=1)
    first = asyncio.ensure_future(lane.submit(0))
    await run.entered.wait()
    later = []
    for n in range(1, 6):  # one per loop iteration, while batch [0] is held
        later.append(asyncio.ensure_future(lane.submit(n)))
        await asyncio.sleep(0)
    await spin()
    assert run.batches == [[0]] and not first.done()
    hold.set()
    assert await first == 0
    assert await asyncio.gather(*later) == [10, 20, 30, 40, 50]
    assert run.batches == [[0], [1, 2, 3, 4, 5]]


async def test_max_batch_splits_a_burst() -> None:
    run = Recorder()
    lane: Lane[int, int] = Lane(run, max_batch=4, parallel=1)
    answers = await asyncio.gather(*(lane.submit(n) for n in range(10)))
    assert answers == [n * 10 for n in range(10)]
    assert run.batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert (lane.batches, lane.items) == (3, 10)


# ------------------------------------------------------------------------- failures


async def test_a_per_item_exception_reaches_only_its_caller() -> None:
    boom = ValueError("item 2 refused")

    def answer(item: int) -> Any:
        return boom if item == 2 else item + 100

    run = Recorder(answer=answer)
    lane: Lane[int, int] = Lane(run)
    results = await asyncio.gather(*(lane.submit(n) for n in range(5)), return_exceptions=True)
    assert results == [100, 101, boom, 103, 104]
    assert results[2] is boom
    assert len(run.batches) == 1


async def test_an_exception_raised_by_run_reaches_every_caller_of_the_batch() -> None:
    calls: list[list[int]] = []

    async def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if len(calls) == 1:
            raise ConnectionError("database went away")
        return [n * 2 for n in items]

    lane: Lane[int, int] = Lane(run)
    results = await asyncio.gather(*(lane.submit(n) for n in range(4)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert len(calls) == 1 and calls[0] == [0, 1, 2, 3]
    # the lane keeps working: its flushers were given back
    assert await asyncio.gather(*(lane.submit(n) for n in range(3))) == [0, 2, 4]
    assert calls[1:] == [[0, 1, 2]]
    assert lane._flushers == 0 and not lane._queue


async def test_a_run_failure_does_not_reach_the_next_batch() -> None:
    """With max_batch splitting a burst, only the failing batch's callers see its error."""
    calls: list[list[int]] = []

    async def run(items: Sequence[int]) -> list[int]:
        calls.append(list(items))
        if 3 in items:
            raise RuntimeError("batch with 3 failed")
        return list(items)

    lane: Lane[int, int] = Lane(run, max_batch=3, parallel=1)
    results = await asyncio.gather(*(lane.submit(n) for n in range(8)), return_exceptions=True)
    assert calls == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert results[:3] == [0, 1, 2] and results[6:] == [6, 7]
    assert all(isinstance(r, RuntimeError) for r in results[3:6])


async def test_an_answer_of_the_wrong_length_fails_the_whole_batch() -> None:
    async def run(items: Sequence[int]) -> list[int]:
        return list(items)[:-1]

    lane: Lane[int, int] = Lane(run)
    results = await asyncio.gather(*(lane.submit(n) for n in range(3)), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) and "answered 2 of 3" in str(r) for r in results)


# ------------------------------------------------------------------------- parallel


async def test_parallel_bounds_the_batches_in_flight() -> None:
    hold = asyncio.Event()
    run = Recorder(hold=hold)
    lane: Lane[int, int] = Lane(run, max_batch=2, parallel=2)
    callers = _tasks(lane, range(9))
    await spin()
    # two batches held in flight; the rest wait queued, no third batch started
    assert run.batches == [[0, 1], [2, 3]]
    assert run.in_flight == 2 and lane._flushers == 2
    assert [len(lane._queue)] == [5]
    assert not any(c.done() for c in callers)
    hold.set()
    assert await asyncio.gather(*callers) == [n * 10 for n in range(9)]
    assert run.max_in_flight == 2
    assert sorted(n for b in run.batches for n in b) == list(range(9))
    assert all(len(b) <= 2 for b in run.batches)
    assert lane._flushers == 0


async def test_parallel_one_runs_batches_one_after_another() -> None:
    hold = asyncio.Event()
    run = Recorder(hold=hold)
    lane: Lane[int, int] = Lane(run, max_batch=1, parallel=1)
    callers = _tasks(lane, range(4))
    await spin()
    assert run.batches == [[0]] and run.in_flight == 1
    hold.set()
    assert await asyncio.gather(*callers) == [0, 10, 20, 30]
    assert run.max_in_flight == 1 and run.batches == [[0], [1], [2], [3]]


# ------------------------------------------------------------------------- cancellation


async def _cancel_in_flight(
    answer: Callable[[int], Any],
) -> tuple[Recorder, Lane[int, int], list[asyncio.Task[Any]]]:
    hold = asyncio.Event()
    run = Recorder(answer=answer, hold=hold)
    lane: Lane[int, int] = Lane(run)
    callers = _tasks(lane, range(4))
    await run.entered.wait()
    assert run.batches == [[0, 1, 2, 3]]
    callers[1].cancel()
    await spin()
    assert callers[1].cancelled()
    assert run.in_flight == 1  # the batch was not cut
    hold.set()
    return run, lane, callers


async def test_a_cancelled_caller_does_not_cancel_its_batch(
    recwarn: pytest.WarningsRecorder,
) -> None:
    errors = await _install_handler()
    run, lane, callers = await _cancel_in_flight(lambda n: n * 10)
    assert list(await asyncio.gather(callers[0], callers[2], callers[3])) == [0, 20, 30]
    assert run.in_flight == 0 and len(run.batches) == 1
    assert lane._flushers == 0
    # the lane still serves later callers
    assert await lane.submit(7) == 70
    del callers
    gc.collect()
    assert errors == [] and len(recwarn) == 0


async def test_a_cancelled_caller_whose_answer_is_an_exception_leaves_no_unread_error(
    recwarn: pytest.WarningsRecorder,
) -> None:
    errors = await _install_handler()
    run, lane, callers = await _cancel_in_flight(
        lambda n: ValueError(f"refused {n}") if n in (1, 2) else n
    )
    results = await asyncio.gather(callers[0], callers[2], callers[3], return_exceptions=True)
    assert results[0] == 0 and results[2] == 3
    assert isinstance(results[1], ValueError) and str(results[1]) == "refused 2"
    del callers, results
    gc.collect()
    assert errors == [] and len(recwarn) == 0


async def test_a_cancelled_caller_of_a_failing_batch_leaves_no_unread_error(
    recwarn: pytest.WarningsRecorder,
) -> None:
    errors = await _install_handler()
    hold = asyncio.Event()
    failures = 0

    async def run(items: Sequence[int]) -> list[int]:
        nonlocal failures
        await hold.wait()
        failures += 1
        raise OSError("statement failed")

    lane: Lane[int, int] = Lane(run)
    callers = _tasks(lane, range(3))
    await eventually(lambda: lane.batches == 1, turns=200)
    callers[0].cancel()
    await spin()
    hold.set()
    results = await asyncio.gather(*callers[1:], return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results) and failures == 1
    assert callers[0].cancelled()
    del callers, results
    gc.collect()
    assert errors == [] and len(recwarn) == 0


async def test_a_caller_cancelled_after_its_answer_was_set_leaves_no_unread_error(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """The cancel lands between the batch answering (an exception) and the caller waking."""
    errors = await _install_handler()
    caller: asyncio.Task[int] | None = None

    async def run(items: Sequence[int]) -> list[Any]:
        assert caller is not None
        # runs before the caller's wake-up, which is scheduled when the answer is set
        asyncio.get_running_loop().call_soon(caller.cancel)
        return [LookupError("no such thing")]

    lane: Lane[int, int] = Lane(run)
    caller = asyncio.ensure_future(lane.submit(1))
    await asyncio.gather(caller, return_exceptions=True)
    assert caller.cancelled() and lane.batches == 1
    caller = None
    gc.collect()
    assert errors == [] and len(recwarn) == 0


async def test_a_caller_cancelled_while_queued_still_has_its_item_run() -> None:
    """Documented: cancelling a caller does not withdraw its item (a statement in flight
    would apply it too); the others get their answers."""
    hold = asyncio.Event()
    run = Recorder(hold=hold)
    lane: Lane[int, int] = Lane(run, parallel=1)
    first = asyncio.ensure_future(lane.submit(0))
    await run.entered.wait()
    queued = _tasks(lane, [1, 2, 3])
    await spin()
    queued[0].cancel()
    await spin()
    hold.set()
    assert await first == 0
    assert list(await asyncio.gather(queued[1], queued[2])) == [20, 30]
    assert queued[0].cancelled()
    assert run.batches == [[0], [1, 2, 3]]


async def test_a_cancelled_batch_cancels_its_callers_and_serves_those_queued_behind() -> None:
    """``run`` cancelled (its flusher task cancelled, e.g. by a shutdown that spares the
    callers): that batch's callers are cancelled; callers queued behind it must still get
    a batch rather than wait for some later submit to start a flusher."""
    hold = asyncio.Event()
    run = Recorder(hold=hold)
    lane: Lane[int, int] = Lane(run, parallel=1)
    first = asyncio.ensure_future(lane.submit(0))
    await run.entered.wait()
    behind = asyncio.ensure_future(lane.submit(1))
    await spin()
    (flusher,) = lane._tasks
    flusher.cancel()
    await spin()
    assert first.cancelled()
    hold.set()
    try:
        await eventually(behind.done, turns=200)
        assert behind.result() == 10
    finally:
        behind.cancel()
        await asyncio.gather(behind, return_exceptions=True)
