"""The in-memory store's state and fences (:mod:`flowpark.store.memory`): what it holds, one
object shared by its ports, and the guard every lease holder's write passes."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from flowpark.engine.ports.operator import OperatorAction
from flowpark.engine.ports.values import Commit, StreamWrite
from flowpark.engine.records import (
    Claim,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    SignalRecord,
    Snapshot,
    StepRow,
    StreamMessage,
)
from flowpark.errors import InstanceNotFound, JournalConflict, StaleFencingToken

__all__ = [
    "MemoryBase",
    "MemoryState",
    "NO_LEASE",
    "NO_TRY",
    "RUNNING",
    "SUSPENDED",
    "append_row",
    "append_stream",
    "copy_json",
    "named_step",
    "require_aware",
]

RUNNING, SUSPENDED = InstanceState.RUNNING, InstanceState.SUSPENDED
NO_TRY: dict[str, Any] = {
    "try_step_id": None,
    "try_scope": None,
    "try_number": None,
    "try_started_at": None,
    "heartbeat_at": None,
    "heartbeat_value": None,
}
NO_LEASE: dict[str, Any] = {"lease_owner": None, "lease_expires_at": None}


def copy_json(value: Any) -> Any:
    """A JSON value as the store would read it back (no aliasing of the caller's dicts)."""
    return json.loads(json.dumps(value)) if value is not None else None


def require_aware(*instants: datetime | None) -> None:
    """Refuse a naive instant, as the SQL store's column type does.

    Raises:
        ValueError: an instant is naive.
    """
    for value in instants:
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            raise ValueError(f"UtcDateTime expects an aware datetime, got naive {value!r}")


@dataclass
class MemoryState:
    """What the store holds (one object shared by its ports)."""

    instances: dict[str, InstanceRecord] = field(default_factory=dict)
    steps: dict[str, list[StepRow]] = field(default_factory=dict)
    signals: dict[str, list[SignalRecord]] = field(default_factory=dict)
    heartbeats: dict[tuple[str, int, int], Heartbeat] = field(default_factory=dict)
    streams: dict[tuple[str, str], list[StreamMessage]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)  # the outbox's sends
    actions: list[OperatorAction] = field(default_factory=list)
    idempotency: dict[str, str] = field(default_factory=dict)  # instance id -> its key
    sizes: dict[tuple[str, str, int], int] = field(default_factory=dict)  # stream messages
    # (flow, provider, key) -> (the instance holding it, when it was recorded)
    correlations: dict[tuple[str, str, str], tuple[str, datetime]] = field(default_factory=dict)
    # (flow, signal, delivery id) -> the instance a signed delivery id reached first
    delivery_ids: dict[tuple[str, str, str], str] = field(default_factory=dict)
    sequence: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


class MemoryBase:
    """The state of a :class:`~flowpark.store.memory.MemoryStore` and its fences."""

    def __init__(self) -> None:
        self._s = MemoryState()

    # -- fencing ---------------------------------------------------------------------
    def _get(self, instance_id: str) -> InstanceRecord:
        inst = self._s.instances.get(instance_id)
        if inst is None:
            raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
        return inst

    def _snapshot(self, instance_id: str) -> Snapshot:
        """The instance, its journal and its untaken signals.

        Raises:
            InstanceNotFound: no such instance.
        """
        inst = self._get(instance_id)
        pending = [s for s in self._s.signals.get(instance_id, []) if s.taken_at is None]
        return Snapshot(inst, list(self._s.steps.get(instance_id, [])), pending)

    def _append(self, row: StepRow, commit: Commit, last: bool) -> None:
        """See :func:`append_row`."""
        append_row(self._s, row, commit, last)

    def _fence(self, instance_id: str, token: int) -> InstanceRecord:
        """The instance if ``token`` is current and it runs.

        Raises:
            InstanceNotFound, StaleFencingToken.
        """
        inst = self._get(instance_id)
        if inst.fencing_token != token or inst.state is not RUNNING:
            raise StaleFencingToken(
                f"instance {instance_id!r}: fencing token {token} refused "
                f"(current {inst.fencing_token}, state {inst.state.value})",
                instance_id=instance_id,
                token=token,
                current_token=inst.fencing_token,
                state=inst.state.value,
            )
        return inst

    def _put(self, inst: InstanceRecord, **changes: Any) -> InstanceRecord:
        inst = replace(inst, **changes)
        self._s.instances[inst.id] = inst
        return inst

    def _claimed(self, inst: InstanceRecord, owner: str, now: datetime, until: datetime) -> Claim:
        inst = self._put(
            inst,
            state=RUNNING,
            lease_owner=owner,
            lease_expires_at=until,
            fencing_token=inst.fencing_token + 1,
            updated_at=now,
        )
        return Claim(inst.id, inst.fencing_token)

    @staticmethod
    def _claimable(inst: InstanceRecord, now: datetime, *, due_only: bool) -> bool:
        if inst.state is SUSPENDED:
            return not due_only or (inst.wake_at is not None and inst.wake_at <= now)
        return (
            inst.state is RUNNING
            and inst.lease_expires_at is not None
            and inst.lease_expires_at < now
        )


def append_row(state: MemoryState, row: StepRow, commit: Commit, last: bool) -> None:
    """Append ``row`` to its instance's journal in ``state`` (with the commit's events and
    reviews when it is the ``last``).

    Raises:
        JournalConflict: the journal holds its execution and try already.
    """
    key = (row.step_id, row.scope, row.kind, row.try_number)
    rows = state.steps.setdefault(row.instance_id, [])
    if any((r.step_id, r.scope, r.kind, r.try_number) == key for r in rows):
        raise JournalConflict(
            f"instance {row.instance_id!r}: step {row.step_id} scope {row.scope} "
            f"{row.kind} try {row.try_number} conflicts with the journal",
            instance_id=row.instance_id,
            step_id=row.step_id,
            scope=row.scope,
        )
    rows.append(replace(row, values=copy_json(row.values), sequence=next(state.sequence)))
    if not last:
        return
    for event in commit.events:
        state.events.append(
            {
                "sequence": next(state.sequence),
                "id": event.id,
                "instance_id": row.instance_id,
                "name": event.name,
                "payload": copy_json(dict(event.payload)),
                "created_at": row.committed_at,
                "published_at": None,
            }
        )
    for review in commit.reviews:
        state.reviews.append(
            {
                "sequence": next(state.sequence),
                "id": review.id,
                "instance_id": row.instance_id,
                "subject": review.subject,
                "reason": review.reason,
                "details": copy_json(dict(review.details)),
                "created_at": row.committed_at,
                "state": "open",
                "claimed_by": None,
                "claimed_at": None,
                "closed_by": None,
                "closed_at": None,
                "note": None,
            }
        )


def append_stream(state: MemoryState, message: StreamWrite, max_bytes: int) -> bool:
    """Append ``message`` to its stream in ``state`` unless the stream would then hold more
    than ``max_bytes`` (see :meth:`flowpark.engine.ports.Streams.write_stream`).

    Returns:
        Whether the message was stored.
    """
    key = (message.instance_id, message.stream)
    stored = state.streams.setdefault(key, [])
    used = sum(state.sizes.get((*key, m.sequence), 0) for m in stored)
    if used + message.size > max_bytes:
        return False
    sequence = next(state.sequence)
    stored.append(
        StreamMessage(
            sequence, message.instance_id, message.stream, copy_json(message.payload), message.at
        )
    )
    state.sizes[(*key, sequence)] = message.size
    return True


def named_step(details: object) -> int | None:
    """The step a failure's details name (``step_id``; ``step`` or ``node`` in failures
    stored by earlier releases), as the instance view reads it, or None. Both stores' read
    models place failed instances with it (kept here, where no SQL is imported)."""
    if not isinstance(details, dict):
        return None
    for key in ("step_id", "step", "node"):
        value = details.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
