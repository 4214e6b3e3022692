"""The state of one run (:class:`RunState`): the instance as the run knows it, the
journal and mailbox it read and wrote, the row it deferred, its lease; and what a try's
context and limits call on it (a heartbeat, a stream message, a lease renewal's answer).
:class:`flowpark.engine.execute.executor.Executor` adds the loop that carries out decisions."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel

from flowpark.engine.context import Beat, ExecutionContext
from flowpark.engine.decide.decider import Decider
from flowpark.engine.decide.retries import failure_row
from flowpark.engine.execute.host import RunHost
from flowpark.engine.ports import Commit, Correlation, Park, Store, StreamWrite
from flowpark.engine.records import (
    Ack,
    Claim,
    EmittedEvent,
    InstanceRecord,
    ReviewRequest,
    SignalRecord,
    StepRow,
)
from flowpark.errors import CorrelationKeyInUse, ErrorCode, StreamNotDeclared
from flowpark.flows.capability import Stream
from flowpark.flows.plan import Plan

__all__ = ["KeysRefused", "RunState"]

log = logging.getLogger("flowpark.engine")


class KeysRefused(Exception):  # noqa: N818 - an outcome the executor handles, not an error
    """A commit carried correlation keys another live instance holds: the keyed try was
    committed as a final failure instead; the run decides again (internal to the engine)."""


class RunState:
    """One advance of one instance under one claim: its state (internal to the engine).

    Args:
        host: the engine (or an ephemeral run's stand-in).
        plan: the plan the instance runs.
        instance: the instance as claimed.
        claim: the claim (its fencing token fences every write).
        steps: the journal as claimed.
        signals: the untaken signals as claimed.
        ephemeral: an ephemeral run: waits sleep in-process, nothing outlives the call.

    Raises:
        pydantic.ValidationError: the stored input does not fit the plan's input model.
    """

    def __init__(
        self,
        host: RunHost,
        plan: Plan,
        instance: InstanceRecord,
        claim: Claim,
        steps: list[StepRow],
        signals: list[SignalRecord],
        *,
        ephemeral: bool = False,
    ) -> None:
        self.host = host
        self.store: Store = host.store
        self.plan = plan
        self.decider = Decider(plan, instance.input)
        self.input = self.decider.input
        self.instance = instance
        self.token = claim.fencing_token
        # an operator's wake: this request's (a wake now), or the one the row keeps (a bulk
        # wake, a woken try deferred); not across a takeover: the run that held it may have
        # made the woken try already
        self.woken = claim.woken or (instance.woken and not claim.taken_over)
        self.ephemeral = ephemeral
        self.steps = list(steps)
        self.claimed = len(self.steps)
        self.signals = tuple(signals)
        # a claim of a parked instance read its mailbox with it; a start or a takeover not
        self.read_at: int | None = self.claimed if instance.wake_step_id is not None else None
        self.taken: list[SignalRecord] = []
        self.tries = 0
        self.heartbeat_written: tuple[Any, datetime] | None = None
        self.detach: asyncio.Future[None] | None = None
        self.lease_expires_at: datetime | None = instance.lease_expires_at
        self.unflushed: StepRow | None = None
        #: a step's row (committed or deferred) and the correlation keys to write with it
        self.keyed: tuple[StepRow, tuple[Correlation, ...]] | None = None
        self.noted: set[tuple[int, str, int | None]] = set()

    # -- what a try and its limits use -------------------------------------------------
    @property
    def instance_id(self) -> str:
        """The instance's id."""
        return self.instance.id

    @property
    def instance_key(self) -> str | None:
        """The instance's business key, if any."""
        return self.instance.instance_key

    def now(self) -> datetime:
        """The engine clock's instant (aware UTC)."""
        return self.host.clock.now()

    def new_id(self) -> str:
        """A fresh id."""
        return self.host.new_id()

    async def sleep(self, delay: timedelta) -> None:
        """Sleep on the engine clock."""
        await self.host.clock.sleep(delay)

    def lease_until(self) -> datetime:
        """The lease end for a write now."""
        return self.now() + self.host.lease

    def after_ack(self, ack: Ack) -> None:
        """Take note of what a write answered (a cancel requested meanwhile)."""
        if ack.cancel_requested and not self.instance.cancel_requested:
            self.instance = self.instance.evolve(cancel_requested=True)

    def record(self, row: StepRow) -> None:
        """Remember a row this run committed or deferred: the wake the claim found is
        consumed by it."""
        self.steps.append(row)
        if self.instance.wake_step_id is not None:
            self.instance = self.instance.evolve(wake_step_id=None, wake_scope=None)

    def defer(self, row: StepRow, keys: tuple[Correlation, ...] = ()) -> None:
        """Keep ``row`` (and the correlation keys it records) for the next write to carry."""
        self.unflushed = row
        self.keep_keys(row, keys)

    def keep_keys(self, row: StepRow, keys: tuple[Correlation, ...]) -> None:
        """Write ``keys`` with ``row``, in whichever commit carries it."""
        self.keyed = (row, keys) if keys else None

    async def flush(self) -> None:
        """Commit the deferred row, if any."""
        row, self.unflushed = self.unflushed, None
        if row is not None:
            self.after_ack(await self.commit(row))

    async def commit(
        self,
        *rows: StepRow,
        events: tuple[EmittedEvent, ...] = (),
        reviews: tuple[ReviewRequest, ...] = (),
        take_signal: str | None = None,
        park: Park | None = None,
        at: datetime | None = None,
    ) -> Ack:
        """Write ``rows`` (and what goes with them: the correlation keys of a row among
        them) as one :class:`Commit` under this run's fencing token, at ``at`` (default now);
        a try in flight's lease is renewed to the run's.

        Raises:
            KeysRefused: a key another live instance holds: nothing of the commit was
                written; the keyed row's try was committed as a final failure instead
                (``correlation_key_in_use``) and the run must decide again.
        """
        keyed = self.keyed
        keys = keyed[1] if keyed is not None and any(r is keyed[0] for r in rows) else ()
        commit = Commit(
            self.instance_id,
            self.token,
            at or self.now(),
            self.lease_until(),
            rows,
            events,
            reviews,
            take_signal,
            park,
            keys,
        )
        if not keys:
            return await self.store.runs.commit(commit)
        self.keyed = None
        try:
            return await self.store.runs.commit(commit)
        except CorrelationKeyInUse as exc:
            assert keyed is not None
            await self._refused(keyed[0], exc)
            raise KeysRefused(exc.message) from exc

    async def _refused(self, row: StepRow, exc: CorrelationKeyInUse) -> None:
        """Commit the try of ``row`` as failed for good with ``correlation_key_in_use`` (in
        place of ``row``, which was not written) and keep the journal as the store has it."""
        now = self.now()
        failed = failure_row(
            row.instance_id,
            row.step_id,
            row.scope,
            row.kind,
            row.capability_id,
            row.try_number,
            (ErrorCode.CORRELATION_KEY_IN_USE.value, exc.message),
            row.started_at,
            now,
            None,
        )
        log.info("instance %s: %s", self.instance_id, exc.message)
        ack = await self.store.runs.commit(
            Commit(self.instance_id, self.token, now, self.lease_until(), (failed,))
        )
        if any(r is row for r in self.steps):
            self.steps = [failed if r is row else r for r in self.steps]
        else:
            self.steps.append(failed)
        self.after_ack(ack)

    def settle(self, **changes: Any) -> None:
        """Keep :attr:`instance` as the run last wrote it (a start answers with it)."""
        self.instance = self.instance.evolve(
            updated_at=self.now(),
            try_step_id=None,
            try_scope=None,
            try_number=None,
            try_started_at=None,
            heartbeat_at=None,
            heartbeat_value=None,
            **changes,
        )

    # -- what a capability's context calls ----------------------------------------------
    async def heartbeat(self, ctx: ExecutionContext, value: Any) -> Beat:
        """Record a heartbeat of the try ``ctx`` runs: the checkpoint ``value`` and a lease
        renewed by the heartbeat timeout, in one write; an unchanged value at most once per
        third of the timeout. A try with no heartbeat timeout (or a compensation) records
        it in memory only.

        Returns:
            :attr:`Beat.CANCEL` when the write learned that a cancel was requested (the try
            stops and the instance unwinds; nothing of the try is committed), else
            :attr:`Beat.GO_ON`.

        Raises:
            StaleFencingToken: another node took the instance over.
        """
        cap_timeout = ctx.heartbeat_timeout
        now = self.now()
        ctx.last_heartbeat_at = now
        if cap_timeout is None:
            return Beat.GO_ON
        if self.heartbeat_written is not None:
            last_value, written_at = self.heartbeat_written
            if last_value == value and now - written_at < cap_timeout / 3:
                return Beat.GO_ON
        ack = await self.store.runs.record_heartbeat(
            self.instance_id, self.token, value, now, now + cap_timeout
        )
        self.heartbeat_written = (value, now)
        self.after_ack(ack)
        return Beat.CANCEL if self.instance.cancel_requested else Beat.GO_ON

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
        message = StreamWrite(self.instance_id, stream.name, payload, size, self.now())
        return await self.store.streams.write_stream(message, declared.max_bytes, token=self.token)
