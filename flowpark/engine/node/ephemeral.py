"""Ephemeral runs: the same decider and executor, inside the caller, writing no rows: the
run's store is the durable store's scratch twin (:meth:`flowpark.engine.ports.Store.scratch`,
in memory), dropped when the call returns.

An ephemeral flow cannot wait (definition rules refuse polls and awaits), so a run either
completes or fails before the call returns. Retries wait in-process on the engine clock.
The observer hears its start and its end as a durable instance's (``started``, ``ended``);
a run whose caller goes away (the task is cancelled) ends ``cancelled``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from flowpark.engine.execute.executor import Executor
from flowpark.engine.execute.host import RunHost
from flowpark.engine.outcomes import Halt, StartResult
from flowpark.engine.records import Claim, InstanceState, NewInstance
from flowpark.flows.plan import Plan

__all__ = ["run_ephemeral"]


async def run_ephemeral(engine: RunHost, plan: Plan, data: dict[str, Any]) -> StartResult:
    """Run ``plan`` on ``data`` to its end in memory; returns a StartResult with no row."""
    now = engine.clock.now()
    # a store of its own for the length of the call (the durable store's scratch twin)
    memory = engine.store.scratch()
    node, lease_until = engine.config.node_id, now + engine.lease
    start = NewInstance(
        engine.new_id(), plan.name, plan.version, data, now, None, node, lease_until
    )
    record, _ = await memory.intake.create_instance(start)

    class _View:
        # the engine as the run sees it, over the scratch store
        store = memory
        clock = engine.clock
        lease = engine.lease
        new_id = staticmethod(engine.new_id)
        limits = engine.limits
        providers = engine.providers  # not asked: an ephemeral run takes no provider budget
        observer = engine.observer
        config = engine.config

    claim = Claim(record.id, record.fencing_token)
    run = Executor(_View(), plan, record, claim, [], [], ephemeral=True)
    engine.observer.started(plan.name, plan.version, record.id)
    try:
        halt: Halt = await run.run()
    except Exception:  # a durable run is failed so (flow.internal_error); here it raises
        engine.observer.ended(plan.name, plan.version, "failed", "flow.internal_error")
        raise
    except asyncio.CancelledError:  # the caller went away (a client disconnect): no result
        engine.observer.ended(plan.name, plan.version, InstanceState.CANCELLED.value, None)
        raise
    final = await memory.reads.get_instance(record.id)
    assert halt.state.ended
    failure = final.failure
    engine.observer.ended(
        plan.name, plan.version, halt.state.value, failure.code if failure is not None else None
    )
    return StartResult(final, True, final.result)
