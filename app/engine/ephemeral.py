"""Ephemeral runs: the same decider and executor, inside the caller, writing no rows.

An ephemeral flow cannot wait (definition rules refuse polls and awaits), so a run either
completes or fails before the call returns. Retries wait in-process on the engine clock.
The observer hears its start and its end as a durable instance's (``started``, ``ended``);
a run whose caller goes away (the task is cancelled) ends ``cancelled``.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime
from typing import Any, cast

from app.engine.executor import Executor
from app.engine.host import RunHost
from app.engine.journal import (
    Ack,
    Claim,
    InstanceRecord,
    InstanceState,
    StepRow,
)
from app.engine.outcomes import Halt, StartResult
from app.engine.ports import Commit, Journal
from app.errors import FlowFailure
from app.flows.plan import Plan

__all__ = ["run_ephemeral"]


class _MemoryJournal:
    """Holds an ephemeral instance's state for the length of one call: plays the claims,
    journal-writes and streams roles a run uses (no mailbox: an ephemeral flow cannot
    wait)."""

    def __init__(self, record: InstanceRecord) -> None:
        self.record = record
        self.rows: list[StepRow] = []

    @property
    def runs(self) -> _MemoryJournal:
        return self

    @property
    def streams(self) -> _MemoryJournal:
        return self

    async def commit(self, commit: Commit) -> Ack:
        self.rows.extend(commit.rows)
        return Ack()

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        return Ack()

    async def begin_ending(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        ending: InstanceState,
        failure: FlowFailure | None,
    ) -> Ack:
        return Ack()

    async def finish(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        state: InstanceState,
        result: Any = None,
        failure: FlowFailure | None = None,
    ) -> Ack:
        self.record = replace(
            self.record, state=state, result=result, failure=failure, updated_at=now
        )
        return Ack()

    async def record_heartbeat(self, *args: Any) -> Ack:
        return Ack()

    async def start_try(self, *args: Any) -> Ack:
        return Ack()

    async def last_heartbeat(self, *args: Any) -> None:
        return None

    async def write_stream(self, *args: Any) -> bool:
        return False


async def run_ephemeral(engine: RunHost, plan: Plan, data: dict[str, Any]) -> StartResult:
    """Run ``plan`` on ``data`` to its end in memory; returns a StartResult with no row."""
    now = engine.clock.now()
    record = InstanceRecord(
        id=engine.new_id(),
        flow_name=plan.name,
        flow_version=plan.version,
        state=InstanceState.RUNNING,
        input=data,
        created_at=now,
        updated_at=now,
    )
    memory = _MemoryJournal(record)

    class _View:
        # the roles a run that cannot wait uses (no mailbox, no reads): see _MemoryJournal
        journal = cast("Journal", memory)
        clock = engine.clock
        lease = engine.lease
        new_id = staticmethod(engine.new_id)
        limits = engine.limits
        observer = engine.observer
        config = engine.config

    run = Executor(_View(), plan, record, Claim(record.id, 0), [], [], ephemeral=True)
    engine.observer.started(plan.name, plan.version, record.id)
    try:
        halt: Halt = await run.run()
    except Exception:  # a durable run is failed so (flow.internal_error); here it raises
        engine.observer.ended(plan.name, plan.version, "failed", "flow.internal_error")
        raise
    except asyncio.CancelledError:  # the caller went away (a client disconnect): no result
        engine.observer.ended(plan.name, plan.version, InstanceState.CANCELLED.value, None)
        raise
    final = memory.record
    assert halt.state.ended
    failure = final.failure
    engine.observer.ended(
        plan.name, plan.version, halt.state.value, failure.code if failure is not None else None
    )
    return StartResult(final, True, final.result)
