"""``Engine``: starts instances, advances them from their journal, sweeps due ones.

The engine imports nothing from fastapi, sqlalchemy, apscheduler or httpx; it reaches
storage through :class:`app.engine.journal.Journal` and time through
:class:`app.engine.clock.Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from uuid6 import uuid7

from app.engine.clock import Clock
from app.engine.journal import (
    Claim,
    InstanceRecord,
    InstanceState,
    NewInstance,
    SignalRecord,
    Snapshot,
)
from app.engine.limits import CallLimits
from app.engine.observe import LOG_CONTEXT, Observer
from app.engine.roles import Journal
from app.engine.runner import Run
from app.engine.stops import Halt, RunOutcome
from app.engine.sweeps import SweepPass
from app.engine.walker import PlanWalker
from app.errors import (
    FlowFailure,
    FlowparkError,
    InputInvalid,
    SignalNotDeclared,
    StaleFencingToken,
)
from app.flows.catalog import Catalog
from app.flows.plan import AwaitSignalNode, Plan, PollNode, Profile

__all__ = ["Engine", "EngineConfig", "SignalDelivery", "StartResult", "SweepReport"]

log = logging.getLogger("flowpark.engine")


def _accepting(plan: Plan, name: str) -> tuple[int, ...]:
    """The nodes of ``plan`` whose wait a signal ``name`` ends (polls and awaits)."""
    return tuple(
        node.index
        for node in plan.nodes
        if isinstance(node, PollNode | AwaitSignalNode)
        and node.signal is not None
        and node.signal.name == name
    )


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
        start_wait: how long :meth:`Engine.start` waits (on the engine clock) for a new
            instance to park or end before it answers with the instance ``running`` while
            the run goes on in the background; None (default): until it parks or ends (or
            reaches a heartbeating capability). The server sets it from
            ``FLOWPARK_START_WAIT_SECONDS`` (2 s).
    """

    node_id: str = "node-1"
    lease: timedelta = timedelta(seconds=30)
    sweep_batch: int = 100
    concurrency: int = 32
    start_wait: timedelta | None = None


@dataclass(frozen=True)
class StartResult:
    """A start's answer: the instance after its first advance, and whether it is new."""

    instance: InstanceRecord
    created: bool
    result: Any = None


