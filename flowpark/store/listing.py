"""SQL of the operator's read model (:class:`flowpark.engine.ports.operator.OperatorReads`).

The list is newest first with a keyset on ``(created_at, id)``: a page is
``WHERE <filter> AND (created_at, id) < (:at, :id) ORDER BY created_at DESC, id DESC
LIMIT n``, never an ``OFFSET``: an index scan per filter (migration 0012 says which), the
``(created_at, id)`` index read backwards for a filter that selects many rows. Rows
inserted while a reader pages are newer than its position, so they never shift a later
page: no row is seen twice and none that existed at the first page is skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, and_, case, cast, func, literal, select, true, tuple_
from sqlalchemy.sql.elements import ColumnElement

from flowpark.engine.ports.operator import (
    InstanceCount,
    InstanceFilter,
    InstancePage,
    InstanceSummary,
    StateCounts,
)
from flowpark.engine.records import InstanceState, StepRow, WakeKind
from flowpark.store.base import SqlRole, const
from flowpark.store.mapping import (
    DEADLINE_END_KEY,
    INSTANCE,
    STEP,
    journal_from_rows,
    stored_deadlines,
)

__all__ = ["SqlOperatorReads", "display_expression", "filter_clauses"]

_SUSPENDED = InstanceState.SUSPENDED.value
_RUNNING = InstanceState.RUNNING.value

_SUMMARY = (
    INSTANCE.c.id,
    INSTANCE.c.flow_name,
    INSTANCE.c.flow_version,
    INSTANCE.c.state,
    INSTANCE.c.created_at,
    INSTANCE.c.updated_at,
    INSTANCE.c.wake_at,
    INSTANCE.c.wake_kind,
    INSTANCE.c.wake_step_id,
    INSTANCE.c.wake_scope,
    INSTANCE.c.deadline_at,
    INSTANCE.c.lease_expires_at,
    INSTANCE.c.error_code,
    INSTANCE.c.instance_key,
    INSTANCE.c.cancel_requested,
    INSTANCE.c.ending,
)


def _require_now(where: InstanceFilter) -> datetime:
    if where.now is None:
        raise ValueError("InstanceFilter.now is required with overdue_seconds or stuck")
    return where.now


def filter_clauses(where: InstanceFilter) -> list[ColumnElement[bool]]:
    """The SQL conditions of ``where`` (ANDed). States and wait kinds (enums) are rendered
    inline (:func:`flowpark.store.base.const`), so a planner sees which partial index they imply
    (ended states, waits other than a poll's, suspended, running).

    Raises:
        ValueError: ``overdue_seconds`` or ``stuck`` without ``now``.
    """
    c = INSTANCE.c
    clauses: list[ColumnElement[bool]] = []
    if where.flow is not None:
        clauses.append(c.flow_name == where.flow)
    if where.version is not None:
        clauses.append(c.flow_version == where.version)
    if where.states:
        states = [InstanceState(s).value for s in where.states]
        # inline, so a planner sees that one ended state implies the ended partial index
        clauses.append(
            c.state == const(states[0])
            if len(states) == 1
            else c.state.in_([const(s) for s in states])
        )
    if where.overdue_seconds is not None:
        limit = _require_now(where) - timedelta(seconds=where.overdue_seconds)
        clauses.append(c.state == const(_SUSPENDED))
        clauses.append(c.wake_at < limit)
    if where.stuck:
        clauses.append(c.state == const(_RUNNING))
        clauses.append(c.lease_expires_at < _require_now(where))
    if where.error_code is not None:
        clauses.append(c.error_code == where.error_code)
    if where.compensation_failed:
        clauses.append(c.compensation_failed == true())
    if where.waiting is not None:
        clauses.append(c.state == const(_SUSPENDED))
        # inline: a kind other than poll implies the waiting partial index
        clauses.append(c.wake_kind == const(WakeKind(where.waiting).value))
    if where.instance_key is not None:
        clauses.append(c.instance_key == where.instance_key)
    if where.created_after is not None:
        clauses.append(c.created_at > where.created_after)
    if where.created_before is not None:
        clauses.append(c.created_at < where.created_before)
    if where.display_value is not None:
        value = display_expression(where)
        clauses.append(value == where.display_value if value is not None else literal(False))
    if where.id_prefix is not None:
        clauses.append(cast(c.id, String).startswith(where.id_prefix, autoescape=True))
    return clauses


def display_expression(where: InstanceFilter) -> ColumnElement[Any] | None:
    """The display key's value of a row (its flow version's declared input field, as
    text), or None when no flow declares one."""
    c = INSTANCE.c
    if not where.display_fields:
        return None
    return case(
        *(
            (and_(c.flow_name == flow, c.flow_version == version), c.input[field].as_string())
            for flow, version, field in where.display_fields
        ),
        else_=None,
    )


def _summary(row: Any) -> InstanceSummary:
    m = row._mapping
    return InstanceSummary(
        id=m["id"],
        flow_name=m["flow_name"],
        flow_version=m["flow_version"],
        state=InstanceState(m["state"]),
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        wake_at=m["wake_at"],
        wake_kind=WakeKind(m["wake_kind"]) if m["wake_kind"] else None,
        wake_step_id=m["wake_step_id"],
        wake_scope=m["wake_scope"],
        deadline_at=m["deadline_at"],
        lease_expires_at=m["lease_expires_at"],
        error_code=m["error_code"],
        instance_key=m["instance_key"],
        display_value=m.get("display_value"),
        cancel_requested=bool(m["cancel_requested"]),
        ending=InstanceState(m["ending"]) if m["ending"] is not None else None,
    )


class SqlOperatorReads(SqlRole):
    """The operator's list, counts and explain reads (each one read transaction)."""

    async def list_instances(
        self,
        where: InstanceFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        oldest_first: bool = False,
    ) -> InstancePage:
        """A page of instances matching ``where``, newest first (or oldest first).

        Args:
            where: the filter (see :class:`InstanceFilter`).
            limit: at most this many rows (1-1000).
            after: the keyset position ``(created_at, id)`` the previous page ended at
                (of a list in the same order).
            oldest_first: ``(created_at, id)`` ascending instead of descending.

        Returns:
            :class:`InstancePage`; ``after`` is set when more rows follow.

        Raises:
            ValueError: ``limit`` out of range, or ``overdue_seconds``/``stuck`` without
                ``now``.
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be 1-1000, not {limit}")
        c = INSTANCE.c
        clauses = filter_clauses(where)
        if after is not None:
            bound = (
                literal(after[0], INSTANCE.c.created_at.type),
                literal(after[1], INSTANCE.c.id.type),
            )
            keyset = tuple_(c.created_at, c.id)
            clauses.append(keyset > tuple_(*bound) if oldest_first else keyset < tuple_(*bound))
        order = (
            (c.created_at.asc(), c.id.asc()) if oldest_first else (c.created_at.desc(), c.id.desc())
        )
        display = display_expression(where)
        columns = (*_SUMMARY, display.label("display_value")) if display is not None else _SUMMARY
        query = select(*columns).where(*clauses).order_by(*order).limit(limit + 1)
        async with self._single(write=False) as conn:
            rows = [_summary(r) for r in await conn.execute(query)]
        more = len(rows) > limit
        rows = rows[:limit]
        position = (rows[-1].created_at, rows[-1].id) if more and rows else None
        return InstancePage(rows, position)

    async def count_instances_by(self, now: datetime, overdue_seconds: float) -> StateCounts:
        """Counts by flow, version and state, plus overdue and stuck totals.

        Args:
            now: the engine-clock instant (aware UTC).
            overdue_seconds: suspended with ``wake_at`` more than this many seconds
                before ``now`` counts as overdue.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        c = INSTANCE.c
        by = (
            select(c.flow_name, c.flow_version, c.state, func.count())
            .group_by(c.flow_name, c.flow_version, c.state)
            .order_by(c.flow_name, c.flow_version, c.state)
        )
        overdue = select(func.count()).where(
            *filter_clauses(InstanceFilter(overdue_seconds=overdue_seconds, now=now))
        )
        stuck = select(func.count()).where(*filter_clauses(InstanceFilter(stuck=True, now=now)))
        async with self._read() as conn:
            rows = (await conn.execute(by)).all()
            overdue_count = int((await conn.execute(overdue)).scalar_one())
            stuck_count = int((await conn.execute(stuck)).scalar_one())
        return StateCounts(
            by_state=[InstanceCount(r[0], r[1], InstanceState(r[2]), int(r[3])) for r in rows],
            overdue=overdue_count,
            stuck=stuck_count,
        )

    async def poll_budget_ends(
        self, pairs: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], datetime]:
        """The stored budget end of each poll: the end of the deadline row in force
        (highest try) at ``(instance_id, poll_step_id)``, scope 0, per pair that has one,
        whether a row of its own or carried by another row (see
        :mod:`flowpark.engine.decide.deadlines`, :mod:`flowpark.store.carried`).

        Args:
            pairs: ``(instance_id, poll_step_id)`` (at most a page's worth).
        """
        wanted = set(pairs)
        found: dict[tuple[str, int], tuple[int, datetime]] = {}
        async with self._read() as conn:
            rows = await stored_deadlines(conn, [i for i, _ in pairs])
        for row in rows:
            key = (row.instance_id, row.step_id)
            if key not in wanted:
                continue
            value = row.values.get(DEADLINE_END_KEY)
            held = found.get(key)
            if isinstance(value, str) and (held is None or row.try_number >= held[0]):
                found[key] = (row.try_number, datetime.fromisoformat(value))
        return {key: end for key, (_, end) in found.items()}

    async def journal_of(self, instance_id: str) -> list[StepRow]:
        """Every journal row of the instance in commit order (empty when unknown)."""
        query = select(STEP).where(STEP.c.instance_id == instance_id).order_by(STEP.c.sequence)
        start = select(INSTANCE.c.id, INSTANCE.c.created_at, INSTANCE.c.carried).where(
            INSTANCE.c.id == instance_id
        )
        async with self._read() as conn:
            instance = (await conn.execute(start)).first()
            if instance is None:
                return []
            return journal_from_rows(await conn.execute(query), instance)
