"""Requests from outside a run: a start, a wake, a signal delivered, a cancel. Each claims
the instance when it can and advances it at once (see the :class:`flowpark.engine.Engine`
methods of the same names)."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json

from flowpark.engine.decide.deadlines import POLL_BUDGET, RETRY_TOTAL, deadline_row
from flowpark.engine.node.host import NodeEngine
from flowpark.engine.outcomes import RunOutcome, StartResult
from flowpark.engine.ports import NewSignal, WakeClaim
from flowpark.engine.records import (
    Claim,
    InstanceRecord,
    InstanceState,
    NewInstance,
    SignalRecord,
    Snapshot,
    StepRow,
)
from flowpark.errors import (
    InputInvalid,
    SignalNotDeclared,
    StaleFencingToken,
    StoreUnavailable,
    VersionNotServed,
    shown,
)
from flowpark.flows.hints import invalid_signal_payload
from flowpark.flows.plan import AwaitSignalStep, CapabilityStep, Plan, PollStep
from flowpark.outages import OUTAGES

__all__ = [
    "SignalDelivery",
    "StartResult",
    "cancel",
    "deliver",
    "new_instance",
    "run_committed",
    "start",
    "wake",
]

log = logging.getLogger("flowpark.engine")


@dataclass(frozen=True)
class SignalDelivery:
    """A signal delivery's answer (:meth:`flowpark.engine.Engine.deliver`).

    Attributes:
        signal: the signal as it stands once the delivery returns: taken (``taken_at``,
            ``taken_step_id``) when the run the delivery started took it; for a repeat of
            its idempotency key, the first signal as stored.
        created: False for a repeat (nothing stored).
        state: the instance's state once the delivery returns (after the run it started).
        flow_name / flow_version: the instance's flow.
    """

    signal: SignalRecord
    created: bool
    state: InstanceState
    flow_name: str
    flow_version: str


async def start(
    engine: NodeEngine,
    plan: Plan,
    data: dict[str, Any],
    idempotency_key: str | None,
    instance_key: str | None,
) -> StartResult:
    """Create an instance of ``plan`` and advance it (:meth:`flowpark.engine.Engine.start`).

    Args:
        engine: the node's engine.
        plan: the flow version to run (durable profile).
        data: the validated input, as JSON data.
        idempotency_key: repeats with the same key and body return the first instance.
        instance_key: a business id unique among the flow's non-ended instances.

    Returns:
        :class:`StartResult`: the instance as its first advance left it, and whether it is
        new (a repeat answers the first instance as stored).

    Raises:
        IdempotencyKeyReused, InstanceKeyInUse.
    """
    new = new_instance(engine, plan, data, idempotency_key, instance_key)
    record, created = await engine.store.intake.create_instance(new)
    if created:
        engine.observer.started(plan.name, plan.version, record.id)
        record = await _first_advance(engine, record, new.steps)
    return StartResult(record, created, record.result)


def new_instance(
    engine: NodeEngine,
    plan: Plan,
    data: dict[str, Any],
    idempotency_key: str | None,
    instance_key: str | None,
    *,
    leased: bool = True,
) -> NewInstance:
    """What a start of ``plan`` writes, entered at the engine clock's now.

    Args:
        engine: the node's engine (its clock, id factory, node id and lease).
        plan: the flow version (durable profile).
        data: the validated input, as JSON data.
        idempotency_key: the start's idempotency key, if any.
        instance_key: the start's instance key, if any.
        leased: True: this node holds the new instance's lease (it runs it now); False:
            the lease is born expired, so whichever node claims it first runs it (a start
            written in a caller's transaction: this node claims it once the caller
            committed, any node's sweep if this node is gone by then).

    Returns:
        The :class:`NewInstance`, with the deadlines its start stores.
    """
    now = engine.clock.now()
    instance_id = engine.new_id()
    return NewInstance(
        id=instance_id,
        flow_name=plan.name,
        flow_version=plan.version,
        input=data,
        created_at=now,
        deadline_at=(now + plan.deadline) if plan.deadline else None,
        lease_owner=engine.config.node_id,
        lease_expires_at=(now + engine.lease) if leased else now,
        idempotency_key=idempotency_key,
        instance_key=instance_key,
        trace_context=engine.observer.trace_context(),
        steps=_entry_rows(plan, instance_id, now),
    )


def _entry_rows(plan: Plan, instance_id: str, now: datetime) -> tuple[StepRow, ...]:
    """What a start stores with the instance, entered at the start's instant: the budget
    of a poll that is the flow's first step (with its warning's instant), and the retry
    window of the first call (the first step's, or the poll's body's attempt 0) when its
    retry policy has a ``total_duration``: the rows the run would store before that call,
    in the start's one statement instead of a write of their own."""
    first = plan.steps[0] if plan.steps else None
    rows: list[StepRow] = []
    if isinstance(first, PollStep):
        end = now + first.timeout
        warn_at = None if first.warn_before is None else end - first.warn_before
        rows.append(
            deadline_row(instance_id, first.index, 0, POLL_BUDGET, now, end, warn_at=warn_at)
        )
        first = plan.steps[first.index + 1]
    if isinstance(first, CapabilityStep):
        retry = first.capability.options.retry
        total = retry.total_duration if retry is not None else None
        if total is not None:
            rows.append(deadline_row(instance_id, first.index, 0, RETRY_TOTAL, now, now + total))
    return tuple(rows)


async def _first_advance(
    engine: NodeEngine, record: InstanceRecord, entry: tuple[StepRow, ...] = ()
) -> InstanceRecord:
    """Advance a new instance under the lease its start took, for up to ``start_wait``;
    the instance as the run left it, or as stored when the run goes on elsewhere."""
    # a new instance has no journal but the rows its start stored, and no mailbox yet (a
    # signal sent meanwhile is read by the walk before it waits): nothing to load
    claim = Claim(record.id, record.fencing_token, Snapshot(record, list(entry), []))
    outcome = None
    try:
        outcome = await engine.runs.advance_within(claim, engine.config.start_wait)
    except StaleFencingToken:
        pass  # logged by advance: the node that took the lease over goes on
    except StoreUnavailable as exc:  # the row is durable; the sweep takes it over
        OUTAGES.unavailable("run", exc)
    except Exception:  # noqa: BLE001 - the row is durable; the sweep takes it over
        log.exception(
            "instance %s: first advance failed on node %s; the sweep "
            "resumes it once its lease expires",
            record.id,
            engine.config.node_id,
        )
    if outcome is not None and outcome.instance is not None:
        return outcome.instance  # as the run left it: no read back
    return await engine.store.reads.get_instance(record.id)


async def run_committed(engine: NodeEngine, new: NewInstance) -> RunOutcome | None:
    """Claim and advance an instance a caller's transaction wrote and committed
    (:meth:`flowpark.engine.Engine.prepare_start`): one claim, and no load (the run starts
    from what the start wrote, as a start's own first advance does; a signal sent meanwhile
    is read by the walk before it waits).

    Returns:
        The run's outcome; None when the instance was not claimable (another node's sweep
        took it first, or the transaction never committed it).
    """
    now = engine.clock.now()
    owner, lease_until = engine.config.node_id, now + engine.lease
    claim = await engine.store.runs.claim(new.id, owner, now, lease_until)
    if claim is None:
        return None
    record = InstanceRecord(  # as the claim left the row the start wrote: no read back
        id=new.id,
        flow_name=new.flow_name,
        flow_version=new.flow_version,
        state=InstanceState.RUNNING,
        input=new.input,
        created_at=new.created_at,
        updated_at=new.created_at,
        deadline_at=new.deadline_at,
        lease_owner=owner,
        lease_expires_at=lease_until,
        fencing_token=claim.fencing_token,
        instance_key=new.instance_key,
        trace_context=new.trace_context,
    )
    claim = Claim(new.id, claim.fencing_token, Snapshot(record, list(new.steps), []))
    return await engine.runs.advance(claim, gated=False)


async def wake(engine: NodeEngine, instance_id: str, *, woken: bool = False) -> RunOutcome | None:
    """Claim one instance now (if nobody holds it) and advance it.

    A request runs its own work: the run-slot gate bounds the sweep's background work, and
    a claim must never wait in a queue unrenewed.

    Args:
        engine: the node's engine.
        instance_id: the instance.
        woken: an operator's wake: the wait it is parked on runs its next try now.

    Returns:
        The run's outcome; None when the instance was not claimable.

    Raises:
        InstanceNotFound: ``woken`` and no such instance (``instance_not_found``).
        VersionNotServed: ``woken`` and this node does not serve the instance's flow
            version (``version_not_served``): nothing was claimed or run.
    """
    if woken:
        inst = await engine.store.reads.get_instance(instance_id)
        if engine.catalog.find(inst.flow_name, inst.flow_version) is None:
            raise VersionNotServed(
                f"this node does not serve flow {inst.flow_name}@{inst.flow_version}, so "
                "nothing can advance the instance here: wake it on a node that serves that "
                "version",
                instance_id=instance_id,
            )
    now = engine.clock.now()
    claim = await engine.store.runs.claim(
        instance_id, engine.config.node_id, now, now + engine.lease
    )
    if claim is None:
        return None
    if woken:
        claim = replace(claim, woken=True)
    return await engine.runs.advance(claim, gated=False)


async def deliver(
    engine: NodeEngine, instance_id: str, name: str, payload: Any, idempotency_key: str | None
) -> SignalDelivery:
    """Store a signal, then continue the instance when the store claimed it for a wait.

    Args:
        engine: the node's engine.
        instance_id: the instance.
        name: the signal's name.
        payload: its payload (validated against the signal's model).
        idempotency_key: a repeat with this key answers the first signal.

    Returns:
        :class:`SignalDelivery`, as :meth:`flowpark.engine.Engine.deliver` tells.

    Raises:
        InstanceNotFound, SignalNotDeclared, InputInvalid, InstanceEnded.
    """
    inst = await engine.store.reads.get_instance(instance_id)
    plan = engine.catalog.find(inst.flow_name, inst.flow_version)
    signal = plan.signals.get(name) if plan is not None else None
    if plan is None:
        raise SignalNotDeclared(
            f"this node does not serve flow {inst.flow_name}@{inst.flow_version}, so it "
            f"cannot take signal {shown(name)!r} for it: send it to a node that serves that "
            "version",
            instance_id=instance_id,
            signal=shown(name),
        )
    if signal is None:
        raise SignalNotDeclared(
            f"flow {inst.flow_name}@{inst.flow_version} declares no signal {shown(name)!r}",
            instance_id=instance_id,
            signal=shown(name),
        )
    data = _validated(signal.model, name, payload)
    # the store decides "ended" atomically with the insert; a repeated key gets the
    # first answer even after the instance ended
    now = engine.clock.now()
    delivered = await engine.store.mailbox.deliver_and_claim(
        NewSignal(instance_id, name, data, idempotency_key, now, engine.new_id()),
        WakeClaim(engine.config.node_id, now + engine.lease, tuple(_accepting(plan, name))),
    )
    answer = SignalDelivery(
        delivered.signal, delivered.created, delivered.state, inst.flow_name, inst.flow_version
    )
    if delivered.claim is None:
        return answer
    return await _continue(engine, instance_id, delivered.claim, answer)


async def _continue(
    engine: NodeEngine, instance_id: str, claim: Claim, answer: SignalDelivery
) -> SignalDelivery:
    """Advance the instance a delivery claimed; ``answer`` as the run left the signal and
    the instance (read back when the run went on in the background or elsewhere)."""
    outcome = None
    # a request runs its own work: the run-slot gate bounds the sweep's background
    # work, and a claim must never wait in a queue unrenewed
    with contextlib.suppress(StaleFencingToken):  # logged by advance
        outcome = await engine.runs.advance(claim, gated=False)
    signal = answer.signal
    if outcome is None or outcome.instance is None:
        # another node holds it, or the run goes on in the background: read back
        now_signal = await engine.store.mailbox.get_signal(instance_id, signal.id)
        state = (await engine.store.reads.get_instance(instance_id)).state
        return replace(answer, signal=now_signal or signal, state=state)
    taken = next((s for s in outcome.signals_taken if s.id == signal.id), signal)
    return replace(answer, signal=taken, state=outcome.state)


async def cancel(engine: NodeEngine, instance_id: str) -> InstanceRecord:
    """Request a cancel; unwind the instance here when the request claimed it.

    Args:
        engine: the node's engine.
        instance_id: the instance.

    Returns:
        The instance as stored once this returns.

    Raises:
        InstanceNotFound, InstanceEnded (completion won the race).
    """
    now = engine.clock.now()
    ack = await engine.store.intake.request_cancel(
        instance_id, engine.config.node_id, now, now + engine.lease
    )
    if ack.claim is not None:
        await engine.runs.advance(ack.claim, gated=False)
    return await engine.store.reads.get_instance(instance_id)


def _validated(model: type[BaseModel], name: str, payload: Any) -> Any:
    """``payload`` validated against the model of signal ``name``, as JSON data."""
    try:
        return model.model_validate_json(to_json(payload), by_alias=True, by_name=False).model_dump(
            mode="json", by_alias=True
        )
    except ValidationError as exc:
        raise invalid_signal_payload(model, name, payload, exc) from None
    except (ValueError, RecursionError) as exc:  # e.g. nesting too deep to serialise
        raise InputInvalid(
            f"payload of signal {name} cannot be stored: {exc}", signal=name
        ) from None


def _accepting(plan: Plan, name: str) -> tuple[int, ...]:
    """The steps of ``plan`` whose wait a signal ``name`` ends (polls and awaits)."""
    return tuple(
        step.index
        for step in plan.steps
        if isinstance(step, PollStep | AwaitSignalStep)
        and step.signal is not None
        and step.signal.name == name
    )