@dataclass(frozen=True)
class SignalDelivery:
    """A signal delivery's answer (:meth:`Engine.deliver`).

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

    The engine composes a :class:`~app.engine.walker.PlanWalker` (``walker``: walks a run's
    plan) and a :class:`~app.engine.limits.CallLimits` (``limits``: runs one capability
    call under its timeouts, the lease keeper and the heartbeat watchdog).

    Args:
        journal: the store (one implementation: ``app.store.SqlJournal``).
        catalog: registered plans.
        clock: the engine clock (``SystemClock``; ``VirtualClock`` in tests).
        config: :class:`EngineConfig`.
        id_factory: makes instance, signal, event and review ids (default: uuid7 strings,
            ``str(uuid6.uuid7())``). Every id it returns must be a UUID string in canonical
            form (36 characters, lowercase hex, dashed, as ``str(uuid.UUID(...))`` gives):
            PostgreSQL stores instance ids as ``uuid``, and the store refuses a start with
            any other id (``ValueError``) and finds no instance by one
            (``instance_not_found``). Time-ordered UUIDs (uuid7) keep the id indexes
            compact.
        observer: told what the engine does (metrics, traces: :mod:`app.engine.observe`);
            default: nothing is reported.
    """

    def __init__(
        self,
        journal: Journal,
        catalog: Catalog,
        clock: Clock,
        config: EngineConfig | None = None,
        id_factory: Callable[[], str] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.observer = observer or Observer()
        self.journal = journal
        self.catalog = catalog
        self.clock = clock
        self.config = config or EngineConfig()
        self.lease = self.config.lease
        self.new_id = id_factory or (lambda: str(uuid7()))
        self.walker = PlanWalker(self.new_id)
        self.limits = CallLimits(clock, self.lease, self.config.node_id)
        self._gate = asyncio.Semaphore(self.config.concurrency)
        self.wake_listeners: list[Callable[[str, datetime], None]] = []
        # runs that went on in the background once they reached a heartbeating capability
        self._background: set[asyncio.Future[RunOutcome]] = set()
        self._claiming = True  # False once the node shuts down: sweeps claim nothing more

    # -- starting ----------------------------------------------------------------------
    def validate_input(self, plan: Plan, payload: Any) -> BaseModel:
        """Validate a start payload. Raises InputInvalid (``input_invalid``)."""
        try:  # JSON names only (camelCase aliases): a field's Python name is not accepted
            return plan.input_model.model_validate_json(
                to_json(payload), by_alias=True, by_name=False
            )
        except ValidationError as exc:
            raise InputInvalid(
                f"input of {plan.name} is invalid",
                errors=exc.errors(include_url=False, include_context=False),
                flow=plan.name,
            ) from None
        except (ValueError, RecursionError) as exc:  # not JSON-able, or nested too deep
            raise InputInvalid(
                f"input of {plan.name} cannot be read: {exc}", flow=plan.name
            ) from None

    async def start(
        self,
        plan: Plan,
        payload: Any,
        *,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
    ) -> StartResult:
        """Start an instance of ``plan`` and advance it until it parks or ends, or until
        ``config.start_wait`` passed (then the answer is the instance ``running`` and the
        run goes on in the background; the instance row is durable before any of it).

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
        with self.observer.start_span(plan.name, plan.version):
            return await self._start(plan, data, idempotency_key, instance_key)

    async def _start(
        self,
        plan: Plan,
        data: dict[str, Any],
        idempotency_key: str | None,
        instance_key: str | None,
    ) -> StartResult:
        now = self.clock.now()
        new = NewInstance(
            id=self.new_id(),
            flow_name=plan.name,
            flow_version=plan.version,
            input=data,
            created_at=now,
            deadline_at=(now + plan.deadline) if plan.deadline else None,
            lease_owner=self.config.node_id,
            lease_expires_at=now + self.lease,
            idempotency_key=idempotency_key,
            instance_key=instance_key,
            trace_context=self.observer.trace_context(),
        )
        record, created = await self.journal.writes.create_instance(new)
        if created:
            self.observer.started(plan.name, plan.version, record.id)
            # a new instance has no journal and no mailbox yet (a signal sent meanwhile is
            # read by the walk before it waits): nothing to load
            claim = Claim(record.id, record.fencing_token, Snapshot(record, [], []))
            outcome = None
            started = self._begin_run(claim, gated=False)
            bound = None
            if self.config.start_wait is not None:
                detach = started[1]

                def answer_now() -> None:
                    if not detach.done():  # still working: answer, let the run go on
                        detach.set_result(None)

                bound = self.clock.call_later(self.config.start_wait, answer_now)
            try:
                outcome = await self._advance_detachable(claim, gated=False, started=started)
            except StaleFencingToken:
                pass  # logged by advance: the node that took the lease over goes on
            except Exception:  # noqa: BLE001 - the row is durable; the sweep takes it over
                log.exception(
                    "instance %s: first advance failed on node %s; the sweep "
                    "resumes it once its lease expires",
                    record.id,
                    self.config.node_id,
                )
            finally:
                if bound is not None:
                    bound.cancel()
            if outcome is not None and outcome.instance is not None:
                record = outcome.instance  # as the run left it: no read back
            else:
                record = await self.journal.reads.get_instance(record.id)
        return StartResult(record, created, record.result)

    # -- advancing ---------------------------------------------------------------------
    async def advance(
        self, claim: Claim, *, detach: asyncio.Future[None] | None = None
    ) -> RunOutcome:
        """Advance a claimed instance until it parks or ends.

        A stale fencing token (another node claimed it meanwhile) stops the run, logged;
        nothing half-written remains because every write is one transaction.

        Args:
            claim: the lease this node holds.
            detach: resolved by the run when it starts a try of a heartbeating capability
                (a wait that may last minutes), so a caller can stop waiting for it.
        """
        snapshot = claim.snapshot or await self.journal.writes.load(claim.instance_id)
        inst = snapshot.instance
        LOG_CONTEXT.set({"instance_id": inst.id, "flow": inst.flow_name})
        if claim.taken_over:
            self.observer.taken_over(inst.flow_name)
        with self.observer.run_span(inst.id, inst.flow_name, inst.flow_version, inst.trace_context):
            return await self._advance(claim, inst, snapshot, detach)

    async def _advance(
        self,
        claim: Claim,
        inst: InstanceRecord,
        snapshot: Snapshot,
        detach: asyncio.Future[None] | None,
    ) -> RunOutcome:
        plan = self.catalog.find(inst.flow_name, inst.flow_version)
        if plan is None:
            log.warning(
                "instance %s: flow %s@%s is not registered on node %s; left parked",
                inst.id,
                inst.flow_name,
                inst.flow_version,
                self.config.node_id,
            )
            await self.journal.claims.release(inst.id, claim.fencing_token, self.clock.now())
            return RunOutcome(inst.id, InstanceState.SUSPENDED, inst.wake_at, runnable=False)
        try:
            run = Run(self, plan, inst, claim, snapshot.steps, snapshot.signals)
        except Exception as exc:  # noqa: BLE001 - stored input no longer fits its model
            return await self._fail_unreadable(inst, claim, exc)
        run.detach = detach
        try:
            halt = await self.walker.walk(run)
        except StaleFencingToken:
            self.observer.fencing_refused(inst.flow_name)
            log.warning(
                "instance %s: fencing token %d is stale on node %s; stopped",
                inst.id,
                claim.fencing_token,
                self.config.node_id,
            )
            raise
        except (FlowparkError, asyncio.CancelledError):
            raise  # a lost race, the store unreachable, shutdown: a later claim retries
        except Exception as exc:  # noqa: BLE001 - never re-claim a broken run forever
            halt = await self._fail_broken(run, exc)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "instance %s: %s after %d tries on node %s (wake at %s)",
                inst.id,
                halt.state.value,
                run.attempts,
                self.config.node_id,
                halt.wake_at.isoformat() if halt.wake_at else "-",
            )
        if halt.state.ended:
            failure = run.instance.failure
            self.observer.ended(
                inst.flow_name,
                inst.flow_version,
                halt.state.value,
                failure.code if failure is not None else None,
            )
        elif halt.state is InstanceState.SUSPENDED and halt.wake_at is not None:
            for listener in self.wake_listeners:
                listener(inst.id, halt.wake_at)
        return RunOutcome(
            inst.id,
            halt.state,
            halt.wake_at,
            run.attempts,
            instance=run.instance if run.instance.state is halt.state else None,
            signals_taken=tuple(run.mailbox.taken),
        )

    async def _fail_broken(self, run: Run, exc: Exception) -> Halt:
        """An error outside any capability call (a value the store cannot hold, a bug):
        fail the instance with ``flow.internal_error`` and unwind, instead of leaving it
        running to be re-claimed and fail again after every lease."""
        log.error(
            "instance %s: run failed on node %s; failing it",
            run.instance_id,
            self.config.node_id,
            exc_info=exc,
        )
        failure = FlowFailure(
            "flow.internal_error",
            f"{type(exc).__name__}: {exc}"[:2000],
            {"error_type": type(exc).__name__},
        )
        return await self.walker.unwind(run, InstanceState.FAILED, failure)

    async def _fail_unreadable(
        self, inst: InstanceRecord, claim: Claim, exc: Exception
    ) -> RunOutcome:
        log.error(
            "instance %s: its stored input does not validate on node %s; failing it",
            inst.id,
            self.config.node_id,
            exc_info=exc,
        )
        now = self.clock.now()
        failure = FlowFailure(
            "flow.internal_error",
            f"stored input is unreadable: {type(exc).__name__}: {exc}"[:2000],
            {"error_type": type(exc).__name__},
        )
        await self.journal.writes.finish(
            inst.id, claim.fencing_token, now, InstanceState.FAILED, failure=failure
        )
        self.observer.ended(inst.flow_name, inst.flow_version, "failed", failure.code)
        return RunOutcome(inst.id, InstanceState.FAILED)

    # -- sweeping ----------------------------------------------------------------------
    async def sweep(
        self, *, limit: int | None = None, again: Callable[[], bool] | None = None
    ) -> SweepReport:
        """Claim due instances (parked with ``wake_at <= now``, or running with an expired
        lease) and advance each, until none is due or ``limit`` were claimed.

        Back-pressure: a claim asks for at most ``sweep_batch`` instances and never more
        than this node's free run slots (``concurrency``), so every claimed instance starts
        at once and no lease runs out in a queue. While every slot is busy the sweep waits
        for runs to end, then claims again (once a quarter of the slots, or of the batch,
        is free).

        Args:
            limit: claim at most this many instances in all.
            again: asked whenever this sweep found nothing more due: True means more may
                be due now (an in-process wake fired meanwhile), so it claims again
                instead of returning (one sweep per node keeps all its run slots).

        Returns:
            :class:`SweepReport`; runs refused on a stale fencing token count as
            ``failed_runs`` (logged by :meth:`advance`), other run errors are logged here.

        Raises:
            StoreUnavailable: a claim failed (the runs already started finish first).
        """
        sweep = SweepPass(self, SweepReport(), limit, again)
        try:
            await sweep.run()
        except asyncio.CancelledError:
            await sweep.cancel()
            raise
        if sweep.failure is not None:
            raise sweep.failure
        report, began, runnable = sweep.report, sweep.began, sweep.runnable
        self.observer.swept((self.clock.now() - began).total_seconds(), report.claimed)
        report.not_runnable = await self.journal.claims.count_not_runnable(
            self.clock.now(), runnable
        )
        if report.not_runnable:
            log.warning(
                "%d due instances belong to flows not registered on node %s",
                report.not_runnable,
                self.config.node_id,
            )
        return report

    def stop_claiming(self) -> None:
        """Node shutdown: sweeps claim no more instances; a sweep in progress finishes the
        runs it started and returns, so a stopping node does not keep taking new work
        during its grace period. Starts, signals and cancels still work."""
        self._claiming = False

    async def _claim_with_slots(
        self, wanted: int, runnable: list[tuple[str, str]], *, wait: bool
    ) -> tuple[list[Claim], int]:
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
                claims = await self.journal.claims.claim_due(
                    self.config.node_id, now, now + self.lease, held, runnable
                )
        finally:
            for _ in range(held - len(claims)):
                self._gate.release()
        return claims, held

    def _report_run(
        self, report: SweepReport, instance_id: str, run: asyncio.Future[RunOutcome]
    ) -> None:
        error = run.exception() if not run.cancelled() else asyncio.CancelledError()
        if error is None:
            report.advanced += 1
            report.outcomes.append(run.result())
            return
        report.failed_runs += 1
        if not isinstance(error, StaleFencingToken):
            log.error(
                "instance %s: run failed on node %s",
                instance_id,
                self.config.node_id,
                exc_info=error,
            )

    def _begin_run(
        self, claim: Claim, *, gated: bool
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
        self,
        claim: Claim,
        *,
        gated: bool,
        started: tuple[asyncio.Future[RunOutcome], asyncio.Future[None]] | None = None,
    ) -> RunOutcome:
        """Advance ``claim`` until it parks or ends, or until it starts a try of a
        heartbeating capability: then the run goes on in the background (see :meth:`drain`)
        and the answer is ``RunOutcome(state=running)``, so a start request or a sweep is
        not held for the length of an in-process wait. ``started``: a run already begun
        with :meth:`_begin_run`."""
        task, detach = started or self._begin_run(claim, gated=gated)
        try:
            return await self._outcome(claim, task, detach)
        except asyncio.CancelledError:
            task.cancel()
            raise

    def _outcome(
        self, claim: Claim, task: asyncio.Future[RunOutcome], detach: asyncio.Future[None]
    ) -> asyncio.Future[RunOutcome]:
        """A future with :meth:`_advance_detachable`'s answer for a begun run: the run's
        result (or error) when it ends first, ``RunOutcome(state=running)`` when it detaches
        first (the run then goes on in the background). Callbacks, not a task: a sweep
        makes one per claimed instance. Cancelling it does not cancel the run."""
        outcome: asyncio.Future[RunOutcome] = asyncio.get_running_loop().create_future()

        def settle(_: asyncio.Future[Any]) -> None:
            if outcome.done():
                return
            if not task.done():  # detached: the run goes on without a waiter
                self._background.add(task)
                task.add_done_callback(self._background_done)
                outcome.set_result(RunOutcome(claim.instance_id, InstanceState.RUNNING))
                return
            detach.cancel()
            if task.cancelled():
                outcome.cancel()
            elif (error := task.exception()) is not None:
                outcome.set_exception(error)
            else:
                outcome.set_result(task.result())

        task.add_done_callback(settle)
        detach.add_done_callback(settle)
        return outcome

    def _background_done(self, task: asyncio.Future[RunOutcome]) -> None:
        self._background.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and not isinstance(error, StaleFencingToken):
            log.error("background run failed on node %s", self.config.node_id, exc_info=error)

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
        claim = await self.journal.claims.claim(
            instance_id, self.config.node_id, now, now + self.lease
        )
        if claim is None:
            return None
        # a request (signal, cancel) runs its own work: the run-slot gate bounds the
        # sweep's background work, and a claim must never wait in a queue unrenewed
        return await self._advance_detachable(claim, gated=False)

    async def wake_now(self, instance_id: str) -> RunOutcome | None:
        """An operator's wake: claim the parked instance and run the wait it is parked on
        now (a poll's next attempt, a retry's next try), then advance it until it parks or
        ends, as the sweep would have at its wake.

        Returns:
            The run's outcome; None when the instance was not claimable (not parked, or
            running under a live lease: nothing was done).

        Raises:
            InstanceNotFound: no such instance (``instance_not_found``).
        """
        now = self.clock.now()
        claim = await self.journal.claims.claim(
            instance_id, self.config.node_id, now, now + self.lease
        )
        if claim is None:
            return None
        return await self._advance_detachable(replace(claim, woken=True), gated=False)

    # -- signals and cancel ------------------------------------------------------------
    async def deliver(
        self, instance_id: str, name: str, payload: Any, idempotency_key: str | None = None
    ) -> SignalDelivery:
        """Store a signal first; if the instance is parked on a wait that accepts it, the
        same store transaction claims it, and the instance is continued now (until it
        parks or ends, or goes on in the background at a heartbeating capability).

        Returns:
            :class:`SignalDelivery`: the signal and the instance's state as they stand
            once this returns (from what the run knows, not read back), and whether the
            signal is new (a repeat of ``idempotency_key`` answers the first signal).

        Raises:
            InstanceNotFound (``instance_not_found``), SignalNotDeclared
            (``signal_not_declared``), InputInvalid (``input_invalid``), InstanceEnded
            (``instance_ended``; nothing stored).
        """
        inst = await self.journal.reads.get_instance(instance_id)
        plan = self.catalog.find(inst.flow_name, inst.flow_version)
        signal = plan.signals.get(name) if plan is not None else None
        if plan is None or signal is None:
            raise SignalNotDeclared(
                f"flow {inst.flow_name}@{inst.flow_version} declares no signal {name!r}",
                instance_id=instance_id,
                signal=name,
            )
        try:
            data = signal.model.model_validate_json(
                to_json(payload), by_alias=True, by_name=False
            ).model_dump(mode="json", by_alias=True)
        except ValidationError as exc:
            raise InputInvalid(
                f"payload of signal {name} is invalid",
                errors=exc.errors(include_url=False, include_context=False),
                signal=name,
            ) from None
        except (ValueError, RecursionError) as exc:  # e.g. nesting too deep to serialise
            raise InputInvalid(
                f"payload of signal {name} cannot be stored: {exc}", signal=name
            ) from None
        # the store decides "ended" atomically with the insert; a repeated key gets the
        # first answer even after the instance ended
        now = self.clock.now()
        delivered = await self.journal.mailbox.deliver_and_claim(
            instance_id,
            name,
            data,
            idempotency_key,
            now,
            self.new_id(),
            owner=self.config.node_id,
            lease_until=now + self.lease,
            wake_steps=_accepting(plan, name),
        )
        answer = SignalDelivery(
            delivered.signal, delivered.created, delivered.state, inst.flow_name, inst.flow_version
        )
        if delivered.claim is None:
            return answer
        outcome = None
        # a request runs its own work: the run-slot gate bounds the sweep's background
        # work, and a claim must never wait in a queue unrenewed
        with contextlib.suppress(StaleFencingToken):  # logged by advance
            outcome = await self._advance_detachable(delivered.claim, gated=False)
        if outcome is None or outcome.instance is None:
            # another node holds it, or the run goes on in the background: read back
            now_signal = await self.journal.mailbox.get_signal(instance_id, delivered.signal.id)
            state = (await self.journal.reads.get_instance(instance_id)).state
            return replace(answer, signal=now_signal or delivered.signal, state=state)
        taken = next(
            (s for s in outcome.signals_taken if s.id == delivered.signal.id), delivered.signal
        )
        return replace(answer, signal=taken, state=outcome.state)

    async def deliver_signal(
        self, instance_id: str, name: str, payload: Any, idempotency_key: str | None = None
    ) -> tuple[SignalRecord, bool]:
        """:meth:`deliver`, answering ``(signal, created)`` only.

        Raises:
            As :meth:`deliver`.
        """
        delivery = await self.deliver(instance_id, name, payload, idempotency_key)
        return delivery.signal, delivery.created

    async def cancel(self, instance_id: str) -> InstanceRecord:
        """Cancel an instance: compensations of completed steps run once, in reverse order,
        and it ends ``cancelled``. A running instance held by another node is flagged and
        that node unwinds it at its next write.

        Raises:
            InstanceNotFound, InstanceEnded (completion won the race).
        """
        now = self.clock.now()
        ack = await self.journal.claims.request_cancel(
            instance_id, self.config.node_id, now, now + self.lease
        )
        if ack.claim is not None:
            await self._advance_detachable(ack.claim, gated=False)
        return await self.journal.reads.get_instance(instance_id)
