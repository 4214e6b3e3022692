"""``Engine``: starts instances, advances them from their journal, sweeps due ones.

The engine imports nothing from fastapi, sqlalchemy, apscheduler or httpx; it reaches
storage through :class:`app.engine.journal.Journal` and time through
:class:`app.engine.clock.Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from uuid6 import uuid7

from app.engine.clock import Clock
from app.engine.context import ExecutionContext, revive
from app.engine.journal import (
    Claim,
    EmittedEvent,
    InstanceRecord,
    InstanceState,
    Journal,
    NewInstance,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
)
from app.engine.runner import (
    DECISION_KEY,
    Halt,
    Run,
    RunOutcome,
    _CapabilityTimeout,
    _Interrupt,
    _jsonable,
    _Park,
)
from app.errors import (
    FlowFailure,
    FlowparkError,
    InputInvalid,
    SignalNotDeclared,
    StaleFencingToken,
    StoreUnavailable,
)
from app.flows.capability import Capability, CapabilityOptions, RecoveryError
from app.flows.catalog import Catalog
from app.flows.plan import AwaitSignalNode, EmitNode, FailNode, Plan, PollNode, Profile, StepNode

__all__ = ["Engine", "EngineConfig", "StartResult", "SweepReport", "request_hash"]

log = logging.getLogger("flowpark.engine")


def request_hash(payload: Any) -> str:
    """Stable hash of a JSON-able request body (sorted keys), for idempotency checks."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings.

    Attributes:
        node_id: this node's name (lease owner, logs).
        lease: how long a claim holds an instance without renewal (default 30 s). A run
            renews it every ``lease / 3`` while a capability works, so node clocks may
            disagree by up to ``lease - lease / 3`` (20 s by default) without a live lease
            being taken over.
        sweep_batch: at most this many instances claimed per sweep statement (default 100).
        concurrency: instances advanced at once by this node (default 32); a sweep claims
            no more than its free run slots, so nothing it claimed waits for a slot.
    """

    node_id: str = "node-1"
    lease: timedelta = timedelta(seconds=30)
    sweep_batch: int = 100
    concurrency: int = 32


@dataclass(frozen=True)
class StartResult:
    """A start's answer: the instance after its first advance, and whether it is new."""

    instance: InstanceRecord
    created: bool
    result: Any = None


@dataclass
class SweepReport:
    """What one sweep did."""

    claimed: int = 0
    advanced: int = 0
    failed_runs: int = 0
    not_runnable: int = 0
    outcomes: list[RunOutcome] = field(default_factory=list)


