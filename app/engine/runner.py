"""The engine: advances one leased instance from its journal frontier until it parks or ends.

Each run re-walks the plan from node 0 over the committed rows (the frontier scan): a node
with a committed row is not executed again, its values go back into the bag and completed
compensable steps go on the stack. The first node without a row is the frontier, where the
engine executes, takes a signal, parks or ends. So resume, restart on another node and the
rebuilt compensation stack all come from the same rows.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from app.engine.clock import Clock
from app.engine.context import BagView, ExecutionContext, revive
from app.engine.deadlines import deadline_row
from app.engine.journal import (
    Ack,
    Claim,
    InstanceRecord,
    InstanceState,
    SignalRecord,
    StepKind,
    StepRow,
    WakeKind,
)
from app.engine.roles import Journal
from app.engine.run_mailbox import RunMailbox
from app.engine.stops import DECISION_KEY, CancelRequested, Halt, Interrupt, Park, cancelled
from app.errors import FlowFailure, StreamNotDeclared
from app.flows.capability import RecoveryError, Stream
from app.flows.plan import Plan, StepNode

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.engine.engine import EngineConfig
    from app.engine.limits import CallLimits
    from app.engine.observe import Observer

__all__ = ["Run", "RunHost"]


class RunHost(Protocol):
    """What a run uses of its engine (:class:`app.engine.engine.Engine`, or the in-memory
    stand-in of an ephemeral run)."""

    @property
    def journal(self) -> Journal:
        """Where the run's rows go."""

    @property
    def clock(self) -> Clock:
        """The engine clock (aware UTC instants)."""

    @property
    def config(self) -> EngineConfig:
        """The node's settings (``node_id`` owns a park's lease)."""

    @property
    def lease(self) -> timedelta:
        """How long a claim or a write's lease lasts."""

    @property
    def new_id(self) -> Callable[[], str]:
        """Makes a fresh id (signals, review items)."""

    @property
    def limits(self) -> CallLimits:
        """Runs one capability call under its timeouts, lease keeper and heartbeat watch."""

    @property
    def observer(self) -> Observer:
        """Hears starts, ends, tries and polls (metrics, traces)."""


