"""``MemoryStore``: every port of :class:`flowpark.engine.ports.Store` in one process's memory.

The store of a run that writes no rows (an ephemeral flow: :mod:`flowpark.engine.node.ephemeral`)
and the twin the contract suite (``tests/contract_store``) runs beside SQLite and PostgreSQL:
the same claims, fences, commits, parks, mailbox, reads, deliveries and purge, with the same
answers and errors.
It imports no SQL driver. Every call runs without awaiting anything, so each is atomic on
its event loop as a transaction is in SQL. Nothing survives the process.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from flowpark.engine.ports.values import (
    Commit,
    NewSignal,
    Park,
    Reopen,
    StreamWrite,
    TryMark,
    WakeClaim,
)
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    Ack,
    CancelAck,
    Claim,
    Delivery,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    NewInstance,
    SignalRecord,
    Snapshot,
    StepKind,
    StreamMessage,
)
from flowpark.errors import (
    FlowFailure,
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceKeyInUse,
    JournalConflict,
)
from flowpark.store.memory_correlations import MemoryCorrelations
from flowpark.store.memory_delivery_ids import MemoryDeliveryIds
from flowpark.store.memory_node import MemoryConsoleSessions, MemoryNodes, MemorySchema
from flowpark.store.memory_outbox import MemoryDeliveries, MemoryRetention
from flowpark.store.memory_providers import MemoryProviderLimits
from flowpark.store.memory_reads import MemoryReads
from flowpark.store.memory_reviews import MemoryReviews
from flowpark.store.memory_state import (
    NO_LEASE,
    NO_TRY,
    RUNNING,
    SUSPENDED,
    MemoryBase,
    append_stream,
    copy_json,
    require_aware,
)

__all__ = ["MemoryStore"]


class MemoryStore(MemoryBase):
    """Every port of :class:`flowpark.engine.ports.Store` over one in-memory state.

    Attributes:
        runs / intake / mailbox / streams: this object (each port's methods have distinct
            names).
        reads (also operator, overview), deliveries, retention, nodes, console_sessions,
            schema: parts over the same state (:mod:`flowpark.store.memory_reads`,
            :mod:`flowpark.store.memory_outbox`, :mod:`flowpark.store.memory_node`).
        correlations: the correlation keys (:class:`MemoryCorrelations`).
        providers: the providers' shared limits (:class:`MemoryProviderLimits`).
        reviews: the review queue (:class:`~flowpark.store.memory_reviews.MemoryReviews`).
        delivery_ids: the first instance each signed delivery id reached
            (:class:`~flowpark.store.memory_delivery_ids.MemoryDeliveryIds`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.runs = self.intake = self.mailbox = self.streams = self
        self.reads = self.operator = self.overview = MemoryReads(self)
        self.deliveries = MemoryDeliveries(self)
        self.retention = MemoryRetention(self)
        self.nodes = MemoryNodes(self)
        self.console_sessions = MemoryConsoleSessions()
        self.schema = MemorySchema()
        self.correlations = MemoryCorrelations(self._s)
        self.providers = MemoryProviderLimits()
        self.reviews = MemoryReviews(self._s)
        self.delivery_ids = MemoryDeliveryIds(self._s)

    # -- RunStore ----------------------------------------------------------------------
    async def claim(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> Claim | None:
        """See :meth:`flowpark.engine.ports.RunStore.claim`."""
        require_aware(now, lease_until)
        inst = self._s.instances.get(instance_id)
        if inst is None or not self._claimable(inst, now, due_only=False):
            return None
        return self._claimed(inst, owner, now, lease_until)

    async def load(self, instance_id: str) -> Snapshot:
        """See :meth:`flowpark.engine.ports.RunStore.load`."""
        return self._snapshot(instance_id)

    def _check(self, commit: Commit) -> None:
        """Refuse, before anything is written, what the commit would conflict on."""
        keys = [(r.step_id, r.scope, r.kind, r.try_number) for r in commit.rows]
        stored = {
            (r.step_id, r.scope, r.kind, r.try_number)
            for r in self._s.steps.get(commit.instance_id, [])
        }
        ids = {e["id"] for e in self._s.events} | {r["id"] for r in self._s.reviews}
        new_ids = [e.id for e in commit.events] + [r.id for r in commit.reviews]
        if (
            len(set(keys)) != len(keys)
            or stored & set(keys)
            or ids & set(new_ids)
            or len(set(new_ids)) != len(new_ids)
        ):
            row = commit.rows[-1]
            raise JournalConflict(
                f"instance {commit.instance_id!r}: step {row.step_id} scope {row.scope} "
                f"{row.kind} try {row.try_number} conflicts with the journal",
                instance_id=commit.instance_id,
                step_id=row.step_id,
                scope=row.scope,
            )
        if commit.take_signal is not None:
            if commit.rows[-1].kind != StepKind.SIGNAL:
                raise ValueError("the row that takes a signal is of kind 'signal'")
            if self._waiting(commit.instance_id, commit.take_signal) is None:
                raise JournalConflict(
                    f"signal {commit.take_signal!r} of instance {commit.instance_id!r} is "
                    "unknown or already taken",
                    instance_id=commit.instance_id,
                    signal_id=commit.take_signal,
                )

    def _waiting(self, instance_id: str, signal_id: str) -> int | None:
        for n, s in enumerate(self._s.signals.get(instance_id, [])):
            if s.id == signal_id and s.taken_at is None:
                return n
        return None

    async def commit(self, commit: Commit) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.commit`."""
        require_aware(commit.at, commit.lease_until)
        for row in commit.rows:
            require_aware(row.started_at, row.committed_at, row.next_try_at)
        if commit.park is not None:
            require_aware(commit.park.wake_at)
        if not commit.rows and commit.park is None:
            raise ValueError("a commit writes a row, a park or both")
        inst = self._fence(commit.instance_id, commit.token)
        self._check(commit)
        self.correlations.record(commit)  # a key in use refuses the commit before any write
        if commit.rows:
            for n, row in enumerate(commit.rows):
                self._append(row, commit, n == len(commit.rows) - 1)
            if inst.try_step_id is not None:  # a heartbeating try in flight: cleared
                inst = self._put(
                    inst, **NO_TRY, lease_expires_at=commit.lease_until, updated_at=commit.at
                )
        if commit.take_signal is not None:
            row = commit.rows[-1]
            self._take(commit.instance_id, commit.take_signal, row.committed_at, row.step_id)
            inst = self._put(inst, updated_at=row.committed_at)
        if commit.park is None:
            return Ack(applied=True, cancel_requested=inst.cancel_requested)
        return self._park(inst, commit.park, commit.at)

    def _take(self, instance_id: str, signal_id: str, at: datetime, step_id: int) -> None:
        n = self._waiting(instance_id, signal_id)
        assert n is not None
        signals = self._s.signals[instance_id]
        signals[n] = replace(signals[n], taken_at=at, taken_step_id=step_id)

    def _park(self, inst: InstanceRecord, park: Park, at: datetime) -> Ack:
        if inst.cancel_requested and not park.unwinding:
            return Ack(applied=False, cancel_requested=True)
        if park.accept_signal is not None and any(
            s.name == park.accept_signal and s.taken_at is None
            for s in self._s.signals.get(inst.id, [])
        ):
            return Ack(applied=False, signal_pending=True)
        self._put(
            inst,
            state=SUSPENDED,
            wake_at=park.wake_at,
            wake_step_id=park.step_id,
            wake_scope=park.scope,
            wake_kind=park.kind,
            woken=park.woken,
            updated_at=at,
            **NO_LEASE,
            **NO_TRY,
        )
        return Ack(applied=True, cancel_requested=False)

    async def start_try(
        self, instance_id: str, token: int, mark: TryMark, lease_until: datetime
    ) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.start_try`."""
        require_aware(mark.started_at, lease_until)
        inst = self._fence(instance_id, token)
        inst = self._put(
            inst,
            **NO_TRY,
            lease_expires_at=lease_until,
            updated_at=mark.started_at,
        )
        inst = self._put(
            inst,
            try_step_id=mark.step_id,
            try_scope=mark.scope,
            try_number=mark.try_number,
            try_started_at=mark.started_at,
        )
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    async def record_heartbeat(
        self, instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
    ) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.record_heartbeat`."""
        require_aware(now, lease_until)
        inst = self._fence(instance_id, token)
        step_id, scope, try_number = inst.try_step_id, inst.try_scope, inst.try_number
        if step_id is None or scope is None or try_number is None:
            raise JournalConflict(
                f"instance {instance_id!r} has no try in flight to heartbeat",
                instance_id=instance_id,
            )
        inst = self._put(
            inst,
            heartbeat_at=now,
            heartbeat_value=copy_json(value),
            lease_expires_at=lease_until,
            updated_at=now,
        )
        self._s.heartbeats[(instance_id, step_id, scope)] = Heartbeat(
            step_id, scope, try_number, copy_json(value), now
        )
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    async def last_heartbeat(self, instance_id: str, step_id: int, scope: int) -> Heartbeat | None:
        """See :meth:`flowpark.engine.ports.RunStore.last_heartbeat`."""
        return self._s.heartbeats.get((instance_id, step_id, scope))

    async def begin_ending(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        ending: InstanceState,
        failure: FlowFailure | None,
    ) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.begin_ending`."""
        ending = InstanceState(ending)
        if ending not in (InstanceState.FAILED, InstanceState.CANCELLED):
            raise ValueError(f"an instance can only end towards failed or cancelled: {ending}")
        require_aware(now)
        inst = self._fence(instance_id, token)
        changes: dict[str, Any] = {"ending": ending, "updated_at": now}
        if failure is not None:
            changes["failure"] = failure
        inst = self._put(inst, **changes)
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    async def finish(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        state: InstanceState,
        result: Any = None,
        failure: FlowFailure | None = None,
    ) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.finish`."""
        state = InstanceState(state)
        if not state.ended:
            raise ValueError(f"finish needs a final state, got {state}")
        require_aware(now)
        inst = self._fence(instance_id, token)
        completed = state is InstanceState.COMPLETED
        if completed and inst.cancel_requested:
            return Ack(applied=False, cancel_requested=True)
        changes: dict[str, Any] = {
            "state": state,
            "updated_at": now,
            "ending": None,
            "wake_at": None,
            "wake_step_id": None,
            "wake_scope": None,
            "wake_kind": None,
            "woken": False,
            **NO_LEASE,
            **NO_TRY,
        }
        if completed:
            changes["result"] = copy_json(result)
        if failure is not None:
            changes["failure"] = failure
        inst = self._put(inst, **changes)
        self.correlations.release(instance_id)
        signals = self._s.signals.get(instance_id, [])
        for n, s in enumerate(signals):
            if s.taken_at is None and s.discarded_at is None:
                signals[n] = replace(
                    s, discarded_at=now, discarded_reason=f"instance_{state.value}"
                )
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        """See :meth:`flowpark.engine.ports.RunStore.renew_lease`."""
        require_aware(lease_until)
        inst = self._put(self._fence(instance_id, token), lease_expires_at=lease_until)
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    async def release(self, instance_id: str, token: int, now: datetime) -> None:
        """See :meth:`flowpark.engine.ports.RunStore.release`."""
        require_aware(now)
        inst = self._fence(instance_id, token)
        wake = now if inst.wake_at is None or inst.cancel_requested else inst.wake_at
        self._put(inst, state=SUSPENDED, wake_at=wake, updated_at=now, **NO_LEASE)

    # -- Intake ------------------------------------------------------------------------
    async def create_instance(self, new: NewInstance) -> tuple[InstanceRecord, bool]:
        """See :meth:`flowpark.engine.ports.Intake.create_instance`."""
        require_aware(new.created_at, new.deadline_at, new.lease_expires_at)
        same_flow = [i for i in self._s.instances.values() if i.flow_name == new.flow_name]
        holder = next(
            (
                i
                for i in same_flow
                if new.instance_key is not None
                and i.instance_key == new.instance_key
                and not i.state.ended
            ),
            None,
        )
        if new.idempotency_key is not None:
            first = next(
                (i for i in same_flow if self._s.idempotency.get(i.id) == new.idempotency_key),
                None,
            )
            if first is not None:
                if not new.repeats(first.input, first.instance_key):
                    raise IdempotencyKeyReused(
                        f"idempotency key {new.idempotency_key!r} of flow {new.flow_name!r} "
                        "was used with a different request",
                        flow=new.flow_name,
                        idempotency_key=new.idempotency_key,
                        instance_id=first.id,
                    )
                return first, False
        if holder is not None:
            raise InstanceKeyInUse(
                f"instance key {new.instance_key!r} of flow {new.flow_name!r} is held by "
                f"instance {holder.id!r}",
                flow=new.flow_name,
                instance_key=new.instance_key,
                instance_id=holder.id,
            )
        if new.id in self._s.instances:
            raise JournalConflict(
                f"cannot start instance {new.id!r}: its id exists", instance_id=new.id
            )
        record = InstanceRecord(
            id=new.id,
            flow_name=new.flow_name,
            flow_version=new.flow_version,
            state=RUNNING,
            input=copy_json(new.input),
            created_at=new.created_at,
            updated_at=new.created_at,
            deadline_at=new.deadline_at,
            lease_owner=new.lease_owner,
            lease_expires_at=new.lease_expires_at,
            fencing_token=1,
            instance_key=new.instance_key,
            trace_context=dict(new.trace_context) if new.trace_context else None,
        )
        self._s.instances[new.id] = record
        self._s.steps[new.id] = [
            replace(row, values=copy_json(row.values), sequence=next(self._s.sequence))
            for row in new.steps
        ]
        if new.idempotency_key is not None:
            self._s.idempotency[new.id] = new.idempotency_key
        return record, True

    def _due(self, now: datetime, runnable: list[tuple[str, str]]) -> list[InstanceRecord]:
        wanted = set(runnable)
        return [
            i
            for i in self._s.instances.values()
            if (i.flow_name, i.flow_version) in wanted and self._claimable(i, now, due_only=True)
        ]

    async def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        runnable: list[tuple[str, str]],
    ) -> list[Claim]:
        """See :meth:`flowpark.engine.ports.Intake.claim_due`."""
        require_aware(now, lease_until)
        if not runnable or limit <= 0:
            return []

        def order(i: InstanceRecord) -> tuple[int, datetime, str]:
            if i.state is RUNNING:
                assert i.lease_expires_at is not None
                return (0, i.lease_expires_at, i.id)
            assert i.wake_at is not None
            return (1, i.wake_at, i.id)

        picked = sorted(self._due(now, runnable), key=order)[:limit]
        claims = []
        for inst in picked:
            taken_over = inst.state is RUNNING
            claim = self._claimed(inst, owner, now, lease_until)
            claims.append(replace(claim, taken_over=taken_over))
        return claims

    async def count_not_runnable(self, now: datetime, runnable: list[tuple[str, str]]) -> int:
        """See :meth:`flowpark.engine.ports.Intake.count_not_runnable`."""
        wanted = set(runnable)
        return sum(
            1
            for i in self._s.instances.values()
            if self._claimable(i, now, due_only=True)
            and (i.flow_name, i.flow_version) not in wanted
        )

    async def request_cancel(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> CancelAck:
        """See :meth:`flowpark.engine.ports.Intake.request_cancel`."""
        require_aware(now, lease_until)
        inst = self._get(instance_id)
        if inst.state.ended:
            raise InstanceEnded(
                f"instance {instance_id!r} has ended ({inst.state.value})",
                instance_id=instance_id,
                state=inst.state.value,
            )
        if self._claimable(inst, now, due_only=False):
            inst = self._put(inst, cancel_requested=True)
            return CancelAck(RUNNING, self._claimed(inst, owner, now, lease_until))
        inst = self._put(inst, cancel_requested=True, updated_at=now)
        return CancelAck(inst.state)

    async def reopen(self, reopen: Reopen) -> Claim | None:
        """See :meth:`flowpark.engine.ports.Intake.reopen`."""
        require_aware(reopen.now, reopen.lease_until)
        inst = self._get(reopen.instance_id)
        details = inst.failure.details if inst.failure is not None else {}
        ended = inst.state in (InstanceState.FAILED, InstanceState.CANCELLED)
        if not ended or not details.get(COMPENSATION_FAILURES):
            return None
        if inst.instance_key is not None and any(
            i.id != inst.id
            and i.flow_name == inst.flow_name
            and i.instance_key == inst.instance_key
            and not i.state.ended
            for i in self._s.instances.values()
        ):
            raise InstanceKeyInUse(
                f"instance key {inst.instance_key!r} of flow {inst.flow_name!r} is held",
                flow=inst.flow_name,
                instance_key=inst.instance_key,
            )
        before = list(self._s.steps.get(inst.id, []))
        try:
            for row in reopen.rows:
                self._append(row, Commit(inst.id, 0, reopen.now, reopen.lease_until), False)
        except JournalConflict:
            self._s.steps[inst.id] = before
            raise
        self._put(inst, ending=inst.state)
        return self._claimed(self._get(inst.id), reopen.owner, reopen.now, reopen.lease_until)

    # -- Mailbox -------------------------------------------------------------------------
    async def deliver_signal(self, signal: NewSignal) -> tuple[SignalRecord, bool]:
        """See :meth:`flowpark.engine.ports.Mailbox.deliver_signal`."""
        delivery = self._deliver(signal, None)
        return delivery.signal, delivery.created

    async def deliver_and_claim(self, signal: NewSignal, claim: WakeClaim) -> Delivery:
        """See :meth:`flowpark.engine.ports.Mailbox.deliver_and_claim`."""
        return self._deliver(signal, claim)

    def _deliver(self, signal: NewSignal, claim: WakeClaim | None) -> Delivery:
        require_aware(signal.received_at)
        inst = self._get(signal.instance_id)
        mailbox = self._s.signals.setdefault(signal.instance_id, [])
        if signal.idempotency_key is not None:
            for s in mailbox:
                if s.idempotency_key == signal.idempotency_key:
                    return Delivery(s, False, inst.state)
        if inst.state.ended:
            raise InstanceEnded(
                f"instance {inst.id!r} has ended ({inst.state.value})",
                instance_id=inst.id,
                state=inst.state.value,
            )
        if any(s.id == signal.signal_id for m in self._s.signals.values() for s in m):
            raise JournalConflict(
                f"signal {signal.signal_id!r} exists already", signal_id=signal.signal_id
            )
        record = SignalRecord(
            id=signal.signal_id,
            sequence=next(self._s.sequence),
            instance_id=signal.instance_id,
            name=signal.name,
            payload=copy_json(dict(signal.payload)),
            received_at=signal.received_at,
            idempotency_key=signal.idempotency_key,
        )
        mailbox.append(record)
        state = inst.state
        if claim is None or state is not SUSPENDED or inst.wake_step_id not in claim.wake_steps:
            return Delivery(record, True, state)
        claimed = self._claimed(inst, claim.owner, signal.received_at, claim.lease_until)
        # the claim brings the journal, as the SQL stores' one statement does: the run loads nothing
        return Delivery(record, True, state, replace(claimed, snapshot=self._snapshot(inst.id)))

    async def get_signal(self, instance_id: str, signal_id: str) -> SignalRecord | None:
        """See :meth:`flowpark.engine.ports.Mailbox.get_signal`."""
        return next((s for s in self._s.signals.get(instance_id, []) if s.id == signal_id), None)

    async def pending_signals(self, instance_id: str) -> list[SignalRecord]:
        """See :meth:`flowpark.engine.ports.Mailbox.pending_signals`."""
        return [s for s in self._s.signals.get(instance_id, []) if s.taken_at is None]

    async def refuse_signal(
        self, instance_id: str, token: int, signal_id: str, step_id: int, at: datetime
    ) -> Ack:
        """See :meth:`flowpark.engine.ports.Mailbox.refuse_signal`."""
        require_aware(at)
        inst = self._fence(instance_id, token)
        n = self._waiting(instance_id, signal_id)
        if n is None:
            raise JournalConflict(
                f"signal {signal_id!r} of instance {instance_id!r} is unknown or already taken",
                instance_id=instance_id,
                signal_id=signal_id,
            )
        signals = self._s.signals[instance_id]
        signals[n] = replace(signals[n], taken_at=at, taken_step_id=step_id, matched=False)
        inst = self._put(inst, updated_at=at)
        return Ack(applied=True, cancel_requested=inst.cancel_requested)

    # -- Streams ------------------------------------------------------------------------
    async def write_stream(
        self, message: StreamWrite, max_bytes: int, *, token: int | None = None
    ) -> bool:
        """See :meth:`flowpark.engine.ports.Streams.write_stream`."""
        inst = self._get(message.instance_id)
        if token is not None:
            self._fence(inst.id, token)
        return append_stream(self._s, message, max_bytes)

    async def read_stream(
        self, instance_id: str, stream: str, after: int | None = None
    ) -> list[StreamMessage]:
        """See :meth:`flowpark.engine.ports.Streams.read_stream`."""
        stored = self._s.streams.get((instance_id, stream), [])
        return [m for m in stored if after is None or m.sequence > after]

    def scratch(self) -> MemoryStore:
        """A new, empty store (see :meth:`flowpark.engine.ports.Store.scratch`)."""
        return MemoryStore()
