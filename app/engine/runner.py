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
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from app.engine.clock import Clock
from app.engine.context import BagView, ExecutionContext, revive
from app.engine.deadlines import RETRY_TOTAL, deadline_row, ends_at
from app.engine.journal import (
    Ack,
    Claim,
    InstanceRecord,
    InstanceState,
    Outcome,
    SignalRecord,
    StepKind,
    StepRow,
    WakeKind,
)
from app.engine.observe import LOG_CONTEXT
from app.engine.roles import Journal
from app.errors import FlowFailure, StaleFencingToken, StreamNotDeclared
from app.flows.capability import Capability, Complete, Fail, RecoveryError, Stream, bag_key
from app.flows.plan import (
    Plan,
    StepNode,
)

__all__ = ["DECISION_KEY", "Halt", "Run", "RunOutcome"]

log = logging.getLogger("flowpark.engine")

DECISION_KEY = "$decision"


@dataclass(frozen=True)
class Halt:
    """Why a run stopped: the state it left the instance in."""

    state: InstanceState
    wake_at: datetime | None = None


@dataclass(frozen=True)
class RunOutcome:
    """The result of advancing one instance."""

    instance_id: str
    state: InstanceState
    wake_at: datetime | None = None
    attempts_made: int = 0
    runnable: bool = True
    instance: InstanceRecord | None = None  # as the run left it (state == ``state``)
    # the signals this run took, as it marked them (``taken_at``, ``taken_step_id``)
    signals_taken: tuple[SignalRecord, ...] = ()


class _Interrupt(Exception):
    """Internal: the walk must stop and unwind (fail/cancel) or complete early."""

    def __init__(
        self, ending: InstanceState, failure: FlowFailure | None = None, result: Any = None
    ) -> None:
        super().__init__(ending)
        self.ending = ending
        self.failure = failure
        self.result = result


class _Park(Exception):
    def __init__(self, halt: Halt) -> None:
        super().__init__(halt.state)
        self.halt = halt


