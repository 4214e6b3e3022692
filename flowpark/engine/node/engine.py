"""``Engine``: starts instances, advances them from their journal, sweeps due ones.

The engine imports nothing from fastapi, sqlalchemy, apscheduler or httpx; it reaches
storage through :class:`flowpark.engine.records.Journal` and time through
:class:`flowpark.engine.clock.Clock`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_json
from uuid6 import uuid7

from flowpark.engine.clock import Clock, VirtualClock
from flowpark.engine.config import EngineConfig
from flowpark.engine.execute.budget import WAIT, ProviderBudget
from flowpark.engine.execute.limits import CallLimits
from flowpark.engine.node import outside, sweeps
from flowpark.engine.node.ephemeral import run_ephemeral
from flowpark.engine.node.outside import SignalDelivery
from flowpark.engine.node.runs import RunTasks
from flowpark.engine.node.sweeps import SweepReport
from flowpark.engine.observe import Observer
from flowpark.engine.outcomes import RunOutcome, StartResult
from flowpark.engine.ports import Store
from flowpark.engine.records import (
    InstanceRecord,
    NewInstance,
    SignalRecord,
)
from flowpark.errors import (
    InputInvalid,
)
from flowpark.flows.catalog import Catalog
from flowpark.flows.plan import Plan, Profile

__all__ = ["Engine", "EngineConfig", "SignalDelivery", "StartResult", "SweepReport"]

log = logging.getLogger("flowpark.engine")


class Engine:
    """Runs flows durably.

    The engine composes its parts: each run is an
    :class:`~flowpark.engine.execute.executor.Executor`
    that asks the pure :class:`~flowpark.engine.decide.decider.Decider` for the next decision and
    carries it out; a :class:`~flowpark.engine.execute.limits.CallLimits` (``limits``: runs one
    capability call under its timeouts, the lease keeper and the heartbeat watchdog) and
    :class:`~flowpark.engine.node.runs.RunTasks` (``runs``: the runs in flight, the run slots, the
    runs gone on in the background). The sweep is :mod:`flowpark.engine.node.sweeps`; wakes,
    signals and cancels from outside a run are :mod:`flowpark.engine.node.outside`.

    Args:
        store: the store (one implementation: ``flowpark.store.SqlStore``).
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
        observer: told what the engine does (metrics, traces: :mod:`flowpark.engine.observe`);
            default: nothing is reported.

    Attributes:
        claiming: False once :meth:`stop_claiming` was called: sweeps claim nothing more.
    """

    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        clock: Clock,
        config: EngineConfig | None = None,
        id_factory: Callable[[], str] | None = None,
        observer: Observer | None = None,
    ) -> None:
        self.observer = observer or Observer()
        self.store = store
        self.catalog = catalog
        self.clock = clock
        self.config = config or EngineConfig()
        self.lease = self.config.lease
        self.new_id = id_factory or (lambda: str(uuid7()))
        self.limits = CallLimits(clock, self.lease, self.config.node_id)
        # the budget reads the engine's observer, so replacing it later reaches the budget;
        # under a virtual clock a try never waits in process for a slot (nobody would move
        # the clock while it waits): a slot not yet due defers it
        wait = self.config.provider_wait
        if wait is None:
            wait = timedelta(0) if isinstance(clock, VirtualClock) else WAIT
        self.providers = ProviderBudget(
            store.providers,
            self.config.node_id,
            self.config.provider_limits,
            lambda: self.observer,
            wait,
        )
        self.runs = RunTasks(self, self.config.concurrency)
        self.wake_listeners: list[Callable[[str, datetime], None]] = []
        self.claiming = True
        self.not_runnable_counted_at: datetime | None = None

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
            return await run_ephemeral(self, plan, data)
        with self.observer.start_span(plan.name, plan.version):
            return await outside.start(self, plan, data, idempotency_key, instance_key)

    def prepare_start(
        self,
        plan: Plan,
        payload: Any,
        *,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
    ) -> NewInstance:
        """What a start of ``plan`` writes when someone else's transaction writes it (the
        caller's own, see :mod:`flowpark.embedding`): the instance row with the deadlines
        its start stores, its lease born expired, so that the first claim after the
        caller's commit runs it (:meth:`wake` on this node, or any node's sweep).

        Args:
            plan: the flow version to run (durable profile).
            payload: the input (validated against ``plan.input_model``).
            idempotency_key: repeats with the same key and body name the first instance.
            instance_key: a business id unique among the flow's non-ended instances.

        Returns:
            The :class:`~flowpark.engine.records.NewInstance` to insert.

        Raises:
            InputInvalid: the payload is not the flow's input (``input_invalid``).
            ValueError: ``plan`` is ephemeral (it writes no row).
        """
        if plan.profile is Profile.EPHEMERAL:
            raise ValueError(
                f"{plan.name} is ephemeral: it writes no row to start in a transaction"
            )
        model = self.validate_input(plan, payload)
        data = model.model_dump(mode="json", by_alias=True)
        return outside.new_instance(self, plan, data, idempotency_key, instance_key, leased=False)

    async def run_committed(self, new: NewInstance) -> RunOutcome | None:
        """Run an instance a caller's transaction wrote (:meth:`prepare_start`) once it
        committed: claim it and advance it until it parks or ends.

        Returns:
            The run's outcome; None when it was not claimable (another node's sweep took it
            first, or it was never committed).
        """
        return await outside.run_committed(self, new)

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
            ``failed_runs`` (logged by :func:`~flowpark.engine.node.claimed.run_claim`),
            other run errors are logged here.

        Raises:
            StoreUnavailable: a claim failed (the runs already started finish first).
        """
        return await sweeps.sweep(self, limit, again)

    def stop_claiming(self) -> None:
        """Node shutdown: sweeps claim no more instances; a sweep in progress finishes the
        runs it started and returns, so a stopping node does not keep taking new work
        during its grace period. Starts, signals and cancels still work."""
        self.claiming = False

    async def drain(self) -> None:
        """Wait until every run this engine continued in the background has parked or
        ended (their errors are logged, not raised)."""
        await self.runs.drain()

    async def close(self, grace_seconds: float = 0.0, *, release: bool = True) -> list[str]:
        """Node shutdown: the runs in flight may park or end within ``grace_seconds``; those
        still going are cancelled and their leases released, so the next sweep on any node
        continues them (a cancelled try commits nothing: it runs again from its last
        checkpoint).

        Args:
            grace_seconds: how long runs in flight may take (seconds; default 0: cancel
                them at once).
            release: give up the cancelled runs' leases (default); False leaves them to
                expire, as a node that dies does (a claim after that records a heartbeating
                try as lost, and it runs again from its checkpoint).

        Returns:
            The ids of the instances left to the next sweep.
        """
        self.claiming = False
        return await self.runs.close(grace_seconds, release=release)

    async def wake(self, instance_id: str) -> RunOutcome | None:
        """Claim one instance now (if nobody holds it) and advance it.

        Returns:
            The run's outcome; None when the instance was not claimable.
        """
        return await outside.wake(self, instance_id)

    async def wake_now(self, instance_id: str) -> RunOutcome | None:
        """An operator's wake: claim the parked instance and run the wait it is parked on
        now (a poll's next attempt, a retry's next try), then advance it until it parks or
        ends, as the sweep would have at its wake.

        Returns:
            The run's outcome; None when the instance was not claimable (not parked, or
            running under a live lease: nothing was done).

        Raises:
            InstanceNotFound: no such instance (``instance_not_found``).
            VersionNotServed: this node does not serve the instance's flow version
                (``version_not_served``): nothing was done.
        """
        return await outside.wake(self, instance_id, woken=True)

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
        return await outside.deliver(self, instance_id, name, payload, idempotency_key)

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
        return await outside.cancel(self, instance_id)
