"""Helpers for engine tests with several nodes on one store: a flow whose poll body can be
held mid-call, a lease keeper that can be waited for, and journal counts read with SQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from flowpark.engine.clock import VirtualClock
from flowpark.flows import Backoff, Capability, CapabilityOptions, Flow, StepContext
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import After, Job, Order, Start, Status, done
from tests.support.eventually import eventually
from tests.support.harness import sql_of

__all__ = [
    "INTERVAL",
    "Held",
    "count_rows",
    "duplicate_executions",
    "keeper_asleep",
    "slow_flow",
    "slow_subs",
]

INTERVAL = timedelta(minutes=1)


class Slow(Capability):
    """``t.slow``: the poll body; a long execute timeout so a held call outlives leases."""

    id = "t.slow"
    idempotent = True
    reads = (Job,)
    puts = (Status,)
    options = CapabilityOptions(execute_timeout=timedelta(hours=1))

    async def execute(self, ctx: StepContext) -> None:  # pragma: no cover - substituted
        return None


def slow_flow() -> Flow:
    """``t.slow`` 1.0.0: start -> poll ``t.slow`` every minute (1 h budget) -> after."""
    flow = Flow("t.slow", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(
        Slow(),
        until=done,
        interval=Backoff.fixed(INTERVAL),
        timeout=timedelta(hours=1),
        reads=(Status,),
    )
    flow.step(After())
    return flow


def slow_subs(*slow: Any) -> dict[str, Scripted]:
    """Stand-ins for :func:`slow_flow`: ``t.slow`` plays ``slow``."""
    return {
        "t.start": Scripted(Job(job_id="j")),
        "t.slow": Scripted(*slow),
        "t.after": Scripted(None),
    }


class Held:
    """A :class:`Scripted` outcome that blocks the call until :attr:`release` is set.

    Attributes:
        entered: set once the call is running.
        release: set it to let the call return ``result``.
        cancelled: whether the call was cancelled while held.
    """

    def __init__(self, result: Any) -> None:
        self.result = result
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def __call__(self, ctx: StepContext) -> Any:
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return self.result


async def keeper_asleep(clock: VirtualClock, lease: timedelta) -> None:
    """Wait until a lease keeper on ``clock`` has renewed and sleeps again (its next tick
    is at most ``lease / 3`` ahead), so moving the clock next cannot skip a renewal."""

    def asleep() -> bool:
        due = clock.next_sleeper_due()
        return due is not None and clock.now() < due <= clock.now() + lease / 3

    await eventually(asleep, timeout=10, interval=0.005, what="lease keeper asleep")


async def count_rows(h: FlowHarness, capability_id: str, scope: int | None = None) -> int:
    """``flow_step`` rows of ``capability_id`` (in ``scope`` when given), read with SQL."""
    sql = "SELECT count(*) FROM flow_step WHERE capability_id = :cap"
    params: dict[str, Any] = {"cap": capability_id}
    if scope is not None:
        sql += " AND scope = :scope"
        params["scope"] = scope
    async with sql_of(h).engine.connect() as conn:
        return int((await conn.execute(text(sql), params)).scalar_one())


async def duplicate_executions(h: FlowHarness) -> list[tuple[Any, ...]]:
    """(instance, step, scope, kind) with more than one row of the same try, or more than
    one successful row: both mean an execution ran twice."""
    async with sql_of(h).engine.connect() as conn:
        tries = (
            await conn.execute(
                text(
                    "SELECT instance_id, step_id, scope, kind, try_number, count(*) FROM flow_step "
                    "GROUP BY instance_id, step_id, scope, kind, try_number HAVING count(*) > 1"
                )
            )
        ).all()
        successes = (
            await conn.execute(
                text(
                    "SELECT instance_id, step_id, scope, kind, count(*) FROM flow_step "
                    "WHERE outcome = 'success' "
                    "GROUP BY instance_id, step_id, scope, kind HAVING count(*) > 1"
                )
            )
        ).all()
    return [tuple(r) for r in [*tries, *successes]]
