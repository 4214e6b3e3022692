"""Records for journal tests: instants from a fixed T0, a new instance, a journal row."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from flowpark.engine.ports import Commit, Park
from flowpark.engine.records import (
    InstanceRecord,
    NewInstance,
    Outcome,
    StepKind,
    StepRow,
    WakeKind,
)

__all__ = [
    "FLOW",
    "LEASE",
    "T0",
    "at",
    "commit_of",
    "new_instance",
    "park_at",
    "park_commit",
    "step",
    "wake_at",
]

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LEASE = timedelta(seconds=30)
FLOW = ("document.process", "1.0.0")


def at(seconds: float) -> datetime:
    """``T0`` plus ``seconds`` (aware UTC)."""
    return T0 + timedelta(seconds=seconds)


def new_instance(**changes: Any) -> NewInstance:
    """A start of ``FLOW`` at ``T0`` leased to ``node-a`` for ``LEASE`` (fields overridable)."""
    base = NewInstance(
        id=str(uuid.uuid4()),
        flow_name=FLOW[0],
        flow_version=FLOW[1],
        input={"document": "d-1"},
        created_at=T0,
        deadline_at=at(3600),
        lease_owner="node-a",
        lease_expires_at=T0 + LEASE,
    )
    return replace(base, **changes)


def step(instance_id: str, step_id: int = 0, scope: int = 0, **changes: Any) -> StepRow:
    """A successful ``ocr.submit`` row of (step_id, scope), started at 1 s, committed at 2 s."""
    base = StepRow(
        instance_id=instance_id,
        step_id=step_id,
        scope=scope,
        kind=StepKind.STEP,
        capability_id="ocr.submit",
        outcome=Outcome.SUCCESS,
        started_at=at(1),
        committed_at=at(2),
        values={"job": {"id": "j-1"}},
    )
    return replace(base, **changes)


def wake_at(record: InstanceRecord) -> datetime:
    """The instant ``record`` is parked until (it must be parked on a timer)."""
    assert record.wake_at is not None, record
    return record.wake_at


def commit_of(
    token: int,
    *rows: StepRow,
    lease_until: datetime,
    park: Park | None = None,
    at: datetime | None = None,
    **changes: Any,
) -> Commit:
    """A :class:`Commit` of ``rows`` under ``token``, at the last row's ``committed_at``
    unless ``at`` is given (other fields: ``changes``)."""
    return Commit(
        rows[0].instance_id,
        token,
        at or rows[-1].committed_at,
        lease_until,
        rows=rows,
        park=park,
        **changes,
    )


def park_commit(
    instance_id: str,
    token: int,
    now: datetime,
    park: Park,
) -> Commit:
    """A :class:`Commit` of ``park`` alone (no row) at ``now``."""
    return Commit(instance_id, token, now, now, park=park)


def park_at(
    wake_at: datetime | None,
    step_id: int,
    scope: int,
    accept_signal: str | None = None,
    *,
    owner: str = "node-a",
    kind: WakeKind | None = None,
    unwinding: bool = False,
) -> Park:
    """A :class:`Park` at (step_id, scope) until ``wake_at``, for ``owner``."""
    return Park(wake_at, step_id, scope, owner, kind, accept_signal, unwinding)