class Run:
    """One advance of one instance under one claim (internal to the engine)."""

    def __init__(
        self,
        engine: RunHost,
        plan: Plan,
        instance: InstanceRecord,
        claim: Claim,
        steps: list[StepRow],
        signals: list[SignalRecord],
    ) -> None:
        self.engine = engine
        self.journal: Journal = engine.journal
        self.clock: Clock = engine.clock
        self.plan = plan
        self.instance = instance
        self.instance_id = instance.id
        self.token = claim.fencing_token
        self.input = revive(plan.input_model, instance.input)
        self.bag: dict[str, Any] = {}
        self.rows: dict[tuple[int, int, StepKind], list[StepRow]] = {}
        for row in steps:
            self.rows.setdefault((row.step_id, row.scope, row.kind), []).append(row)
        for found in self.rows.values():
            found.sort(key=lambda r: r.try_number)
        self.touched_steps = {row.step_id for row in steps}
        self.mailbox = RunMailbox(self, signals)
        self.compensations: list[tuple[StepNode, int]] = []
        # the parked wake this claim found; consumed by the first action of this run
        self.pending_wake = (
            (instance.wake_step_id, instance.wake_scope, instance.wake_at)
            if instance.wake_step_id is not None
            else None
        )
        self.tries = 0
        # an operator's wake: the wait this claim found runs its next try or attempt now
        self.woken = claim.woken
        self.cancel_requested = instance.cancel_requested
        self.recovery: RecoveryError | None = None
        self.heartbeat_written: tuple[Any, datetime] | None = None
        self.ephemeral = False
        # resolved when a heartbeating try starts: whoever awaits the run may stop waiting
        self.detach: asyncio.Future[None] | None = None
        # the lease expiry this node last wrote: its claim's, then each keeper renewal's
        self.lease_expires_at: datetime | None = instance.lease_expires_at
        # a journal row executed but not yet written: the next write carries it (see flush)
        self.unflushed: StepRow | None = None

    # -- helpers ---------------------------------------------------------------------
    def now(self) -> datetime:
        """The engine clock's instant (aware UTC)."""
        return self.clock.now()

    def view(self) -> BagView:
        """The state bag rebuilt from the journal rows this run knows."""
        return BagView(self.instance_id, self.input, self.bag)

    def lease_until(self, seconds: timedelta | None = None) -> datetime:
        """The lease end for a write now: ``seconds`` (default the engine's lease) from now."""
        return self.now() + (seconds or self.engine.lease)

    def found(self, step_id: int, scope: int, kind: StepKind = StepKind.STEP) -> list[StepRow]:
        """The journal rows of ``(step_id, scope)`` of ``kind``, in commit order."""
        return self.rows.get((step_id, scope, kind), [])

    def deadline(self, step_id: int, scope: int) -> StepRow | None:
        """The deadline row in force at (step_id, scope) (the latest extension), or None."""
        rows = self.found(step_id, scope, StepKind.DEADLINE)
        return rows[-1] if rows else None

    async def fix_deadline(
        self, step_id: int, scope: int, name: str, span: timedelta, *, carry: bool = False
    ) -> StepRow:
        """The deadline at (step_id, scope): the stored one, or ``now + span`` written now.

        A new deadline row is durable when this returns (written with the row the run
        deferred, if any), so the call it bounds starts after it. With ``carry`` and no
        deferred row, the row is kept as :attr:`unflushed` instead: the caller's next write
        (a park) carries it, before the wait it bounds begins.
        """
        stored = self.deadline(step_id, scope)
        if stored is not None:
            return stored
        now = self.now()
        row = deadline_row(self.instance_id, step_id, scope, name, now, now + span)
        if carry and self.unflushed is None and not self.ephemeral:
            self.unflushed = row
        else:
            deferred, self.unflushed = self.unflushed, None
            ack = await self.journal.writes.commit_step(
                self.token, row, self.lease_until(), deferred=deferred
            )
            self.after_ack(ack)
        # not :meth:`record`: a deadline is no action, the parked wake stays this claim's
        self.rows.setdefault((step_id, scope, StepKind.DEADLINE), []).append(row)
        return row

    def apply(self, row: StepRow) -> None:
        """Put a successful row's values into the state bag."""
        for key, value in row.values.items():
            if key != DECISION_KEY:
                self.bag[key] = value

    def record(self, row: StepRow) -> None:
        """Remember a committed row (the run's view of its journal)."""
        self.rows.setdefault((row.step_id, row.scope, row.kind), []).append(row)
        self.touched_steps.add(row.step_id)
        self.pending_wake = None

    def wake_for(self, step_id: int, scope: int) -> tuple[bool, datetime | None]:
        """Whether this claim found the instance parked at (step_id, scope), and its wake."""
        if self.pending_wake and self.pending_wake[:2] == (step_id, scope):
            return True, self.pending_wake[2]
        return False, None

    def check_interrupts(self) -> None:
        """At the frontier: a requested cancel or a passed deadline stops the walk."""
        if self.instance.ending is not None:
            raise Interrupt(self.instance.ending, self.instance.failure)
        if self.cancel_requested:
            raise cancelled()
        deadline = self.instance.deadline_at
        if deadline is not None and self.now() >= deadline:
            raise Interrupt(
                InstanceState.FAILED,
                FlowFailure(
                    "flow.deadline_exceeded",
                    f"flow {self.plan.name} passed its deadline {deadline.isoformat()}",
                    {"deadline_at": deadline.isoformat()},
                ),
            )

    def after_ack(self, ack: Ack) -> None:
        """Take note of what a write answered (a cancel requested meanwhile)."""
        if ack.cancel_requested:
            self.cancel_requested = True

    async def park(
        self,
        wake_at: datetime | None,
        step_id: int,
        scope: int,
        accept_signal: str | None = None,
        *,
        kind: WakeKind,
        unwinding: bool = False,
    ) -> None:
        """Suspend at (step_id, scope) until ``wake_at`` (capped by the deadline), waiting
        for ``kind`` (``deadline`` when the deadline comes first). ``unwinding``: a
        compensation's next try: no deadline cap (the instance is ending already), and
        applied even when a cancel was requested.

        Raises Park when parked; returns when the park was refused for a waiting signal
        (or, in an ephemeral run, after sleeping until ``wake_at`` in-process).
        """
        if self.ephemeral:
            await self.flush()
            if wake_at is not None:
                await self.clock.sleep(wake_at - self.now())
            self.pending_wake = None
            return
        deadline = self.instance.deadline_at
        if not unwinding and deadline is not None and (wake_at is None or deadline < wake_at):
            wake_at = deadline
            kind = WakeKind.DEADLINE
        ack = await self._write_park(wake_at, step_id, scope, accept_signal, kind, unwinding)
        if ack.applied:
            self.settle(
                state=InstanceState.SUSPENDED,
                wake_at=wake_at,
                wake_step_id=step_id,
                wake_scope=scope,
                wake_kind=kind,
                lease_owner=None,
                lease_expires_at=None,
            )
            raise Park(Halt(InstanceState.SUSPENDED, wake_at))
        if ack.cancel_requested:
            self.cancel_requested = True
            self.check_interrupts()
        if ack.signal_pending:
            snapshot = await self.journal.writes.load(self.instance_id)
            self.mailbox.signals = list(snapshot.signals)
            return
        raise RuntimeError("park was refused for no stated reason")  # pragma: no cover

    async def _write_park(
        self,
        wake_at: datetime | None,
        step_id: int,
        scope: int,
        accept_signal: str | None,
        kind: WakeKind,
        unwinding: bool,
    ) -> Ack:
        """The park's write: with the deferred row, if any, in the same statement."""
        row, self.unflushed = self.unflushed, None
        if row is not None:  # the deferred row and the park: one write
            return await self.journal.writes.commit_and_park(
                self.token,
                row,
                self.lease_until(),
                owner=self.engine.config.node_id,
                wake_at=wake_at,
                wake_step_id=step_id,
                wake_scope=scope,
                accept_signal=accept_signal,
                wake_kind=kind,
            )
        return await self.journal.writes.park(
            self.instance_id,
            self.token,
            self.now(),
            wake_at,
            step_id,
            scope,
            accept_signal,
            wake_kind=kind,
            unwinding=unwinding,
        )

    async def flush(self) -> None:
        """Commit the journal row a try deferred (:class:`app.engine.tries.StepTry`), if any.

        Every other write of the run calls this first (or carries the row itself: a park,
        an emit's commit), so a row is durable before anything that follows it."""
        row, self.unflushed = self.unflushed, None
        if row is not None:
            ack = await self.journal.writes.commit_step(self.token, row, self.lease_until())
            self.after_ack(ack)

    def settle(self, **changes: Any) -> None:
        """Keep :attr:`instance` as the run last wrote it (a start answers with it)."""
        self.instance = replace(
            self.instance,
            updated_at=self.now(),
            try_step_id=None,
            try_scope=None,
            try_number=None,
            try_started_at=None,
            heartbeat_at=None,
            heartbeat_value=None,
            **changes,
        )

    # -- capabilities ----------------------------------------------------------------
    async def heartbeat(self, ctx: ExecutionContext, value: Any) -> None:
        """Record a heartbeat of the try ``ctx`` runs: the checkpoint ``value`` and a lease
        renewed by the heartbeat timeout, in one write; an unchanged value at most once per
        third of the timeout. A try with no heartbeat timeout (or a compensation) records
        it in memory only.

        Raises:
            CancelRequested: the write learned that a cancel was requested; the try stops
                and the instance unwinds (nothing of the try is committed).
            StaleFencingToken: another node took the instance over.
        """
        cap_timeout = ctx.heartbeat_timeout
        now = self.now()
        ctx.last_heartbeat_at = now
        if cap_timeout is None:
            return
        if self.heartbeat_written is not None:
            last_value, written_at = self.heartbeat_written
            if last_value == value and now - written_at < cap_timeout / 3:
                return
        ack = await self.journal.writes.record_heartbeat(
            self.instance_id, self.token, value, now, now + cap_timeout
        )
        self.heartbeat_written = (value, now)
        self.after_ack(ack)
        if self.cancel_requested:
            raise CancelRequested(self.instance_id)

    async def write_stream(self, stream: Stream, value: BaseModel) -> bool:
        """Append ``value`` to ``stream`` under this run's fencing token (a try whose
        lease was taken over writes nothing). Returns False when dropped at the bound.

        Raises:
            StreamNotDeclared: the flow does not declare ``stream`` (``Flow(streams=...)``;
                code ``stream_not_declared``).
            StaleFencingToken: another node holds the instance now.
        """
        declared = self.plan.streams.get(stream.name)
        if declared is None:
            raise StreamNotDeclared(
                f"flow {self.plan.name}@{self.plan.version} declares no stream "
                f"{stream.name!r} (Flow(streams=...))",
                flow=self.plan.name,
                stream=stream.name,
            )
        payload = value.model_dump(mode="json", by_alias=True)
        size = len(json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode())
        if self.ephemeral:
            return False
        return await self.journal.streams.write_stream(
            self.instance_id,
            stream.name,
            payload,
            size,
            declared.max_bytes,
            self.now(),
            token=self.token,
        )

    def decided(self, row: StepRow) -> None:
        """Act on a Fail/Complete decision a capability returned (recorded in its row)."""
        decision = row.values.get(DECISION_KEY)
        if not decision:
            return
        if "fail" in decision:
            f = decision["fail"]
            raise Interrupt(
                InstanceState.FAILED, FlowFailure(f["code"], f["message"], f.get("details") or {})
            )
        raise Interrupt(InstanceState.COMPLETED, result=decision["complete"])
