"""The executor: one run of one claimed instance. It asks the decider
(:mod:`flowpark.engine.decide.decider`) for the next decision, carries it out (a try under its
limits,
a park, a signal taken, an ending), commits the outcome under the claim's fencing token,
and asks again, until the instance parks or ends.

A row a try executed is *deferred*: the run's next write carries it (a park writes it in
the same statement, an emit's commit too), so a parked poll's attempt costs one write.
Every other write commits the deferred row first, so a row is durable before anything
that follows it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from flowpark.engine.decide.decisions import (
    BeginEnding,
    Emit,
    Execute,
    Finish,
    MailboxView,
    Note,
    ReadMailbox,
    Record,
    RefuseSignal,
    RunDecision,
    Suspend,
    TakeSignal,
)
from flowpark.engine.execute.budget import SLOT_LAPSE, Deferred, Granted
from flowpark.engine.execute.deferral import deferral_park, pushback_reason, pushback_until
from flowpark.engine.execute.run_state import KeysRefused, RunState
from flowpark.engine.execute.tries import PushedBack, make_try
from flowpark.engine.observe import WARNED
from flowpark.engine.outcomes import Halt
from flowpark.engine.ports import Park
from flowpark.engine.records import (
    Ack,
    EmittedEvent,
    InstanceState,
    Outcome,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.errors import FlowFailure
from flowpark.flows.plan import CapabilityStep
from flowpark.flows.providers import Provider

__all__ = ["Executor"]

log = logging.getLogger("flowpark.engine")


class Executor(RunState):
    """Carries out the decisions of one run (see the module docstring), over the state
    :class:`~flowpark.engine.execute.run_state.RunState` keeps.

    Args:
        As :class:`~flowpark.engine.execute.run_state.RunState`.
    """

    # -- the loop ----------------------------------------------------------------------
    async def run(self) -> Halt:
        """Decide and carry out until the instance parks or ends.

        Returns:
            How the run left the instance.

        Raises:
            JournalMismatch: the journal does not fit the plan (``journal_mismatch``).
            StaleFencingToken: another node claimed the instance meanwhile.
        """
        while True:
            halt = await self.step(self.decide())
            if halt is not None:
                return halt

    def decide(self) -> RunDecision:
        """The decider's next decision over what this run knows."""
        return self.decider.decide(
            self.instance,
            self.steps,
            MailboxView(self.signals, self.read_at),
            self.now(),
            claimed=self.claimed,
            woken=self.woken,
        )

    async def step(self, decision: RunDecision) -> Halt | None:
        """Carry out one decision; a :class:`Halt` when the run stops there (None: decide
        again, also when a step's correlation key was refused and its try failed)."""
        try:
            return await self._carry_out(decision)
        except KeysRefused:
            return None  # the journal now holds the try's failure: decide from it

    async def _carry_out(self, decision: RunDecision) -> Halt | None:
        self.report(decision.notes)
        if isinstance(decision, Execute):
            return await self.execute(decision)
        if isinstance(decision, Suspend):
            return await self.park(decision)
        elif isinstance(decision, Record):
            await self.store_rows(decision.store_first)
            await self.flush()
            ack = await self.commit(decision.row)
            if decision.clears_try:
                self.instance = self.instance.evolve(
                    try_step_id=None, try_scope=None, try_number=None
                )
            self.record(decision.row)
            self.after_ack(ack)
        elif isinstance(decision, ReadMailbox):
            await self.read_mailbox()
        elif isinstance(decision, TakeSignal):
            await self.take(decision)
        elif isinstance(decision, RefuseSignal):
            await self.refuse(decision)
        elif isinstance(decision, Emit):
            await self.emit(decision)
        elif isinstance(decision, BeginEnding):
            await self.begin_ending(decision.ending, decision.failure)
        else:
            return await self.finish(decision)
        return None

    def report(self, notes: tuple[Note, ...]) -> None:
        """Tell the observer what the decision's walk noted (once each per run): a poll
        attempt's verdict, a poll's wait ended."""
        for note in notes:
            key = (note.poll, note.how, note.attempt)
            if key in self.noted or self.ephemeral:
                continue
            self.noted.add(key)
            if note.how == WARNED:
                self.host.observer.budget_warned(self.plan.name)
                continue
            if note.attempt is None:
                self.host.observer.poll_ended(self.plan.name, note.used, note.how)
                continue
            body = self.plan.steps[note.poll + 1]
            assert isinstance(body, CapabilityStep)
            self.host.observer.attempted(self.plan.name, body.capability.id, note.how)

    async def store_rows(self, rows: tuple[StepRow, ...]) -> None:
        """Commit deadline rows now, in one write with the deferred row (the store keeps
        them inside it)."""
        if not rows:
            return
        deferred, self.unflushed = self.unflushed, None
        ack = await self.commit(*(() if deferred is None else (deferred,)), *rows)
        self.steps.extend(rows)  # no action: the wake the claim found stays
        self.after_ack(ack)

    async def execute(self, decision: Execute) -> Halt | None:
        """Make the try (a poll's attempt is judged for the observer), after taking a token
        of its provider's budget; without one, or when the provider pushes the call back,
        park instead (:mod:`flowpark.engine.execute.deferral`)."""
        cancelled = self.instance.cancel_requested
        await self.store_rows(decision.store_first)
        if self.instance.cancel_requested and not cancelled:
            return None  # learned with the deadline's write: decide again (the run unwinds)
        if decision.late_by is not None and not self.ephemeral:  # every wake, deferred too
            self.host.observer.woke(self.plan.name, decision.late_by.total_seconds())
        provider = None if self.ephemeral else self._provider(decision)
        budget = self.host.providers
        if provider is not None:
            verdict = await self._slot(provider)
            if isinstance(verdict, Deferred):
                pushed = verdict.reason == "pushback"
                kind = WakeKind.PROVIDER_PUSHBACK if pushed else WakeKind.PROVIDER_BUDGET
                return await self.postpone(decision, verdict.until, kind, provider.name)
        outcome = "none"
        try:
            made = await make_try(self, decision)
            if isinstance(made, PushedBack):
                outcome = "pushback"
            elif made is not None and made.error_type != "retry_window_ended":
                outcome = "ok" if made.outcome is Outcome.SUCCESS else "failed"
        finally:
            if provider is not None:
                budget.release(provider, outcome)
        if not isinstance(made, PushedBack):
            return None
        now = self.now()
        seed = f"{decision.execution_key}:{decision.try_number}:{now.isoformat()}"
        until = pushback_until(made.until, now, seed)
        if provider is not None:
            await budget.pushback(
                provider, now, made.until or until, pushback_reason(made, decision, now)
            )
        if not self.ephemeral:
            self.host.observer.provider_deferred(
                provider.name if provider is not None else decision.capability_id, "pushback"
            )
        log.info(
            "instance %s: %s pushed back (%s); parked until %s",
            self.instance_id,
            decision.capability_id,
            made.detail,
            until.isoformat(),
        )
        name = provider.name if provider is not None else decision.capability_id
        return await self.postpone(decision, until, WakeKind.PROVIDER_PUSHBACK, name)

    async def _slot(self, provider: Provider) -> Granted | Deferred:
        """A call slot of ``provider``, waited for on the engine clock when near; one the
        wait overran by more than :data:`SLOT_LAPSE` (a busy node) is not used: another is
        taken, so late calls never bunch up above the rate."""
        budget = self.host.providers
        while True:
            verdict = await budget.acquire(provider, self.now())
            if isinstance(verdict, Deferred) or verdict.at is None:
                return verdict
            try:
                await self.sleep(verdict.at - self.now())
            except BaseException:
                budget.release(provider, "none")
                raise
            if self.now() <= verdict.at + SLOT_LAPSE:
                return verdict
            budget.release(provider, "none")

    def _provider(self, decision: Execute) -> Provider | None:
        """The provider the try's capability calls, or None."""
        step = self.plan.steps[decision.step]
        assert isinstance(step, CapabilityStep)
        capability = step.capability if decision.kind is StepKind.STEP else step.compensation
        return capability.provider if capability is not None else None

    async def postpone(
        self, decision: Execute, until: datetime, kind: WakeKind, provider: str
    ) -> Halt | None:
        """Park the try ``decision`` names until ``until`` (capped at its bounding
        deadline), held back by ``provider``; no row, not a try (how long it is held back
        is the observer's, apart from the sweep's lateness). An ephemeral run sleeps and
        decides again. The deferral of a try an operator woke keeps the wake (no row
        consumed the wait the claim found): the claim that finds it due runs it, whatever
        its schedule says."""
        now = self.now()
        park = deferral_park(self.plan, self.instance, decision, until, now, kind)
        inst = self.instance
        if self.woken and (inst.wake_step_id, inst.wake_scope) == (park.step, park.scope):
            park = replace(park, woken=True)
        if park.wake_at is not None and not self.ephemeral:
            reason = "pushback" if kind is WakeKind.PROVIDER_PUSHBACK else "budget"
            held = (park.wake_at - now).total_seconds()
            self.host.observer.provider_held(self.plan.name, provider, reason, held)
        return await self.park(park)

    # -- parks ------------------------------------------------------------------------
    async def park(self, decision: Suspend) -> Halt | None:
        """Suspend as ``decision`` says; None when the store refused (a signal waits, a
        cancel was requested) or an ephemeral run slept until the wake."""
        if self.ephemeral:
            await self.flush()
            if decision.wake_at is not None:
                await self.sleep(decision.wake_at - self.now())
            self.instance = self.instance.evolve(wake_step_id=None, wake_scope=None)
            return None
        row, self.unflushed = self.unflushed, None
        store = decision.store_first
        if store and row is None and len(store) == 1:
            row, store = store[0], ()  # the park carries the wait's deadline
        if store:
            self.unflushed = row
            await self.store_rows(store)
            row = None
        ack = await self._write_park(decision, row)
        if row is not None and row.kind is StepKind.DEADLINE:
            self.steps.append(row)  # the carried deadline (a step row was recorded already)
        if ack.applied:
            self.settle(
                state=InstanceState.SUSPENDED,
                wake_at=decision.wake_at,
                wake_step_id=decision.step,
                wake_scope=decision.scope,
                wake_kind=decision.kind,
                lease_owner=None,
                lease_expires_at=None,
                woken=decision.woken,
            )
            return Halt(InstanceState.SUSPENDED, decision.wake_at)
        self.after_ack(ack)
        if (
            decision.kind is not WakeKind.RETRY
        ):  # the wait this run parked on, as a claim would find it
            self.instance = self.instance.evolve(
                wake_at=decision.wake_at,
                wake_step_id=decision.step,
                wake_scope=decision.scope,
            )
        if ack.signal_pending:
            snapshot = await self.store.runs.load(self.instance_id)
            self.signals, self.read_at = tuple(snapshot.signals), len(self.steps)
        elif not ack.cancel_requested:  # pragma: no cover
            raise RuntimeError("park was refused for no stated reason")
        return None

    async def _write_park(self, decision: Suspend, row: StepRow | None) -> Ack:
        """The park's write: with the row it carries, if any, in the same statement (a
        carried row's park is refused under a cancel request, unwinding or not)."""
        park = Park(
            decision.wake_at,
            decision.step,
            decision.scope,
            self.host.config.node_id,
            decision.kind,
            decision.accept_signal,
            decision.unwinding and row is None,
            decision.woken,
        )
        if row is not None:
            return await self.commit(row, park=park, at=row.committed_at)
        return await self.commit(park=park)

    # -- signals ------------------------------------------------------------------------
    async def read_mailbox(self) -> None:
        """Read the untaken signals again."""
        self.signals = tuple(await self.store.mailbox.pending_signals(self.instance_id))
        self.read_at = len(self.steps)

    async def take(self, decision: TakeSignal) -> None:
        """Take a signal: mark it taken and journal it in one write."""
        await self.flush()
        signal, row = decision.signal, decision.row
        ack = await self.commit(row, take_signal=signal.id)
        received = (row.committed_at - signal.received_at).total_seconds()
        self.host.observer.signal_taken(self.plan.name, received)
        self.signals = tuple(s for s in self.signals if s.id != signal.id)
        self.taken.append(replace(signal, taken_at=row.committed_at, taken_step_id=decision.step))
        self.record(row)
        self.after_ack(ack)

    async def refuse(self, decision: RefuseSignal) -> None:
        """Mark a signal the wait's match refuses (kept, out of the mailbox)."""
        await self.flush()
        signal, now = decision.signal, self.now()
        ack = await self.store.mailbox.refuse_signal(
            self.instance_id, self.token, signal.id, decision.step, now
        )
        self.signals = tuple(s for s in self.signals if s.id != signal.id)
        self.taken.append(replace(signal, taken_at=now, taken_step_id=decision.step, matched=False))
        self.after_ack(ack)
        log.info(
            "instance %s: signal %s (%s) does not match the wait at step %d: kept, refused",
            self.instance_id,
            signal.id,
            signal.name,
            decision.step,
        )

    # -- emits and endings --------------------------------------------------------------
    async def emit(self, decision: Emit) -> None:
        """Write the event and the emit step's row (with the deferred row) in one write."""
        now = self.now()
        event = EmittedEvent(self.new_id(), decision.name, decision.payload)
        row = StepRow(
            self.instance_id,
            decision.step,
            0,
            StepKind.EMIT,
            decision.name,
            Outcome.SUCCESS,
            now,
            now,
            values={"event_id": event.id},
        )
        deferred, self.unflushed = self.unflushed, None
        rows = (row,) if deferred is None else (deferred, row)
        ack = await self.commit(*rows, events=(event,))
        self.record(row)
        self.after_ack(ack)

    async def begin_ending(self, ending: InstanceState, failure: FlowFailure | None) -> None:
        """Store that the instance unwinds towards ``ending``."""
        await self.flush()
        await self.store.runs.begin_ending(
            self.instance_id, self.token, self.now(), ending, failure
        )
        self.instance = self.instance.evolve(ending=ending, failure=failure)

    async def finish(self, decision: Finish) -> Halt | None:
        """Write the final state; None when a completion was refused (a cancel came)."""
        await self.flush()
        ack = await self.store.runs.finish(
            self.instance_id,
            self.token,
            self.now(),
            decision.state,
            result=decision.result,
            failure=decision.failure,
        )
        if not ack.applied:
            self.instance = self.instance.evolve(cancel_requested=True)
            return None
        self.settle(
            state=decision.state,
            result=decision.result,
            failure=decision.failure,
            ending=None,
            wake_at=None,
            wake_step_id=None,
            wake_scope=None,
            wake_kind=None,
            lease_owner=None,
            lease_expires_at=None,
            woken=False,
        )
        return Halt(decision.state)
