"""How a run that cannot go on ends: a broken run (an error outside any capability call)
fails with ``flow.internal_error`` and unwinds; a journal that does not fit its plan fails
with ``flow.journal_mismatch`` (no compensation); an instance whose stored input no longer
validates fails at once."""

from __future__ import annotations

import logging

from flowpark.engine.execute.executor import Executor
from flowpark.engine.execute.host import RunHost
from flowpark.engine.outcomes import Halt, RunOutcome
from flowpark.engine.records import Claim, InstanceRecord, InstanceState
from flowpark.errors import FlowFailure, JournalMismatch

__all__ = ["fail_broken", "fail_mismatch", "fail_unreadable"]

log = logging.getLogger("flowpark.engine")


async def fail_broken(host: RunHost, run: Executor, exc: Exception) -> Halt:
    """An error outside any capability call (a value the store cannot hold, a bug):
    fail the instance with ``flow.internal_error`` and unwind, instead of leaving it
    running to be re-claimed and fail again after every lease."""
    log.error(
        "instance %s: run failed on node %s; failing it",
        run.instance_id,
        host.config.node_id,
        exc_info=exc,
    )
    failure = FlowFailure(
        "flow.internal_error",
        f"{type(exc).__name__}: {exc}"[:2000],
        {"error_type": type(exc).__name__},
    )
    if run.instance.ending is None:
        await run.begin_ending(InstanceState.FAILED, failure)
    else:  # unwinding already: it ends failed, for this reason
        run.instance = run.instance.evolve(ending=InstanceState.FAILED, failure=failure)
    return await run.run()


async def fail_mismatch(host: RunHost, run: Executor, exc: JournalMismatch) -> Halt:
    """The journal does not fit the plan: fail the instance with
    ``flow.journal_mismatch``, running no compensation (the rows cannot be read
    against this plan)."""
    log.error("instance %s: %s; failing it on node %s", run.instance_id, exc, host.config.node_id)
    failure = FlowFailure("flow.journal_mismatch", str(exc)[:2000], dict(exc.fields))
    await run.store.runs.finish(
        run.instance_id, run.token, host.clock.now(), InstanceState.FAILED, failure=failure
    )
    run.settle(state=InstanceState.FAILED, failure=failure, lease_owner=None)
    return Halt(InstanceState.FAILED)


async def fail_unreadable(
    host: RunHost, inst: InstanceRecord, claim: Claim, exc: Exception
) -> RunOutcome:
    """The stored input no longer validates against the plan's model: fail the instance at
    once (``flow.internal_error``), before any decision."""
    log.error(
        "instance %s: its stored input does not validate on node %s; failing it",
        inst.id,
        host.config.node_id,
        exc_info=exc,
    )
    now = host.clock.now()
    failure = FlowFailure(
        "flow.internal_error",
        f"stored input is unreadable: {type(exc).__name__}: {exc}"[:2000],
        {"error_type": type(exc).__name__},
    )
    await host.store.runs.finish(
        inst.id, claim.fencing_token, now, InstanceState.FAILED, failure=failure
    )
    host.observer.ended(inst.flow_name, inst.flow_version, "failed", failure.code)
    return RunOutcome(inst.id, InstanceState.FAILED)
