"""SQL of the overview reads (:class:`flowpark.engine.ports.operator.OverviewReads`): per flow and
version, what waits, what is late, what ended; where instances wait; recent attempt starts.

Every instant passed in is the engine clock's (aware UTC), never the database's ``now()``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import and_, case, func, select
from sqlalchemy.sql.elements import ColumnElement

from flowpark.engine.decide.deadlines import POLL_BUDGET
from flowpark.engine.ports.operator import AttemptStart, FlowActivity, StepActivity, StepWaiting
from flowpark.engine.records import InstanceState, Outcome, StepKind, StepRow
from flowpark.store.base import SqlRole, const
from flowpark.store.mapping import INSTANCE, STEP, stored_deadlines
from flowpark.store.memory_state import named_step

__all__ = ["SqlOverviewReads"]

_SUSPENDED = InstanceState.SUSPENDED.value
_RUNNING = InstanceState.RUNNING.value
#: Most attempt starts one lateness read returns (the newest).
MAX_ATTEMPT_STARTS = 5000
#: Most recently failed instances one step activity read places on the graph.
MAX_RECENT_FAILED = 2000


class SqlOverviewReads(SqlRole):
    """Grouped counts for the console's overview and flow pages (each one snapshot)."""

    async def flow_activity(
        self, now: datetime, *, overdue: timedelta, due_within: timedelta, since: datetime
    ) -> list[FlowActivity]:
        """Per flow and version (sorted), the counts of :class:`FlowActivity`.

        Args:
            now: the engine-clock instant (aware UTC).
            overdue: how late a wake must be to count as overdue.
            due_within: how far ahead ``due_soon`` looks.
            since: the start of the "recently" window (aware UTC).

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        c = INSTANCE.c
        late_before = now - overdue
        suspended = c.state == const(_SUSPENDED)

        def count(condition: ColumnElement[bool]) -> ColumnElement[int]:
            return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)

        counts = (
            select(
                c.flow_name,
                c.flow_version,
                count(c.state == const(_RUNNING)),
                count(suspended),
                count(and_(suspended, c.wake_at >= late_before, c.wake_at < now + due_within)),
                count(and_(suspended, c.wake_at < late_before)),
                count(and_(c.state == const(_RUNNING), c.lease_expires_at < now)),
                count(and_(c.state == const(InstanceState.COMPLETED.value), c.updated_at >= since)),
                count(and_(c.state == const(InstanceState.FAILED.value), c.updated_at >= since)),
                count(and_(c.state == const(InstanceState.CANCELLED.value), c.updated_at >= since)),
            )
            .group_by(c.flow_name, c.flow_version)
            .order_by(c.flow_name, c.flow_version)
        )
        failures = (
            select(c.flow_name, c.flow_version, c.error_code, func.count())
            .where(
                c.state == const(InstanceState.FAILED.value),
                c.updated_at >= since,
                c.error_code.is_not(None),
            )
            .group_by(c.flow_name, c.flow_version, c.error_code)
            .order_by(func.count().desc(), c.error_code)
        )
        async with self._read() as conn:
            rows = (await conn.execute(counts)).all()
            failed = (await conn.execute(failures)).all()
        by_flow: dict[tuple[str, str], list[tuple[str, int]]] = {}
        for name, version, code, n in failed:
            by_flow.setdefault((name, version), []).append((code, int(n)))
        return [
            FlowActivity(
                r[0],
                r[1],
                running=int(r[2]),
                suspended=int(r[3]),
                due_soon=int(r[4]),
                overdue=int(r[5]),
                stuck=int(r[6]),
                completed_recently=int(r[7]),
                failed_recently=int(r[8]),
                cancelled_recently=int(r[9]),
                failures=tuple(by_flow.get((r[0], r[1]), ())),
            )
            for r in rows
        ]

    async def waiting_by_step(
        self, flow_name: str | None = None, flow_version: str | None = None
    ) -> list[StepWaiting]:
        """Suspended instances per flow version and the plan step they wait at
        (``wake_step_id``), optionally of one flow (and version) only.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        c = INSTANCE.c
        query = select(c.flow_name, c.flow_version, c.wake_step_id, func.count()).where(
            c.state == const(_SUSPENDED), c.wake_step_id.is_not(None)
        )
        if flow_name is not None:
            query = query.where(c.flow_name == flow_name)
        if flow_version is not None:
            query = query.where(c.flow_version == flow_version)
        query = query.group_by(c.flow_name, c.flow_version, c.wake_step_id)
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        return [StepWaiting(r[0], r[1], int(r[2]), int(r[3])) for r in rows]

    async def step_activity(
        self, flow_name: str, flow_version: str, since: datetime
    ) -> StepActivity:
        """Where one flow version's instances are and ended: running by the step their try
        in flight runs (``try_step_id``; else the step it was resumed at), completed since
        ``since``, and failed since ``since`` by the step they failed at (the failure's
        ``node``, else the step of its last execution; at most :data:`MAX_RECENT_FAILED`
        are placed).

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        c = INSTANCE.c
        mine = and_(c.flow_name == flow_name, c.flow_version == flow_version)
        at = func.coalesce(c.try_step_id, c.wake_step_id)
        running = (
            select(at, func.count())
            .where(mine, c.state == const(_RUNNING), at.is_not(None))
            .group_by(at)
        )
        completed = select(func.count()).where(
            mine, c.state == const(InstanceState.COMPLETED.value), c.updated_at >= since
        )
        failed = (
            select(c.id, c.error_details)
            .where(mine, c.state == const(InstanceState.FAILED.value), c.updated_at >= since)
            .limit(MAX_RECENT_FAILED)
        )
        async with self._read() as conn:
            by_step = {int(r[0]): int(r[1]) for r in await conn.execute(running)}
            done = int((await conn.execute(completed)).scalar_one())
            failures = (await conn.execute(failed)).all()
            placed: dict[int, int] = {}
            unplaced = []
            for instance_id, details in failures:
                node = named_step(details)
                if node is not None:
                    placed[node] = placed.get(node, 0) + 1
                else:
                    unplaced.append(instance_id)
            if unplaced:
                last = (
                    select(STEP.c.instance_id, STEP.c.step_id)
                    .where(
                        STEP.c.instance_id.in_(unplaced),
                        STEP.c.kind == const(StepKind.STEP.value),
                    )
                    .order_by(STEP.c.instance_id, STEP.c.sequence.desc())
                )
                seen: set[str] = set()
                for instance_id, step_id in await conn.execute(last):
                    if instance_id not in seen:
                        seen.add(instance_id)
                        placed[int(step_id)] = placed.get(int(step_id), 0) + 1
        return StepActivity(running=by_step, completed=done, failed=placed)

    async def attempt_starts(self, since: datetime) -> list[AttemptStart]:
        """Poll attempts after the first (scope > 0) whose first try started at or after
        ``since``, newest first (at most :data:`MAX_ATTEMPT_STARTS`), each with the commit
        of the attempt before it and the start of attempt 0.

        Raises:
            StoreUnavailable: the database could not be reached (``store_unavailable``).
        """
        s = STEP.alias("s")
        prev = STEP.alias("p")
        first = STEP.alias("f")
        step = const(StepKind.STEP.value)
        query = (
            select(
                s.c.instance_id,
                INSTANCE.c.flow_name,
                INSTANCE.c.flow_version,
                s.c.step_id,
                s.c.scope,
                s.c.started_at,
                prev.c.committed_at,
                first.c.started_at,
                s.c.deferred_until,
                s.c.deferred_by,
            )
            .join(INSTANCE, INSTANCE.c.id == s.c.instance_id)
            .outerjoin(
                prev,
                and_(
                    prev.c.instance_id == s.c.instance_id,
                    prev.c.step_id == s.c.step_id,
                    prev.c.scope == s.c.scope - 1,
                    prev.c.kind == step,
                    prev.c.outcome == const(Outcome.SUCCESS.value),
                ),
            )
            .outerjoin(
                first,
                and_(
                    first.c.instance_id == s.c.instance_id,
                    first.c.step_id == s.c.step_id,
                    first.c.scope == 0,
                    first.c.kind == step,
                    first.c.try_number == 1,
                ),
            )
            .where(s.c.kind == step, s.c.scope > 0, s.c.try_number == 1, s.c.started_at >= since)
            .order_by(s.c.started_at.desc())
            .limit(MAX_ATTEMPT_STARTS)
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        ends = await self._poll_budgets(sorted({r[0] for r in rows}))
        return [
            AttemptStart(
                *r[:8],
                budget_ends_at=_in_force(ends, r[0], r[3] - 1, r[6]),
                deferred_until=r[8],
                deferred_by=r[9],
            )
            for r in rows
        ]

    async def _poll_budgets(self, ids: list[str]) -> dict[tuple[str, int], list[StepRow]]:
        """The poll budget rows of ``ids`` (rows of their own or carried), by
        ``(instance_id, poll step)``."""
        found: dict[tuple[str, int], list[StepRow]] = {}
        async with self._read() as conn:
            for row in await stored_deadlines(conn, ids):
                if row.capability_id == POLL_BUDGET:
                    found.setdefault((row.instance_id, row.step_id), []).append(row)
        return found


def _in_force(
    ends: dict[tuple[str, int], list[StepRow]], instance_id: str, poll: int, at: datetime | None
) -> datetime | None:
    """The poll's budget end in force at ``at`` (the row with the highest try committed
    by then), or None."""
    if at is None:
        return None
    held = [r for r in ends.get((instance_id, poll), ()) if r.committed_at <= at]
    if not held:
        return None
    return datetime.fromisoformat(max(held, key=lambda r: r.try_number).values["endsAt"])
