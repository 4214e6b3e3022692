"""Conversions between table rows and the engine's frozen records (``flowpark.engine.records``).

Records read whole from one row, column for field (:class:`Heartbeat`,
:class:`StreamMessage`), are validated by pydantic (a ``TypeAdapter`` of the record's
dataclass, built once). The mappers of the start/park/wake path stay written out: a claim
maps the instance row, its journal and its mailbox (:func:`instance_from_row`,
:func:`step_from_row`, :func:`signal_from_row`; on PostgreSQL :func:`snapshot_from_row` over
JSON aggregates), and those records are not one column per field: ``error_*`` columns make
a :class:`FlowFailure`, ``values`` and ``ends_at`` make a row's values, NULL JSON reads as
``{}``, and PostgreSQL's JSON text of a ``timestamptz`` is parsed to the same aware UTC
instant as the driver gives. (Measured per row: pydantic 1.4 us against 2.9 us written out
for a :class:`StepRow`, so speed is not what keeps them; the per-column rules are.)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cache
from typing import Any

from pydantic import TypeAdapter
from sqlalchemy import JSON, Row, Table, and_, bindparam, func, insert, or_, select
from sqlalchemy.dialects.postgresql import aggregate_order_by
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.selectable import CTE

from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    NewInstance,
    Outcome,
    SignalRecord,
    Snapshot,
    StepKind,
    StepRow,
    StreamMessage,
    WakeKind,
)
from flowpark.errors import FlowFailure
from flowpark.store.carried import carried_column, start_carried, start_rows, unpack
from flowpark.store.tables import (
    FlowHeartbeatRow,
    FlowInstanceRow,
    FlowSignalRow,
    FlowStepRow,
    FlowStreamRow,
    OutboxEventRow,
    ReviewItemRow,
)

__all__ = [
    "DEADLINE_END_KEY",
    "EVENT",
    "HEARTBEAT",
    "INSTANCE",
    "REVIEW",
    "SIGNAL",
    "STEP",
    "STREAM",
    "failure_columns",
    "heartbeat_from_row",
    "instance_from_new",
    "instance_from_row",
    "instance_values",
    "journal_aggregates",
    "carried_by",
    "journal_from_json",
    "journal_from_rows",
    "journal_insert",
    "signal_from_json",
    "signal_from_row",
    "snapshot_from_row",
    "step_from_json",
    "step_from_row",
    "step_values",
    "stored_deadlines",
    "stream_from_row",
]


def _table(model: Any) -> Table:
    return model.__table__  # type: ignore[no-any-return]


INSTANCE = _table(FlowInstanceRow)
STEP = _table(FlowStepRow)
SIGNAL = _table(FlowSignalRow)
EVENT = _table(OutboxEventRow)
REVIEW = _table(ReviewItemRow)
HEARTBEAT = _table(FlowHeartbeatRow)
STREAM = _table(FlowStreamRow)


def instance_values(new: NewInstance) -> dict[str, Any]:
    """Column values of a freshly started instance: running, leased, fencing token 1."""
    return {
        "id": new.id,
        "flow_name": new.flow_name,
        "flow_version": new.flow_version,
        "state": InstanceState.RUNNING.value,
        "input": new.input,
        "created_at": new.created_at,
        "updated_at": new.created_at,
        "deadline_at": new.deadline_at,
        "lease_owner": new.lease_owner,
        "lease_expires_at": new.lease_expires_at,
        "fencing_token": 1,
        "cancel_requested": False,
        "instance_key": new.instance_key,
        "idempotency_key": new.idempotency_key,
        "trace_context": new.trace_context,
        "carried": start_carried(new),
    }


def instance_from_new(new: NewInstance) -> InstanceRecord:
    """The record of the row :func:`instance_values` inserts (without reading it back)."""
    return InstanceRecord(
        id=new.id,
        flow_name=new.flow_name,
        flow_version=new.flow_version,
        state=InstanceState.RUNNING,
        input=new.input,
        created_at=new.created_at,
        updated_at=new.created_at,
        deadline_at=new.deadline_at,
        lease_owner=new.lease_owner,
        lease_expires_at=new.lease_expires_at,
        fencing_token=1,
        instance_key=new.instance_key,
        trace_context=new.trace_context,
    )


def failure_columns(failure: FlowFailure | None) -> dict[str, Any]:
    """The ``error_*`` column values of ``failure`` (empty when None: columns untouched),
    with ``compensation_failed``: whether its details list compensations that failed for
    good (:data:`flowpark.engine.records.COMPENSATION_FAILURES`)."""
    if failure is None:
        return {}
    return {
        "error_code": failure.code,
        "error_message": failure.message,
        "error_details": dict(failure.details),
        "compensation_failed": bool(failure.details.get(COMPENSATION_FAILURES)),
    }


def instance_from_row(row: Row[Any]) -> InstanceRecord:
    """Build an :class:`InstanceRecord` from a full ``flow_instance`` row."""
    m = row._mapping
    failure = None
    if m["error_code"] is not None:
        failure = FlowFailure(
            code=m["error_code"],
            message=m["error_message"] or "",
            details=m["error_details"] or {},
        )
    return InstanceRecord(
        id=m["id"],
        flow_name=m["flow_name"],
        flow_version=m["flow_version"],
        state=InstanceState(m["state"]),
        input=m["input"] or {},
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        deadline_at=m["deadline_at"],
        wake_at=m["wake_at"],
        wake_step_id=m["wake_step_id"],
        wake_scope=m["wake_scope"],
        wake_kind=WakeKind(m["wake_kind"]) if m.get("wake_kind") else None,
        lease_owner=m["lease_owner"],
        lease_expires_at=m["lease_expires_at"],
        fencing_token=m["fencing_token"],
        ending=InstanceState(m["ending"]) if m["ending"] is not None else None,
        cancel_requested=bool(m["cancel_requested"]),
        result=m["result"],
        failure=failure,
        instance_key=m["instance_key"],
        try_step_id=m["try_step_id"],
        try_scope=m["try_scope"],
        try_number=m["try_number"],
        try_started_at=m["try_started_at"],
        heartbeat_at=m["heartbeat_at"],
        heartbeat_value=m["heartbeat_value"],
        trace_context=m["trace_context"],
        woken=bool(m.get("woken")),
    )


#: The key of a deadline row's end instant in its values (see
# :mod:`flowpark.engine.decide.deadlines`).
DEADLINE_END_KEY = "endsAt"


def _stored_values(row: StepRow) -> tuple[dict[str, Any] | None, datetime | None]:
    """``(values, ends_at)`` as ``flow_step`` stores them: a deadline row's end instant in
    ``ends_at`` (8 bytes instead of ~46 of JSON), values with nothing in them as NULL
    (which costs nothing in the row's null bitmap; ``{}`` costs 3 bytes and a varlena
    header). A deadline's end is moved only when its text is what ``ends_at`` gives back
    (aware UTC, ``isoformat``), so reading the row returns the same values."""
    values = row.values
    if StepKind(row.kind) is StepKind.DEADLINE and DEADLINE_END_KEY in values:
        text = values[DEADLINE_END_KEY]
        if isinstance(text, str):
            try:
                ends = datetime.fromisoformat(text)
            except ValueError:
                ends = None
            if ends is not None and ends.tzinfo is not None:
                ends = ends.astimezone(UTC)
                if ends.isoformat() == text:  # the rest (an extension's action) stays
                    rest = {k: v for k, v in values.items() if k != DEADLINE_END_KEY}
                    return rest or None, ends
    return (dict(values) or None), None


def _read_values(values: dict[str, Any] | None, ends_at: datetime | None) -> dict[str, Any]:
    """A journal row's values from its ``values`` and ``ends_at`` columns."""
    if ends_at is not None:
        return {**(values or {}), DEADLINE_END_KEY: ends_at.astimezone(UTC).isoformat()}
    return values or {}