class Run:
    """One advance of one instance under one claim (internal to the engine)."""

    def __init__(
        self,
        engine: Any,
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
        self.signals = list(signals)
        self.taken: list[SignalRecord] = []  # signals this run took, as it marked them
        self.compensations: list[tuple[StepNode, int]] = []
        # the parked wake this claim found; consumed by the first action of this run
        self.pending_wake = (
            (instance.wake_step_id, instance.wake_scope, instance.wake_at)
            if instance.wake_step_id is not None
            else None
        )
        self.attempts = 0
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
            raise _Interrupt(self.instance.ending, self.instance.failure)
        if self.cancel_requested:
            raise _Interrupt(
                InstanceState.CANCELLED, FlowFailure("flow.cancelled", "the instance was cancelled")
            )
        deadline = self.instance.deadline_at
        if deadline is not None and self.now() >= deadline:
            raise _Interrupt(
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

        Raises _Park when parked; returns when the park was refused for a waiting signal
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
        row, self.unflushed = self.unflushed, None
        if row is not None:  # the attempt's row and the park: one write
            ack = await self.journal.writes.commit_and_park(
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
        else:
            ack = await self.journal.writes.park(
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
            raise _Park(Halt(InstanceState.SUSPENDED, wake_at))
        if ack.cancel_requested:
            self.cancel_requested = True
            self.check_interrupts()
        if ack.signal_pending:
            snapshot = await self.journal.writes.load(self.instance_id)
            self.signals = list(snapshot.signals)
            return
        raise RuntimeError("park was refused for no stated reason")  # pragma: no cover

    async def flush(self) -> None:
        """Commit the journal row :meth:`execute` deferred, if any. Every other write of
        the run calls this first (or carries the row itself: a park, an emit's commit), so
        a row is durable before anything that follows it."""
        row, self.unflushed = self.unflushed, None
        if row is not None:
            ack = await self.journal.writes.commit_step(self.token, row, self.lease_until())
            self.after_ack(ack)

    def settle(self, **changes: Any) -> None:
        """Keep :attr:`instance` as the run last wrote it (a start answers with it)."""
        self.instance = replace(
            self.instance,
            updated_at=self.now(),
            attempt_step_id=None,
            attempt_scope=None,
            attempt_try=None,
            attempt_started_at=None,
            heartbeat_at=None,
            heartbeat_value=None,
            **changes,
        )

    async def refresh_mailbox(self) -> None:
        """Re-read untaken signals when this run has worked since it loaded them (a signal
        may have arrived meanwhile); a fresh claim's snapshot is current already."""
        if self.attempts or self.pending_wake is None:
            self.signals = await self.journal.mailbox.pending_signals(self.instance_id)

    def pending_signal(self, name: str) -> SignalRecord | None:
        """The oldest untaken signal named ``name`` in the mailbox, or None."""
        for signal in self.signals:
            if signal.name == name and signal.taken_at is None:
                return signal
        return None

    async def matching_signal(
        self,
        node_index: int,
        name: str,
        model: type[BaseModel],
        match: Callable[[Any, Any], bool] | None,
    ) -> SignalRecord | None:
        """The first waiting signal ``name`` that belongs to the wait at ``node_index``
        (its ``match`` holds over the bag and the payload; every one without a match).
        Each earlier signal of that name the match refuses is marked refused (``matched``
        false, out of the mailbox), so it neither ends this wait nor wakes it again. A
        match that raises refuses (logged)."""
        while (signal := self.pending_signal(name)) is not None:
            if match is None or self._matches(signal, model, match):
                return signal
            await self.flush()
            now = self.now()
            ack = await self.journal.mailbox.refuse_signal(
                self.instance_id, self.token, signal.id, node_index, now
            )
            self.signals = [s for s in self.signals if s.id != signal.id]
            self.taken.append(
                replace(signal, taken_at=now, taken_step_id=node_index, matched=False)
            )
            self.after_ack(ack)
            log.info(
                "instance %s: signal %s (%s) does not match the wait at node %d: kept, refused",
                self.instance_id,
                signal.id,
                name,
                node_index,
            )
        return None

    def _matches(
        self, signal: SignalRecord, model: type[BaseModel], match: Callable[[Any, Any], bool]
    ) -> bool:
        try:
            return bool(match(self.view(), revive(model, signal.payload)))
        except Exception as exc:  # noqa: BLE001 - user code: a match that raises refuses
            log.warning(
                "instance %s: the match of signal %s raised %s: %s (refused)",
                self.instance_id,
                signal.name,
                type(exc).__name__,
                exc,
            )
            return False

    async def take_signal(
        self, node_index: int, scope: int, signal: SignalRecord, model: type[BaseModel]
    ) -> None:
        """Take ``signal`` at node ``node_index``: mark it taken and journal it in one write."""
        await self.flush()
        now = self.now()
        payload = revive(model, signal.payload).model_dump(mode="json", by_alias=True)
        row = StepRow(
            self.instance_id,
            node_index,
            scope,
            StepKind.SIGNAL,
            signal.name,
            Outcome.SUCCESS,
            now,
            now,
            values={bag_key(model): payload},
        )
        ack = await self.journal.mailbox.take_signal(self.token, signal.id, row)
        self.engine.observer.signal_taken(
            self.plan.name, (now - signal.received_at).total_seconds()
        )
        self.signals = [s for s in self.signals if s.id != signal.id]
        self.taken.append(replace(signal, taken_at=now, taken_step_id=node_index))
        self.record(row)
        self.apply(row)
        self.after_ack(ack)

    # -- capabilities ----------------------------------------------------------------
    async def heartbeat(self, ctx: ExecutionContext, value: Any) -> None:
        """Record a heartbeat of the try ``ctx`` runs: the checkpoint ``value`` and a lease
        renewed by the heartbeat timeout, in one write; an unchanged value at most once per
        third of the timeout. A try with no heartbeat timeout (or a compensation) records
        it in memory only.

        Raises:
            _CancelRequested: the write learned that a cancel was requested; the try stops
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
            raise _CancelRequested(self.instance_id)

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

    async def execute(
        self,
        node: StepNode,
        scope: int,
        capability: Capability,
        kind: StepKind = StepKind.STEP,
        *,
        defer: bool = False,
    ) -> StepRow:
        """Run the next try of ``capability`` at (node, scope) and commit its row.

        With ``defer`` the row is kept as :attr:`unflushed` instead: the run's next write
        carries it (a park writes it in the same statement), before anything else happens.

        Returns the row (success, or failure with ``final``/``next_try_at``).
        """
        previous = self.found(node.index, scope, kind)
        try_number = len(previous) + 1
        opts = capability.options
        hb_timeout = opts.heartbeat_timeout
        first_start = self._retry_start(node, scope, kind, previous)
        total = opts.retry.total_duration if opts.retry is not None else None
        if first_start is None and total is not None and kind is StepKind.STEP:
            # the retry window is an instant, stored before the first try starts
            window = await self.fix_deadline(node.index, scope, RETRY_TOTAL, total)
            first_start = ends_at(window) - total
        await self.flush()
        if previous and total is not None and first_start is not None and kind is StepKind.STEP:
            window_end = first_start + total
            if self.now() >= window_end:  # woken late, past the window: no try starts
                return await self._window_ended(node, scope, capability, try_number, window_end)
        checkpoint = None
        if hb_timeout is not None and kind is StepKind.STEP:
            beat = await self.journal.writes.last_heartbeat(self.instance_id, node.index, scope)
            checkpoint = beat.value if beat is not None else None
            ack = await self.journal.writes.start_attempt(
                self.instance_id,
                self.token,
                node.index,
                scope,
                try_number,
                self.now(),
                self.now() + hb_timeout,
            )
            self.after_ack(ack)
            if self.detach is not None and not self.detach.done():
                self.detach.set_result(None)  # an in-process wait: the caller need not wait
        started = self.now()
        ctx = ExecutionContext(
            self,
            step_id=node.index,
            scope=scope,
            attempt=try_number,
            recovery_error=self.recovery,
            checkpoint=checkpoint,
            heartbeat_timeout=hb_timeout if kind is StepKind.STEP else None,
            kind=kind,
        )
        self.heartbeat_written = None
        self.attempts += 1
        error_type: str | None = None
        detail = ""
        decision: Fail | Complete | None = None
        observer = self.engine.observer
        LOG_CONTEXT.set(
            {
                "instance_id": self.instance_id,
                "flow": self.plan.name,
                "step": node.index,
                "scope": scope,
            }
        )
        try:
            with observer.call_span(
                self.instance_id, self.plan.name, capability.id, node.index, scope, try_number
            ):
                decision = await self.engine.limits.call(capability, ctx, opts, self)
        except (asyncio.CancelledError, StaleFencingToken):
            raise  # cancelled, or the lease was lost: this try commits nothing
        except _CapabilityTimeout as exc:
            error_type, detail = exc.kind, str(exc)
        except _CancelRequested:  # learned from a heartbeat: stop the try and unwind
            raise _Interrupt(
                InstanceState.CANCELLED, FlowFailure("flow.cancelled", "the instance was cancelled")
            ) from None
        except Exception as exc:  # noqa: BLE001 - any exception is a failed try
            error_type, detail = type(exc).__name__, str(exc) or repr(exc)
        now = self.now()
        observer.tried(
            capability.id,
            "success" if error_type is None else "failure",
            (now - started).total_seconds(),
        )
        if error_type is None:
            values = dict(ctx.puts)
            if isinstance(decision, Fail):
                values[DECISION_KEY] = {
                    "fail": {
                        "code": decision.code,
                        "message": decision.message,
                        "details": decision.details,
                    }
                }
            elif isinstance(decision, Complete):
                values[DECISION_KEY] = {"complete": _jsonable(decision.result)}
            row = StepRow(
                self.instance_id,
                node.index,
                scope,
                kind,
                capability.id,
                Outcome.SUCCESS,
                started,
                now,
                try_number=try_number,
                values=values,
            )
        else:
            policy = opts.retry  # a compensation's tries too (waits between are parks)
            next_try_at = None
            if policy is not None:
                delay = policy.delay_after(try_number)
                elapsed = (now + delay) - (first_start or started)
                if policy.allows_another(try_number, error_type, elapsed):
                    next_try_at = now + delay
            row = StepRow(
                self.instance_id,
                node.index,
                scope,
                kind,
                capability.id,
                Outcome.FAILURE,
                started,
                now,
                try_number=try_number,
                error_type=error_type,
                error_detail=detail[:2000],
                final=next_try_at is None,
                next_try_at=next_try_at,
            )
            log.info(
                "instance %s: %s try %d failed: %s: %s",
                self.instance_id,
                capability.id,
                try_number,
                error_type,
                detail,
            )
        if defer and not ctx.reviews:
            self.unflushed = row
            self.record(row)
            return row
        ack = await self.journal.writes.commit_step(
            self.token, row, self.lease_until(), reviews=ctx.reviews or None
        )
        self.record(row)
        self.after_ack(ack)
        return row

    async def _window_ended(
        self,
        node: StepNode,
        scope: int,
        capability: Capability,
        try_number: int,
        window_end: datetime,
    ) -> StepRow:
        """Record the final failure of (node, scope) without a call: its retry window ended
        before the next try could start (a wake later than the window's end)."""
        now = self.now()
        row = StepRow(
            self.instance_id,
            node.index,
            scope,
            StepKind.STEP,
            capability.id,
            Outcome.FAILURE,
            now,
            now,
            try_number=try_number,
            error_type="retry_window_ended",
            error_detail=f"the retry window ended at {window_end.isoformat()}; no try started",
            final=True,
        )
        ack = await self.journal.writes.commit_step(self.token, row, self.lease_until())
        self.record(row)
        self.after_ack(ack)
        return row

    def _retry_start(
        self, node: StepNode, scope: int, kind: StepKind, previous: list[StepRow]
    ) -> datetime | None:
        """When the tries of (node, scope) began, for the retry policy's ``total_duration``:
        the stored retry window's start, else (a journal written before windows were
        stored) the first try's row."""
        retry = node.capability.options.retry
        if kind is StepKind.STEP and retry is not None and retry.total_duration is not None:
            window = self.deadline(node.index, scope)
            if window is not None:  # its end, extended or not, less the policy's span
                return ends_at(window) - retry.total_duration
        return previous[0].started_at if previous else None

    def decided(self, row: StepRow) -> None:
        """Act on a Fail/Complete decision a capability returned (recorded in its row)."""
        decision = row.values.get(DECISION_KEY)
        if not decision:
            return
        if "fail" in decision:
            f = decision["fail"]
            raise _Interrupt(
                InstanceState.FAILED, FlowFailure(f["code"], f["message"], f.get("details") or {})
            )
        raise _Interrupt(InstanceState.COMPLETED, result=decision["complete"])

    def lost_attempt(self, node: StepNode, scope: int) -> bool:
        """True when this claim found a heartbeating try at (node, scope) in flight whose
        holder is gone (its lease expired): it is recorded as failed."""
        inst = self.instance
        tries = len(self.found(node.index, scope))
        return (
            inst.attempt_step_id == node.index
            and inst.attempt_scope == scope
            and inst.attempt_try == tries + 1
        )

    async def record_lost(self, node: StepNode, scope: int) -> StepRow:
        """Journal the try lost with a dead node (its heartbeats stopped) as a failed try."""
        await self.flush()
        capability = node.capability
        previous = self.found(node.index, scope)
        try_number = len(previous) + 1
        started = self.instance.attempt_started_at or self.now()
        first_start = self._retry_start(node, scope, StepKind.STEP, previous) or started
        now = self.now()
        policy = capability.options.retry
        next_try_at = None
        detail = (
            f"no heartbeat from try {try_number} since "
            f"{(self.instance.heartbeat_at or started).isoformat()}"
        )
        if policy is not None:
            delay = policy.delay_after(try_number)
            if policy.allows_another(try_number, "heartbeat_timeout", (now + delay) - first_start):
                next_try_at = now + delay
        row = StepRow(
            self.instance_id,
            node.index,
            scope,
            StepKind.STEP,
            capability.id,
            Outcome.FAILURE,
            started,
            now,
            try_number=try_number,
            error_type="heartbeat_timeout",
            error_detail=detail,
            final=next_try_at is None,
            next_try_at=next_try_at,
        )
        ack = await self.journal.writes.commit_step(self.token, row, self.lease_until())
        self.instance = replace(
            self.instance, attempt_step_id=None, attempt_scope=None, attempt_try=None
        )
        self.record(row)
        self.after_ack(ack)
        return row


class _CancelRequested(BaseException):
    """Internal: raised out of ``ctx.heartbeat`` when the instance is to be cancelled.

    A ``BaseException``, as ``asyncio.CancelledError`` is: capabilities (provider clients
    above all) often catch ``Exception`` around a call, and such a handler must not swallow
    the cancel and keep the try going.
    """


class _CapabilityTimeout(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (models by alias, datetimes as ISO strings ...).

    Raises:
        pydantic_core.PydanticSerializationError: a value JSON cannot hold.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return to_jsonable_python(value, by_alias=True)