class Engine:
    """Runs flows durably.

    Args:
        journal: the store (one implementation: ``app.store.SqlJournal``).
        catalog: registered plans.
        clock: the engine clock (``SystemClock``; ``VirtualClock`` in tests).
        config: :class:`EngineConfig`.
        id_factory: makes instance/signal/event ids (default uuid7 strings).
    """

    def __init__(self, journal: Journal, catalog: Catalog, clock: Clock,
                 config: EngineConfig | None = None,
                 id_factory: Callable[[], str] | None = None) -> None:
        self.journal = journal
        self.catalog = catalog
        self.clock = clock
        self.config = config or EngineConfig()
        self.lease = self.config.lease
        self.new_id = id_factory or (lambda: str(uuid7()))
        self._gate = asyncio.Semaphore(self.config.concurrency)
        self.wake_listeners: list[Callable[[str, datetime], None]] = []
        # runs that went on in the background once they reached a heartbeating capability
        self._background: set[asyncio.Future[RunOutcome]] = set()
        self._claiming = True  # False once the node shuts down: sweeps claim nothing more

    # -- starting ----------------------------------------------------------------------
    def validate_input(self, plan: Plan, payload: Any) -> BaseModel:
        """Validate a start payload. Raises InputInvalid (``input_invalid``)."""
        try:
            return revive(plan.input_model, payload)
        except ValidationError as exc:
            raise InputInvalid(f"input of {plan.name} is invalid",
                               errors=exc.errors(include_url=False, include_context=False),
                               flow=plan.name) from None
        except (ValueError, RecursionError) as exc:  # not JSON-able, or nested too deep
            raise InputInvalid(f"input of {plan.name} cannot be read: {exc}",
                               flow=plan.name) from None

    async def start(self, plan: Plan, payload: Any, *, idempotency_key: str | None = None,
                    instance_key: str | None = None) -> StartResult:
        """Start an instance of ``plan`` and advance it until it parks or ends.

        Args:
            plan: the flow version to run.
            payload: the input (validated against ``plan.input_model``).
            idempotency_key: repeats with the same key and body return the first instance.
            instance_key: a business id unique among the flow's non-ended instances.

        Returns:
            :class:`StartResult`; for an ephemeral plan ``result`` holds the output and no
            row is written (``instance.state`` is final).

        Raises:
            InputInvalid, IdempotencyKeyReused, InstanceKeyInUse.
        """
        model = self.validate_input(plan, payload)
        data = model.model_dump(mode="json", by_alias=True)
        if plan.profile is Profile.EPHEMERAL:
            from app.engine.ephemeral import run_ephemeral

            return await run_ephemeral(self, plan, data)
        now = self.clock.now()
        new = NewInstance(
            id=self.new_id(), flow_name=plan.name, flow_version=plan.version, input=data,
            created_at=now, deadline_at=(now + plan.deadline) if plan.deadline else None,
            lease_owner=self.config.node_id, lease_expires_at=now + self.lease,
            idempotency_key=idempotency_key,
            request_hash=request_hash({"input": data, "instanceKey": instance_key}),
            instance_key=instance_key,
        )
        record, created = await self.journal.create_instance(new)
        if created:
            try:
                await self._advance_detachable(Claim(record.id, record.fencing_token),
                                               gated=False)
            except StaleFencingToken:
                pass  # logged by advance: the node that took the lease over goes on
            except Exception:  # noqa: BLE001 - the row is durable; the sweep takes it over
                log.exception("instance %s: first advance failed on node %s; the sweep "
                              "resumes it once its lease expires", record.id,
                              self.config.node_id)
            record = await self.journal.get_instance(record.id)
        return StartResult(record, created, record.result)

    # -- advancing ---------------------------------------------------------------------
    async def advance(self, claim: Claim, *, detach: asyncio.Future[None] | None = None
                      ) -> RunOutcome:
        """Advance a claimed instance until it parks or ends.

        A stale fencing token (another node claimed it meanwhile) stops the run, logged;
        nothing half-written remains because every write is one transaction.

        Args:
            claim: the lease this node holds.
            detach: resolved by the run when it starts a try of a heartbeating capability
                (a wait that may last minutes), so a caller can stop waiting for it.
        """
        snapshot = await self.journal.load(claim.instance_id)
        inst = snapshot.instance
        plan = self.catalog.find(inst.flow_name, inst.flow_version)
        if plan is None:
            log.warning("instance %s: flow %s@%s is not registered on node %s; left parked",
                        inst.id, inst.flow_name, inst.flow_version, self.config.node_id)
            await self.journal.release(inst.id, claim.fencing_token, self.clock.now())
            return RunOutcome(inst.id, InstanceState.SUSPENDED, inst.wake_at, runnable=False)
        try:
            run = Run(self, plan, inst, claim, snapshot.steps, snapshot.signals)
        except Exception as exc:  # noqa: BLE001 - stored input no longer fits its model
            return await self._fail_unreadable(inst, claim, exc)
        run.detach = detach
        try:
            halt = await self._walk(run)
        except StaleFencingToken:
            log.warning("instance %s: fencing token %d is stale on node %s; stopped",
                        inst.id, claim.fencing_token, self.config.node_id)
            raise
        except (FlowparkError, asyncio.CancelledError):
            raise  # a lost race, the store unreachable, shutdown: a later claim retries
        except Exception as exc:  # noqa: BLE001 - never re-claim a broken run forever
            halt = await self._fail_broken(run, exc)
        if halt.state is InstanceState.SUSPENDED and halt.wake_at is not None:
            for listener in self.wake_listeners:
                listener(inst.id, halt.wake_at)
        return RunOutcome(inst.id, halt.state, halt.wake_at, run.attempts)

    async def _fail_broken(self, run: Run, exc: Exception) -> Halt:
        """An error outside any capability call (a value the store cannot hold, a bug):
        fail the instance with ``flow.internal_error`` and unwind, instead of leaving it
        running to be re-claimed and fail again after every lease."""
        log.error("instance %s: run failed on node %s; failing it", run.instance_id,
                  self.config.node_id, exc_info=exc)
        failure = FlowFailure("flow.internal_error", f"{type(exc).__name__}: {exc}"[:2000],
                              {"error_type": type(exc).__name__})
        return await self._unwind(run, InstanceState.FAILED, failure)

    async def _fail_unreadable(self, inst: InstanceRecord, claim: Claim, exc: Exception
                               ) -> RunOutcome:
        log.error("instance %s: its stored input does not validate on node %s; failing it",
                  inst.id, self.config.node_id, exc_info=exc)
        now = self.clock.now()
        failure = FlowFailure("flow.internal_error",
                              f"stored input is unreadable: {type(exc).__name__}: {exc}"[:2000],
                              {"error_type": type(exc).__name__})
        await self.journal.finish(inst.id, claim.fencing_token, now, InstanceState.FAILED,
                                  failure=failure)
        return RunOutcome(inst.id, InstanceState.FAILED)

    async def _walk(self, run: Run) -> Halt:
        try:
            try:
                await self._walk_nodes(run)
                return await self._complete(run)
            except _Interrupt as stop:
                if stop.ending is InstanceState.COMPLETED:
                    return await self._complete(run, stop.result, early=True)
                return await self._unwind(run, stop.ending, stop.failure)
        except _Park as parked:
            return parked.halt

    async def _walk_nodes(self, run: Run) -> None:
        cursor = 0
        plan = run.plan
        while cursor < plan.end:
            node = plan.nodes[cursor]
            if isinstance(node, StepNode):
                cursor = await self._step(run, node)
            elif isinstance(node, PollNode):
                cursor = await self._poll(run, node)
            elif isinstance(node, AwaitSignalNode):
                cursor = await self._await_signal(run, node)
            elif isinstance(node, EmitNode):
                cursor = await self._emit(run, node)
            elif isinstance(node, FailNode):
                run.check_interrupts()
                raise _Interrupt(InstanceState.FAILED, FlowFailure(node.code, node.message,
                                     {"node": node.index}))
        run.check_interrupts()

    async def _attempt(self, run: Run, node: StepNode, scope: int, wake_step: int, *,
                       budget_end: datetime | None = None, accept: str | None = None
                       ) -> StepRow | None:
        """Replay or run one try of (node, scope).

        Returns the deciding row (a success or a final failure), or None when the caller
        must look again: a try failed and the next is pending, or a park was refused because
        a signal is waiting. Parks (raises) while the next try is not due yet.
        """
        rows = run.found(node.index, scope)
        for row in rows:
            if row.outcome is Outcome.SUCCESS:
                run.apply(row)
                return row
        if rows and rows[-1].final:
            return rows[-1]
        run.check_interrupts()
        if run.lost_attempt(node, scope):
            row = await run.record_lost(node, scope)
            return row if row.final else None
        if rows and rows[-1].next_try_at is not None:
            due: datetime | None = rows[-1].next_try_at
        else:
            parked, due = run.wake_for(wake_step, scope)
            due = due if parked else None
        if due is not None and run.now() < due:
            wake = min(due, budget_end) if budget_end is not None else due
            await run.park(wake, wake_step, scope, accept)
            return None
        row = await run.execute(node, scope, node.capability)
        if row.outcome is Outcome.SUCCESS:
            run.apply(row)
            return row
        return row if row.final else None

    def _step_failed(self, node: StepNode, row: StepRow) -> _Interrupt:
        return _Interrupt(InstanceState.FAILED, FlowFailure(
            "flow.step_failed",
            f"{node.capability.id} failed after {row.try_number} tries: "
            f"{row.error_type}: {row.error_detail}",
            {"capability_id": node.capability.id, "error_type": row.error_type,
             "detail": row.error_detail, "node": node.index, "tries": row.try_number},
        ))

    async def _step(self, run: Run, node: StepNode) -> int:
        row = None
        while row is None:
            row = await self._attempt(run, node, 0, node.index)
        if row.outcome is Outcome.SUCCESS:
            run.recovery = None
            if node.compensation is not None:
                run.compensations.append((node, 0))
            run.decided(row)
            assert node.next is not None
            return node.next
        if node.failure_target is not None:
            run.recovery = RecoveryError(row.error_type or "error", row.error_detail or "",
                                         row.try_number)
            return node.failure_target
        raise self._step_failed(node, row)

    @staticmethod
    def _timed_out(target: int | None, failure: FlowFailure) -> int:
        if target is None:
            raise _Interrupt(InstanceState.FAILED, failure)
        return target

    @staticmethod
    def _block_taken(run: Run, start: int | None, stop: int) -> bool:
        return start is not None and any(i in run.touched_steps for i in range(start, stop))

    async def _poll(self, run: Run, node: PollNode) -> int:
        body = run.plan.nodes[node.body_index]
        assert isinstance(body, StepNode)
        scope = 0
        while True:  # replay the committed attempts
            signalled = run.found(node.index, scope, StepKind.SIGNAL)
            if signalled:
                run.apply(signalled[0])
                return node.satisfied_target
            success = [r for r in run.found(body.index, scope) if r.outcome is Outcome.SUCCESS]
            if not success:
                break
            run.apply(success[0])
            if _satisfied(node, run):
                return node.satisfied_target
            scope += 1
        if self._block_taken(run, node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]

        def budget_end() -> datetime | None:
            first = run.found(body.index, 0)
            return first[0].started_at + node.timeout if first else None

        accept = self._accepts(node)
        if node.signal is not None:
            await run.refresh_mailbox()
        while True:  # the frontier
            run.check_interrupts()
            if node.signal is not None:
                pending = run.pending_signal(node.signal.name)
                if pending is not None:
                    await run.take_signal(node.index, scope, pending, node.signal.model)
                    return node.satisfied_target
            end = budget_end()
            if end is not None and run.now() >= end:
                return self._timed_out(node.timeout_target, FlowFailure(
                    "flow.poll_not_satisfied",
                    f"{body.capability.id} was not satisfied within {node.timeout}",
                    {"node": node.index, "capability_id": body.capability.id,
                     "attempts": scope},
                ))
            row = await self._attempt(run, body, scope, node.index, budget_end=end,
                                      accept=accept)
            if row is None:
                continue
            if row.outcome is Outcome.FAILURE:
                raise self._step_failed(body, row)
            run.decided(row)
            if _satisfied(node, run):
                return node.satisfied_target
            end = budget_end()
            assert end is not None
            wake_at = min(run.now() + node.interval.delay(scope, run.instance_id), end)
            scope += 1
            run.pending_wake = (node.index, scope, wake_at)
            await run.park(wake_at, node.index, scope, accept)

    @staticmethod
    def _accepts(node: PollNode | AwaitSignalNode) -> str | None:
        return node.signal.name if node.signal is not None else None

    async def _await_signal(self, run: Run, node: AwaitSignalNode) -> int:
        taken = run.found(node.index, 0, StepKind.SIGNAL)
        if taken:
            run.apply(taken[0])
            return node.satisfied_target
        if self._block_taken(run, node.timeout_target, node.satisfied_target):
            return node.timeout_target  # type: ignore[return-value]
        await run.refresh_mailbox()
        while True:
            run.check_interrupts()
            pending = run.pending_signal(node.signal.name)
            if pending is not None:
                await run.take_signal(node.index, 0, pending, node.signal.model)
                return node.satisfied_target
            parked, wake = run.wake_for(node.index, 0)
            if not parked:
                wake = run.now() + node.timeout if node.timeout is not None else None
            elif wake is not None and run.now() >= wake:
                return self._timed_out(node.timeout_target, FlowFailure("flow.signal_not_received",
                                                   f"signal {node.signal.name} did not arrive "
                                                   f"within {node.timeout}",
                    {"node": node.index}))
            run.pending_wake = (node.index, 0, wake)
            await run.park(wake, node.index, 0, node.signal.name)

    async def _emit(self, run: Run, node: EmitNode) -> int:
        if run.found(node.index, 0, StepKind.EMIT):
            return node.next
        run.check_interrupts()
        payload = _evaluate(f"emit {node.name}", lambda: _jsonable(node.factory(run.view())))
        now = run.now()
        event = EmittedEvent(self.new_id(), node.name, payload)
        row = StepRow(run.instance_id, node.index, 0, StepKind.EMIT, node.name,
                      Outcome.SUCCESS, now, now, values={"event_id": event.id})
        ack = await run.journal.commit_step(run.token, row, run.lease_until(), events=[event])
        run.record(row)
        run.after_ack(ack)
        return node.next

    async def _complete(self, run: Run, result: Any = None, early: bool = False) -> Halt:
        if not early:
            returns = run.plan.returns
            result = _evaluate("returns", lambda: _jsonable(returns(run.view()))
                               ) if returns else None
        ack = await run.journal.finish(run.instance_id, run.token, run.now(),
                                        InstanceState.COMPLETED, result=result)
        if not ack.applied:
            return await self._unwind(run, InstanceState.CANCELLED,
                                      FlowFailure("flow.cancelled", "the instance was cancelled"))
        return Halt(InstanceState.COMPLETED)

    async def _unwind(self, run: Run, ending: InstanceState, failure: FlowFailure | None
                      ) -> Halt:
        """Run compensations of completed steps in reverse order, once each, then end."""
        if run.instance.ending is None:
            await run.journal.begin_ending(run.instance_id, run.token, run.now(), ending,
                                            failure)
        for node, scope in reversed(run.compensations):
            assert node.compensation is not None
            if run.found(node.index, scope, StepKind.COMPENSATION):
                continue
            row = await run.execute(node, scope, node.compensation, StepKind.COMPENSATION)
            if row.outcome is Outcome.FAILURE:
                log.error("instance %s: compensation %s failed: %s: %s", run.instance_id,
                          node.compensation.id, row.error_type, row.error_detail)
        await run.journal.finish(run.instance_id, run.token, run.now(), ending,
                                  failure=failure)
        return Halt(ending)

    # -- capability limits ---------------------------------------------------------------
    async def call_with_limits(self, capability: Capability, ctx: ExecutionContext,
                               opts: CapabilityOptions, run: Run) -> Any:
        """Run one try with ``execute_timeout`` (and heartbeat watchdog) on the engine clock;
        renew the lease meanwhile when the capability does not heartbeat.

        A try starts only on a lease with at least two thirds of its length left: when the
        run's last lease write is older than a third of the lease (time spent waiting for a
        connection or a busy event loop before the call), the lease is renewed first.

        Raises:
            StaleFencingToken: a renewal was refused (another node claimed the instance
                after the lease lapsed): the try is not started, or is cancelled at once,
                and nothing of it is committed.
        """
        if opts.heartbeat_timeout is None and self._lease_left(run) < self.lease * 2 / 3:
            await self._renew_lease(run)
        task = asyncio.ensure_future(capability.execute(ctx))
        watchers: list[asyncio.Future[Any]] = []
        timer = asyncio.ensure_future(self.clock.sleep(opts.execute_timeout))
        watchers.append(timer)
        keeper = None
        if opts.heartbeat_timeout is None:
            # watched like the timers: a refused renewal ends the try at once
            keeper = asyncio.ensure_future(self._keep_lease(run))
            watchers.append(keeper)
        else:
            watchers.append(asyncio.ensure_future(self._watch_heartbeats(ctx, opts, run)))
        try:
            done, _ = await asyncio.wait({task, *watchers},
                                         return_when=asyncio.FIRST_COMPLETED)
            if task in done:
                return task.result()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if keeper is not None and keeper in done:
                keeper.result()  # raises: the lease was lost (StaleFencingToken)
            if timer in done:
                raise _CapabilityTimeout(
                    "execute_timeout",
                    f"{capability.id} did not finish within {opts.execute_timeout}")
            raise _CapabilityTimeout(
                "heartbeat_timeout",
                f"{capability.id} recorded no heartbeat for {opts.heartbeat_timeout}")
        finally:
            # also when this run is cancelled (node shutting down): the try must not go on
            # polling, heartbeating or writing stream messages without its run
            task.cancel()
            for watcher in watchers:
                watcher.cancel()
            await asyncio.gather(task, *watchers, return_exceptions=True)

    def _lease_left(self, run: Run) -> timedelta:
        """Lease time left by the run's last lease write known here (its claim's, or the
        keeper's); zero when unknown. Writes that renew the lease on the side (a step
        commit) are not counted, so this errs on the short side."""
        if run.lease_expires_at is None:
            return timedelta(0)
        return run.lease_expires_at - run.now()

    async def _renew_lease(self, run: Run) -> bool:
        """Renew the run's lease (fenced). Returns False when the store could not be
        reached (logged; the caller tries again later).

        Raises:
            StaleFencingToken: the lease was lost to another node (logged).
        """
        until = run.now() + self.lease
        try:
            ack = await run.journal.renew_lease(run.instance_id, run.token, until)
        except StaleFencingToken:
            log.warning("instance %s: lease renewal refused on node %s (token %d): "
                        "another node took it over; this node stops the run",
                        run.instance_id, self.config.node_id, run.token)
            raise
        except StoreUnavailable as exc:
            log.warning("instance %s: lease renewal failed on node %s: %s",
                        run.instance_id, self.config.node_id, exc)
            return False
        run.lease_expires_at = until
        run.after_ack(ack)
        return True

    async def _keep_lease(self, run: Run) -> None:
        """Renew the run's lease whenever two thirds of it are left (every ``lease / 3``
        on the engine clock), until cancelled.

        A renewal the store cannot make (database unreachable) is logged and tried again
        after a tenth of the lease. Cancelled (the try ended), the keeper first lets a
        renewal in flight finish.

        Raises:
            StaleFencingToken: the lease was lost; the caller cancels the try.
        """
        while True:
            await self.clock.sleep(self._lease_left(run) - self.lease * 2 / 3)
            renewal = asyncio.ensure_future(self._renew_lease(run))
            try:
                renewed = await asyncio.shield(renewal)
            except asyncio.CancelledError:
                # the try ended meanwhile: let the statement finish, since one cut off
                # mid-way leaves its pooled connection unreturned
                await asyncio.gather(renewal, return_exceptions=True)
                raise
            if not renewed:
                await self.clock.sleep(self.lease / 10)

    async def _watch_heartbeats(self, ctx: ExecutionContext, opts: CapabilityOptions,
                                run: Run) -> None:
        assert opts.heartbeat_timeout is not None
        started = run.now()
        while True:
            last = ctx.last_heartbeat_at or started
            remaining = last + opts.heartbeat_timeout - run.now()
            if remaining <= timedelta(0):
                return
            await self.clock.sleep(remaining)

    # -- sweeping ----------------------------------------------------------------------
    async def sweep(self, *, limit: int | None = None) -> SweepReport:
        """Claim due instances (parked with ``wake_at <= now``, or running with an expired
        lease) and advance each, until none is due or ``limit`` were claimed.

        Back-pressure: a claim asks for at most ``sweep_batch`` instances and never more
        than this node's free run slots (``concurrency``), so every claimed instance starts
        at once and no lease runs out in a queue. While every slot is busy the sweep waits
        for runs to end, then claims again (once a quarter of the slots, or of the batch,
        is free).

        Returns:
            :class:`SweepReport`; runs refused on a stale fencing token count as
            ``failed_runs`` (logged by :meth:`advance`), other run errors are logged here.

        Raises:
            StoreUnavailable: a claim failed (the runs already started finish first).
        """
        report = SweepReport()
        runnable = self.catalog.runnable()
        batch = self.config.sweep_batch
        refill = max(1, min(batch, self.config.concurrency) // 4)
        runs: dict[asyncio.Future[RunOutcome], tuple[str, asyncio.Future[RunOutcome]]] = {}
        more = True
        failure: BaseException | None = None
        try:
            while True:
                wanted = batch if limit is None else min(batch, limit - report.claimed)
                if more and self._claiming and wanted > 0 and (
                        not runs or self.config.concurrency - len(runs) >= refill):
                    try:
                        claims, held = await self._claim_with_slots(wanted, runnable,
                                                                    wait=not runs)
                    except Exception as exc:  # noqa: BLE001 - re-raised once runs end
                        failure, more, claims, held = exc, False, [], 0
                    more = more and len(claims) == held  # fewer claims than slots: none due
                    report.claimed += len(claims)
                    for claim in claims:
                        # the run holds the slot taken for it until it ends, also when it
                        # goes on in the background
                        started = self._begin_run(claim, gated=False)
                        started[0].add_done_callback(lambda _: self._gate.release())
                        waiting: asyncio.Future[RunOutcome] = asyncio.ensure_future(
                            self._advance_detachable(claim, gated=False, started=started))
                        runs[waiting] = (claim.instance_id, started[0])
                if not runs:
                    break
                done, _ = await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)
                for waiter in done:
                    self._report_run(report, runs.pop(waiter)[0], waiter)
        except asyncio.CancelledError:
            for waiter, (_, task) in runs.items():
                waiter.cancel()
                task.cancel()
            await asyncio.gather(*runs, *(task for _, task in runs.values()),
                                 return_exceptions=True)
            raise
        if failure is not None:
            raise failure
        report.not_runnable = await self.journal.count_not_runnable(self.clock.now(), runnable)
        if report.not_runnable:
            log.warning("%d due instances belong to flows not registered on node %s",
                        report.not_runnable, self.config.node_id)
        return report

    def stop_claiming(self) -> None:
        """Node shutdown: sweeps claim no more instances; a sweep in progress finishes the
        runs it started and returns, so a stopping node does not keep taking new work
        during its grace period. Starts, signals and cancels still work."""
        self._claiming = False

    async def _claim_with_slots(self, wanted: int, runnable: list[tuple[str, str]], *,
                                wait: bool) -> tuple[list[Claim], int]:
        """Hold up to ``wanted`` free run slots (waiting for one when ``wait``), claim that
        many due instances, and give back the slots no claim needed.

        Returns:
            ``(claims, slots held)``; each claim keeps one slot, for its run to release.
        """
        held = 0
        if wait:
            await self._gate.acquire()
            held = 1
        while held < wanted and not self._gate.locked():
            await self._gate.acquire()  # free: returns without waiting
            held += 1
        claims: list[Claim] = []
        try:
            if held and self._claiming:
                now = self.clock.now()
                claims = await self.journal.claim_due(self.config.node_id, now,
                                                      now + self.lease, held, runnable)
        finally:
            for _ in range(held - len(claims)):
                self._gate.release()
        return claims, held

    def _report_run(self, report: SweepReport, instance_id: str,
                    run: asyncio.Future[RunOutcome]) -> None:
        error = run.exception() if not run.cancelled() else asyncio.CancelledError()
        if error is None:
            report.advanced += 1
            report.outcomes.append(run.result())
            return
        report.failed_runs += 1
        if not isinstance(error, StaleFencingToken):
            log.error("instance %s: run failed on node %s", instance_id,
                      self.config.node_id, exc_info=error)

    def _begin_run(self, claim: Claim, *, gated: bool
                   ) -> tuple[asyncio.Future[RunOutcome], asyncio.Future[None]]:
        """Start advancing ``claim`` in a task (taking a run slot first when ``gated``).

        Returns:
            ``(the run's task, its detach future)``, see :meth:`_advance_detachable`.
        """
        detach: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def run() -> RunOutcome:
            if not gated:
                return await self.advance(claim, detach=detach)
            async with self._gate:
                return await self.advance(claim, detach=detach)

        return asyncio.ensure_future(run()), detach

    async def _advance_detachable(
        self, claim: Claim, *, gated: bool,
        started: tuple[asyncio.Future[RunOutcome], asyncio.Future[None]] | None = None,
    ) -> RunOutcome:
        """Advance ``claim`` until it parks or ends, or until it starts a try of a
        heartbeating capability: then the run goes on in the background (see :meth:`drain`)
        and the answer is ``RunOutcome(state=running)``, so a start request or a sweep is
        not held for the length of an in-process wait. ``started``: a run already begun
        with :meth:`_begin_run`."""
        task, detach = started or self._begin_run(claim, gated=gated)
        try:
            pending: set[asyncio.Future[Any]] = {task, detach}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if task.done():
            detach.cancel()
            return task.result()
        self._background.add(task)
        task.add_done_callback(self._background_done)
        return RunOutcome(claim.instance_id, InstanceState.RUNNING)

    def _background_done(self, task: asyncio.Future[RunOutcome]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, StaleFencingToken):
            log.error("background run failed on node %s", self.config.node_id,
                      exc_info=error)

    async def drain(self) -> None:
        """Wait until every run this engine continued in the background has parked or
        ended (their errors are logged, not raised)."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Cancel the runs continued in the background (node shutdown). A cancelled try
        commits nothing: its heartbeat timeout lets any node retry it from its checkpoint."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)

    async def wake(self, instance_id: str) -> RunOutcome | None:
        """Claim one instance now (if nobody holds it) and advance it."""
        now = self.clock.now()
        claim = await self.journal.claim(instance_id, self.config.node_id, now, now + self.lease)
        if claim is None:
            return None
        # a request (signal, cancel) runs its own work: the run-slot gate bounds the
        # sweep's background work, and a claim must never wait in a queue unrenewed
        return await self._advance_detachable(claim, gated=False)

    # -- signals and cancel ------------------------------------------------------------
    async def deliver_signal(self, instance_id: str, name: str, payload: Any,
                             idempotency_key: str | None = None) -> tuple[SignalRecord, bool]:
        """Store a signal first, then, if the instance is parked on a wait that accepts it,
        claim and continue it now.

        Returns:
            ``(signal, created)``.

        Raises:
            InstanceNotFound (``instance_not_found``), SignalNotDeclared
            (``signal_not_declared``), InputInvalid (``input_invalid``), InstanceEnded
            (``instance_ended``; nothing stored).
        """
        inst = await self.journal.get_instance(instance_id)
        plan = self.catalog.find(inst.flow_name, inst.flow_version)
        signal = plan.signals.get(name) if plan is not None else None
        if signal is None:
            raise SignalNotDeclared(
                f"flow {inst.flow_name}@{inst.flow_version} declares no signal {name!r}",
                instance_id=instance_id, signal=name)
        try:
            data = revive(signal.model, payload).model_dump(mode="json", by_alias=True)
        except ValidationError as exc:
            raise InputInvalid(f"payload of signal {name} is invalid",
                               errors=exc.errors(include_url=False, include_context=False),
                               signal=name) from None
        except (ValueError, RecursionError) as exc:  # e.g. nesting too deep to serialise
            raise InputInvalid(f"payload of signal {name} cannot be stored: {exc}",
                               signal=name) from None
        # the store decides "ended" atomically with the insert; a repeated key gets the
        # first answer even after the instance ended
        record, created = await self.journal.deliver_signal(
            instance_id, name, data, idempotency_key, self.clock.now(), self.new_id())
        if created:
            fresh = await self.journal.get_instance(instance_id)
            if fresh.state is InstanceState.SUSPENDED and self._waits_for(plan, fresh, name):
                with contextlib.suppress(StaleFencingToken):
                    await self.wake(instance_id)
        return record, created

    @staticmethod
    def _waits_for(plan: Plan | None, inst: InstanceRecord, name: str) -> bool:
        if plan is None or inst.wake_step_id is None or inst.wake_step_id >= plan.end:
            return False
        node = plan.nodes[inst.wake_step_id]
        if isinstance(node, PollNode | AwaitSignalNode) and node.signal is not None:
            return node.signal.name == name
        return False

    async def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel an instance: compensations of completed steps run once, in reverse order,
        and it ends ``cancelled``. A running instance held by another node is flagged and
        that node unwinds it at its next write.

        Raises:
            InstanceNotFound, InstanceEnded (completion won the race).
        """
        now = self.clock.now()
        ack = await self.journal.request_cancel(instance_id, self.config.node_id, now,
                                                now + self.lease)
        if ack.claim is not None:
            await self._advance_detachable(ack.claim, gated=False)
        return await self.journal.get_instance(instance_id)


def _evaluate(what: str, expression: Callable[[], Any]) -> Any:
    """Run a flow expression (``until``, an emit factory, ``returns``); an exception in it
    fails the flow with ``flow.expression_failed`` instead of wedging the instance."""
    try:
        return expression()
    except Exception as exc:  # noqa: BLE001 - user code
        raise _Interrupt(InstanceState.FAILED, FlowFailure(
            "flow.expression_failed", f"{what} raised {type(exc).__name__}: {exc}",
            {"expression": what, "error_type": type(exc).__name__})) from exc


def _satisfied(node: PollNode, run: Run) -> bool:
    return bool(_evaluate("until", lambda: node.until(run.view())))


__all__ += ["DECISION_KEY"]