def step_values(row: StepRow) -> dict[str, Any]:
    """Column values (keyed by column name) of a journal row to insert."""
    values, ends_at = _stored_values(row)
    return {
        "instance_id": row.instance_id,
        "step_id": row.step_id,
        "scope": row.scope,
        "kind": StepKind(row.kind).value,
        "capability_id": row.capability_id,
        "outcome": Outcome(row.outcome).value,
        "try_number": row.try_number,
        "values": values,
        "ends_at": ends_at,
        "error_type": row.error_type,
        "error_detail": row.error_detail,
        "final": row.final,
        "next_try_at": row.next_try_at,
        "started_at": row.started_at,
        "committed_at": row.committed_at,
        "carried": carried_column(row),
        "deferred_until": row.deferred_until,
        "deferred_by": row.deferred_by,
    }


def journal_from_rows(rows: Any, instance: Any = None) -> list[StepRow]:
    """An instance's journal from its ``flow_step`` rows in commit order: each row, with
    the deadline rows it carries where they were written (:mod:`flowpark.store.carried`),
    after those its ``flow_instance`` row (``instance``, when given) carries."""
    steps = [] if instance is None else carried_by(instance)
    for row in rows:
        steps.extend(unpack(step_from_row(row), row._mapping["carried"]))
    return steps


