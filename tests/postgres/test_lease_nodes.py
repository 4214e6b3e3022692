"""Leases between nodes: a lapsed lease is taken over and the old holder's writes are
refused by the fencing token; the lease keeper stops a try whose lease was lost; a try does
not start on a lease that lapsed before the call; clock skew between nodes within the
documented bound steals no live lease and delays no takeover.

Each node is an engine with its own virtual clock on one store (SQLite and PostgreSQL).
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from flowpark.engine.clock import VirtualClock
from flowpark.engine.node.engine import Engine, EngineConfig, SweepReport
from flowpark.engine.records import InstanceState
from flowpark.store import SqlStore
from flowpark.testing import FlowHarness
from tests.engine.flows import Status
from tests.postgres.nodes import (
    Held,
    count_rows,
    duplicate_executions,
    keeper_asleep,
    slow_flow,
    slow_subs,
)
from tests.support.harness import sql_of

LEASE = timedelta(seconds=30)
SCAN = timedelta(seconds=1)


async def _held_by_a(
    h: FlowHarness, held: Held, clock_a: VirtualClock
) -> tuple[str, asyncio.Task[SweepReport]]:
    """Start a ``t.slow`` instance and let node A's sweep claim attempt 1, held mid-call."""
    inst = (await h.start("t.slow", {"order_id": "o-1"})).instance
    assert inst.wake_at is not None
    clock_a.set(inst.wake_at)
    a = h.with_engine(node_id="node-a", clock=clock_a)
    a_sweep = asyncio.create_task(a.sweep())
    await asyncio.wait_for(held.entered.wait(), 10)
    return inst.id, a_sweep


