"""From a claim to a run: the one call a node makes for each instance it holds a lease on
(a start, a sweep's claim, a signal's wake, an operator's action), through
:class:`~flowpark.engine.node.runs.RunTasks`. It loads what the claim did not bring, runs
the :class:`~flowpark.engine.execute.executor.Executor` until the instance parks or ends,
fails a broken run, and reports how it stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from flowpark.engine.execute.executor import Executor
from flowpark.engine.execute.failures import fail_broken, fail_mismatch, fail_unreadable
from flowpark.engine.execute.host import RunHost
from flowpark.engine.observe import LOG_CONTEXT
from flowpark.engine.outcomes import Halt, RunOutcome
from flowpark.engine.records import Claim, InstanceRecord, InstanceState, Snapshot, StepKind
from flowpark.errors import FlowparkError, JournalMismatch, StaleFencingToken
from flowpark.flows.catalog import Catalog

__all__ = ["ClaimHost", "run_claim"]

log = logging.getLogger("flowpark.engine")


class ClaimHost(RunHost, Protocol):
    """What a claimed instance's run uses of its node's engine beyond a run's needs."""

    @property
    def catalog(self) -> Catalog:
        """The registered plans (a claim's flow version is looked up here)."""

    @property
    def wake_listeners(self) -> list[Callable[[str, datetime], None]]:
        """Told ``(instance_id, wake_at)`` of each run that parks until an instant."""


async def run_claim(
    host: ClaimHost, claim: Claim, detach: asyncio.Future[None] | None = None
) -> RunOutcome:
    """Advance a claimed instance until it parks or ends.

    A stale fencing token (another node claimed it meanwhile) stops the run, logged;
    nothing half-written remains because every write is one transaction.

    Args:
        claim: the lease this node holds.
        detach: resolved by the run when it starts a try of a heartbeating capability
            (a wait that may last minutes), so a caller can stop waiting for it.
    """
    snapshot = claim.snapshot or await host.store.runs.load(claim.instance_id)
    inst = snapshot.instance
    LOG_CONTEXT.set({"instance_id": inst.id, "flow": inst.flow_name})
    if claim.taken_over:  # not a wake: the node that ran it is gone
        host.observer.taken_over(inst.flow_name)
        log.info(
            "instance %s of %s@%s: taken over on node %s (the node running it let its "
            "lease expire); resuming from its journal, the mailbox first",
            inst.id,
            inst.flow_name,
            inst.flow_version,
            host.config.node_id,
        )
    with host.observer.run_span(inst.id, inst.flow_name, inst.flow_version, inst.trace_context):
        return await _advance(host, claim, inst, snapshot, detach)


async def _advance(
    host: ClaimHost,
    claim: Claim,
    inst: InstanceRecord,
    snapshot: Snapshot,
    detach: asyncio.Future[None] | None,
) -> RunOutcome:
    plan = host.catalog.find(inst.flow_name, inst.flow_version)
    if plan is None:
        log.warning(
            "instance %s: flow %s@%s is not registered on node %s; left parked",
            inst.id,
            inst.flow_name,
            inst.flow_version,
            host.config.node_id,
        )
        await host.store.runs.release(inst.id, claim.fencing_token, host.clock.now())
        return RunOutcome(inst.id, InstanceState.SUSPENDED, inst.wake_at, runnable=False)
    try:
        run = Executor(host, plan, inst, claim, snapshot.steps, snapshot.signals)
    except Exception as exc:  # noqa: BLE001 - stored input no longer fits its model
        return await fail_unreadable(host, inst, claim, exc)
    run.detach = detach
    halt = await _run(host, run, claim)
    return _outcome(host, run, halt)


async def _run(host: ClaimHost, run: Executor, claim: Claim) -> Halt:
    """Run until the instance parks or ends; a broken run (not a lost race) fails."""
    try:
        return await run.run()
    except JournalMismatch as exc:
        return await fail_mismatch(host, run, exc)
    except StaleFencingToken:
        host.observer.fencing_refused(run.instance.flow_name)
        log.warning(
            "instance %s: fencing token %d is stale on node %s; stopped",
            run.instance_id,
            claim.fencing_token,
            host.config.node_id,
        )
        raise
    except (FlowparkError, asyncio.CancelledError):
        raise  # a lost race, the store unreachable, shutdown: a later claim retries
    except Exception as exc:  # noqa: BLE001 - never re-claim a broken run forever
        return await fail_broken(host, run, exc)


def _outcome(host: ClaimHost, run: Executor, halt: Halt) -> RunOutcome:
    """Report how ``run`` stopped (logs, observer, wake listeners) and answer it."""
    inst = run.instance
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "instance %s: %s after %d tries on node %s (wake at %s)",
            inst.id,
            halt.state.value,
            run.tries,
            host.config.node_id,
            halt.wake_at.isoformat() if halt.wake_at else "-",
        )
    # an instance that ends again after an operator's retry of its compensations
    # (its journal holds a retry row) ended once already: it is not counted twice
    if halt.state.ended and not any(r.kind is StepKind.RETRY for r in run.steps):
        failure = inst.failure
        host.observer.ended(
            inst.flow_name,
            inst.flow_version,
            halt.state.value,
            failure.code if failure is not None else None,
        )
    elif halt.state is InstanceState.SUSPENDED and halt.wake_at is not None:
        for listener in host.wake_listeners:
            listener(inst.id, halt.wake_at)
    return RunOutcome(
        inst.id,
        halt.state,
        halt.wake_at,
        run.tries,
        instance=inst if inst.state is halt.state else None,
        signals_taken=tuple(run.taken),
    )