def carried_by(instance: Any) -> list[StepRow]:
    """The deadline rows a ``flow_instance`` row (with ``id``, ``created_at`` and
    ``carried``) carries from its start."""
    m = instance._mapping
    return start_rows(m["id"], m["created_at"], m["carried"])


async def stored_deadlines(conn: AsyncConnection, ids: Sequence[str]) -> list[StepRow]:
    """The deadline rows at scope 0 of the instances ``ids`` (a page's worth), rows of
    their own and those carried by a journal row or the instance row, in no set order.

    Raises:
        sqlalchemy.exc.DBAPIError: the reads failed (the caller's role maps it).
    """
    if not ids:
        return []
    wanted = sorted(set(ids))
    rows = await conn.execute(
        select(STEP).where(
            STEP.c.instance_id.in_(wanted),
            or_(
                and_(STEP.c.kind == StepKind.DEADLINE.value, STEP.c.scope == 0),
                STEP.c.carried.is_not(None),
            ),
        )
    )
    found = journal_from_rows(rows)
    starts = select(INSTANCE.c.id, INSTANCE.c.created_at, INSTANCE.c.carried).where(
        INSTANCE.c.id.in_(wanted), INSTANCE.c.carried.is_not(None)
    )
    for instance in await conn.execute(starts):
        found.extend(carried_by(instance))
    return [r for r in found if r.kind is StepKind.DEADLINE and r.scope == 0]


def journal_from_json(items: Any, instance: Any = None) -> list[StepRow]:
    """As :func:`journal_from_rows`, from rows aggregated as JSON (PostgreSQL)."""
    steps = [] if instance is None else carried_by(instance)
    for m in items or ():
        steps.extend(unpack(step_from_json(m), m.get("carried")))
    return steps


def step_from_row(row: Row[Any]) -> StepRow:
    """Build a :class:`StepRow` from a ``flow_step`` row (without what it carries: see
    :func:`journal_from_rows`)."""
    m = row._mapping
    return StepRow(
        instance_id=m["instance_id"],
        step_id=m["step_id"],
        scope=m["scope"],
        kind=StepKind(m["kind"]),
        capability_id=m["capability_id"],
        outcome=Outcome(m["outcome"]),
        started_at=m["started_at"],
        committed_at=m["committed_at"],
        try_number=m["try_number"],
        values=_read_values(m["values"], m["ends_at"]),
        error_type=m["error_type"],
        error_detail=m["error_detail"],
        final=bool(m["final"]),
        next_try_at=m["next_try_at"],
        sequence=m["sequence"],
        deferred_until=m.get("deferred_until"),
        deferred_by=m.get("deferred_by"),
    )


def _instant(value: str | None) -> datetime | None:
    """An instant from PostgreSQL's JSON text of a ``timestamptz`` (aware UTC)."""
    if value is None:
        return None
    return datetime.fromisoformat(value).astimezone(UTC)


@cache
def journal_aggregates() -> tuple[Any, Any]:
    """PostgreSQL scalar subqueries of a ``flow_instance`` row's journal (commit order)
    and untaken signals (arrival order), each as a JSON array (built once)."""
    s, g = STEP.alias("s"), SIGNAL.alias("g")
    steps = (
        select(func.json_agg(aggregate_order_by(s.table_valued(), s.c.sequence), type_=JSON))
        .where(s.c.instance_id == INSTANCE.c.id)
        .scalar_subquery()
    )
    signals = (
        select(func.json_agg(aggregate_order_by(g.table_valued(), g.c.sequence), type_=JSON))
        .where(g.c.instance_id == INSTANCE.c.id, g.c.taken_at.is_(None))
        .scalar_subquery()
    )
    return steps, signals