async def test_a_lapsed_lease_is_taken_over_and_the_old_holders_commit_is_refused(
    store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = Held(Status(done=True))
    subs = slow_subs(Status(done=False), held, Status(done=True))
    async with FlowHarness.open(
        [slow_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        clock_a = VirtualClock(h.clock.now())  # A's clock stands still: its keeper starves
        instance_id, a_sweep = await _held_by_a(h, held, clock_a)
        clock_b = VirtualClock(clock_a.now() + LEASE + SCAN)
        b = h.with_engine(node_id="node-b", clock=clock_b)
        report = await b.sweep()
        assert (report.claimed, report.advanced) == (1, 1)
        taken = await h.instance(instance_id)
        assert taken.state is InstanceState.COMPLETED
        assert subs["t.slow"].calls == 3  # A's held call, then B's attempt 1

        with caplog.at_level(logging.WARNING, logger="flowpark.engine"):
            held.release.set()  # A's call returns; its commit carries a stale token
            a_report = await asyncio.wait_for(a_sweep, 10)
        assert (a_report.claimed, a_report.advanced, a_report.failed_runs) == (1, 0, 1)
        assert any("stale" in r.getMessage() and "node-a" in r.getMessage() for r in caplog.records)
        assert await count_rows(h, "t.slow", scope=1) == 1
        assert await count_rows(h, "t.after") == 1
        assert await duplicate_executions(h) == []
        final = await h.instance(instance_id)
        assert final == taken  # A wrote nothing


async def test_a_refused_lease_renewal_cancels_the_try_at_once(
    store_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    held = Held(Status(done=True))
    subs = slow_subs(Status(done=False), held, Status(done=True))
    async with FlowHarness.open(
        [slow_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        clock_a = VirtualClock(h.clock.now())
        instance_id, a_sweep = await _held_by_a(h, held, clock_a)
        b = h.with_engine(node_id="node-b", clock=VirtualClock(clock_a.now() + LEASE + SCAN))
        assert (await b.sweep()).advanced == 1
        taken = await h.instance(instance_id)
        assert taken.state is InstanceState.COMPLETED

        with caplog.at_level(logging.WARNING, logger="flowpark.engine"):
            clock_a.advance(LEASE / 3)  # A's keeper wakes, renews, is refused
            a_report = await asyncio.wait_for(a_sweep, 10)
        assert held.cancelled and not held.release.is_set()
        assert (a_report.claimed, a_report.advanced, a_report.failed_runs) == (1, 0, 1)
        assert any("renewal refused" in r.getMessage() for r in caplog.records)
        assert await count_rows(h, "t.slow", scope=1) == 1
        assert await duplicate_executions(h) == []
        assert await h.instance(instance_id) == taken


@pytest.mark.parametrize("skew_seconds", [15, -15], ids=["b-ahead-15s", "b-behind-15s"])
async def test_clock_skew_steals_no_live_lease_and_a_dead_nodes_work_is_taken_over(
    store_url: str,
    skew_seconds: int,
) -> None:
    skew = timedelta(seconds=skew_seconds)
    held = Held(Status(done=True))
    subs = slow_subs(Status(done=False), held, Status(done=True))
    async with FlowHarness.open(
        [slow_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=subs,
        config=EngineConfig(node_id="harness", lease=LEASE),
    ) as h:
        clock_a = VirtualClock(h.clock.now())  # the true time; B reads it off by `skew`
        instance_id, a_sweep = await _held_by_a(h, held, clock_a)
        clock_b = VirtualClock(clock_a.now() + skew)
        b = h.with_engine(node_id="node-b", clock=clock_b)

        # A lives for 3 minutes, renewing every lease / 3; B sweeps every second
        for _ in range(180):
            clock_a.advance(SCAN)
            clock_b.advance(SCAN)
            await keeper_asleep(clock_a, LEASE)
            assert (await b.sweep()).claimed == 0, f"stolen at {clock_a.now()}"
        assert subs["t.slow"].calls == 2

        a_sweep.cancel()  # A dies mid-call: its try commits nothing
        await asyncio.gather(a_sweep, return_exceptions=True)
        died = clock_a.now()
        while True:
            clock_a.advance(SCAN)
            clock_b.advance(SCAN)
            if (await b.sweep()).claimed:
                break
            assert clock_a.now() - died <= LEASE + SCAN - min(skew, timedelta(0)), (
                "no takeover within lease + scan interval (+ B's lag)"
            )
        takeover = clock_a.now() - died
        assert takeover <= LEASE + SCAN - min(skew, timedelta(0))
        final = await h.instance(instance_id)
        assert final.state is InstanceState.COMPLETED
        assert subs["t.slow"].calls == 3
        assert await count_rows(h, "t.slow", scope=1) == 1
        assert await duplicate_executions(h) == []


class _SlowClaims:
    """A node's claims role that is slow after a claim: ``stall`` runs once the claim (and,
    on PostgreSQL, the snapshot read with it) returned, before the node goes on (as a node
    waiting for a connection or a busy event loop would)."""

    def __init__(self, claims: Any, stall: Callable[[], Awaitable[None]]) -> None:
        self._claims = claims
        self._stall = stall

    def __getattr__(self, name: str) -> Any:
        return getattr(self._claims, name)

    async def claim_due(self, *args: Any, **kwargs: Any) -> Any:
        claims = await self._claims.claim_due(*args, **kwargs)
        if claims:
            await self._stall()
        return claims


def _with_slow_claims(journal: SqlStore, stall: Callable[[], Awaitable[None]]) -> SqlStore:
    """The same store with its claims role replaced (the roles are composed)."""
    slow = copy.copy(journal)
    slow.intake = _SlowClaims(journal.intake, stall)  # type: ignore[assignment]
    return slow


async def test_a_try_does_not_start_on_a_lease_that_lapsed_before_the_call(
    store_url: str,
) -> None:
    subs = slow_subs(Status(done=False), Status(done=True))
    async with FlowHarness.open(
        [slow_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        inst = (await h.start("t.slow", {"order_id": "o-1"})).instance
        assert inst.wake_at is not None
        h.clock.set(inst.wake_at)
        b = h.with_engine(node_id="node-b")
        taken: list[SweepReport] = []

        async def stall() -> None:  # A's lease lapses meanwhile and B takes the instance
            h.clock.advance(LEASE + SCAN)
            taken.append(await b.sweep())

        a = Engine(
            _with_slow_claims(sql_of(h), stall),
            h.catalog,
            h.clock,
            replace(h.engine.config, node_id="node-a"),
        )
        report = await a.sweep()
        assert (report.claimed, report.failed_runs) == (1, 1)
        assert [(r.claimed, r.advanced) for r in taken] == [(1, 1)]
        assert subs["t.slow"].calls == 2  # attempt 0, then B's attempt 1: A made no call
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED
        assert await count_rows(h, "t.slow", scope=1) == 1