def snapshot_from_row(row: Row[Any]) -> Snapshot:
    """A :class:`Snapshot` from a ``flow_instance`` row with the ``j_steps`` and
    ``j_signals`` columns of :func:`journal_aggregates`."""
    return Snapshot(
        instance=instance_from_row(row),
        steps=journal_from_json(row.j_steps, row),
        signals=[signal_from_json(d) for d in row.j_signals or ()],
    )


def step_from_json(m: dict[str, Any]) -> StepRow:
    """Build a :class:`StepRow` from a ``flow_step`` row aggregated as JSON (PostgreSQL)."""
    started_at = _instant(m["started_at"])
    committed_at = _instant(m["committed_at"])
    assert started_at is not None and committed_at is not None
    return StepRow(
        instance_id=m["instance_id"],
        step_id=m["step_id"],
        scope=m["scope"],
        kind=StepKind(m["kind"]),
        capability_id=m["capability_id"],
        outcome=Outcome(m["outcome"]),
        started_at=started_at,
        committed_at=committed_at,
        try_number=m["try_number"],
        values=_read_values(m["values"], _instant(m.get("ends_at"))),
        error_type=m["error_type"],
        error_detail=m["error_detail"],
        final=bool(m["final"]),
        next_try_at=_instant(m["next_try_at"]),
        sequence=m["sequence"],
        deferred_until=_instant(m.get("deferred_until")),
        deferred_by=m.get("deferred_by"),
    )


def signal_from_json(m: dict[str, Any]) -> SignalRecord:
    """Build a :class:`SignalRecord` from a ``flow_signal`` row aggregated as JSON."""
    received_at = _instant(m["received_at"])
    assert received_at is not None
    return SignalRecord(
        id=m["id"],
        sequence=m["sequence"],
        instance_id=m["instance_id"],
        name=m["name"],
        payload=m["payload"] or {},
        received_at=received_at,
        idempotency_key=m["idempotency_key"],
        taken_at=_instant(m["taken_at"]),
        taken_step_id=m["taken_step_id"],
        matched=m.get("matched"),
        discarded_at=_instant(m.get("discarded_at")),
        discarded_reason=m.get("discarded_reason"),
    )


def signal_from_row(row: Row[Any]) -> SignalRecord:
    """Build a :class:`SignalRecord` from a ``flow_signal`` row."""
    m = row._mapping
    return SignalRecord(
        id=m["id"],
        sequence=m["sequence"],
        instance_id=m["instance_id"],
        name=m["name"],
        payload=m["payload"] or {},
        received_at=m["received_at"],
        idempotency_key=m["idempotency_key"],
        taken_at=m["taken_at"],
        taken_step_id=m["taken_step_id"],
        matched=m["matched"],
        discarded_at=m["discarded_at"],
        discarded_reason=m["discarded_reason"],
    )


_HEARTBEAT = TypeAdapter(Heartbeat)
_STREAM_MESSAGE = TypeAdapter(StreamMessage)


def heartbeat_from_row(row: Row[Any]) -> Heartbeat:
    """Build a :class:`Heartbeat` from a ``flow_heartbeat`` row (its other columns ignored).

    Raises:
        pydantic.ValidationError: a column does not hold its field's type.
    """
    return _HEARTBEAT.validate_python(dict(row._mapping))


def stream_from_row(row: Row[Any]) -> StreamMessage:
    """Build a :class:`StreamMessage` from a ``flow_stream`` row.

    Raises:
        pydantic.ValidationError: a column does not hold its field's type.
    """
    return _STREAM_MESSAGE.validate_python(dict(row._mapping))


def journal_insert(after: CTE, **fixed: Any) -> CTE:
    """A CTE (``ins``) inserting one journal row whose columns are the bound parameters
    ``s_<column>`` (or the expressions in ``fixed``), only when ``after`` yields a row;
    it returns the row's ``sequence``. Used by the one-statement fenced writes."""
    names = [c.name for c in STEP.columns if c.name != "sequence"]
    source = select(*(fixed.get(n, bindparam(f"s_{n}", type_=STEP.c[n].type)) for n in names))
    return (
        insert(STEP)
        .from_select(names, source.select_from(after))
        .returning(STEP.c.sequence)
        .cte("ins")
    )
