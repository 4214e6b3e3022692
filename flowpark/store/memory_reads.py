"""The in-memory store's reads (:mod:`flowpark.store.memory`): the HTTP API's read model, the
operator's queries and the console overview's counts, over the same state."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from flowpark.engine.decide.deadlines import POLL_BUDGET, ends_at
from flowpark.engine.ports.operator import (
    AttemptStart,
    FlowActivity,
    InstanceCount,
    InstanceFilter,
    InstancePage,
    InstanceSummary,
    OperatorAction,
    RecordedWake,
    StateCounts,
    StepActivity,
    StepWaiting,
    WakeBatch,
    WakeMark,
)
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    InstanceRecord,
    InstanceState,
    Outcome,
    SignalRecord,
    Snapshot,
    StepKind,
    StepRow,
    WakeKind,
)
from flowpark.store.memory_state import RUNNING, SUSPENDED, MemoryBase, copy_json, named_step

__all__ = ["MemoryReads"]


class MemoryReads:
    """:class:`~flowpark.engine.ports.ReadModel`, :class:`~flowpark.engine.ports.OperatorReads` and
    :class:`~flowpark.engine.ports.OverviewReads` over the state of a
    :class:`~flowpark.store.memory.MemoryStore` (composed: the store holds one as its
    ``reads``, ``operator`` and ``overview``).

    Args:
        base: the store's state and fences.
    """

    def __init__(self, base: MemoryBase) -> None:
        self._base = base
        self._s = base._s

    # -- ReadModel ----------------------------------------------------------------------
    async def load(self, instance_id: str) -> Snapshot:
        """See :meth:`flowpark.engine.ports.ReadModel.load`."""
        return self._base._snapshot(instance_id)

    async def get_instance(self, instance_id: str) -> InstanceRecord:
        """See :meth:`flowpark.engine.ports.ReadModel.get_instance`."""
        return self._base._get(instance_id)

    async def list_signals(self, instance_id: str) -> list[SignalRecord]:
        """See :meth:`flowpark.engine.ports.ReadModel.list_signals`."""
        return list(self._s.signals.get(instance_id, []))

    async def list_reviews(self, limit: int = 100) -> list[dict[str, Any]]:
        """See :meth:`flowpark.engine.ports.ReadModel.list_reviews`."""
        return [dict(r) for r in self._s.reviews[:limit]]

    async def list_events(
        self, limit: int = 100, after_sequence: int | None = None
    ) -> list[dict[str, Any]]:
        """See :meth:`flowpark.engine.ports.ReadModel.list_events`."""
        events = [
            dict(e)
            for e in self._s.events
            if after_sequence is None or e["sequence"] > after_sequence
        ]
        return events[:limit]

    async def count_instances(self, state: InstanceState | str | None = None) -> int:
        """See :meth:`flowpark.engine.ports.ReadModel.count_instances`."""
        wanted = InstanceState(state) if state is not None else None
        return sum(1 for i in self._s.instances.values() if wanted is None or i.state is wanted)

    async def next_wake(self, after: datetime | None = None) -> datetime | None:
        """See :meth:`flowpark.engine.ports.ReadModel.next_wake`."""
        wakes = [
            i.wake_at
            for i in self._s.instances.values()
            if i.state is SUSPENDED and i.wake_at is not None
            if after is None or i.wake_at > after
        ]
        return min(wakes, default=None)

    async def ping(self) -> None:
        """Always answers (see :meth:`flowpark.engine.ports.ReadModel.ping`)."""

    # -- OperatorReads ------------------------------------------------------------------
    def _matches(self, i: InstanceRecord, where: InstanceFilter) -> bool:
        if (where.overdue_seconds is not None or where.stuck) and where.now is None:
            raise ValueError("InstanceFilter.now is required with overdue_seconds or stuck")
        code = i.failure.code if i.failure is not None else None
        checks = [
            where.flow is None or i.flow_name == where.flow,
            where.version is None or i.flow_version == where.version,
            not where.states or i.state in {InstanceState(s) for s in where.states},
            where.error_code is None or code == where.error_code,
            not where.compensation_failed
            or bool(i.failure is not None and i.failure.details.get(COMPENSATION_FAILURES)),
            where.waiting is None or (i.state is SUSPENDED and i.wake_kind == where.waiting),
            where.instance_key is None or i.instance_key == where.instance_key,
            where.created_after is None or i.created_at > where.created_after,
            where.created_before is None or i.created_at < where.created_before,
            where.id_prefix is None or i.id.startswith(where.id_prefix),
            where.display_value is None or _display(i, where) == where.display_value,
        ]
        if where.overdue_seconds is not None:
            assert where.now is not None
            limit = where.now - timedelta(seconds=where.overdue_seconds)
            checks.append(i.state is SUSPENDED and i.wake_at is not None and i.wake_at < limit)
        if where.stuck:
            assert where.now is not None
            checks.append(
                i.state is RUNNING
                and i.lease_expires_at is not None
                and i.lease_expires_at < where.now
            )
        return all(checks)

    async def list_instances(
        self,
        where: InstanceFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        oldest_first: bool = False,
    ) -> InstancePage:
        """See :meth:`flowpark.engine.ports.OperatorReads.list_instances`."""
        if not 1 <= limit <= 1000:
            raise ValueError(f"limit must be 1-1000, not {limit}")
        found = sorted(
            (i for i in self._s.instances.values() if self._matches(i, where)),
            key=lambda i: (i.created_at, i.id),
            reverse=not oldest_first,
        )
        if after is not None:
            found = [
                i
                for i in found
                if ((i.created_at, i.id) > after if oldest_first else (i.created_at, i.id) < after)
            ]
        rows = [_summary(i, _display(i, where)) for i in found[: limit + 1]]
        more = len(rows) > limit
        rows = rows[:limit]
        return InstancePage(rows, (rows[-1].created_at, rows[-1].id) if more and rows else None)

    async def count_instances_by(self, now: datetime, overdue_seconds: float) -> StateCounts:
        """See :meth:`flowpark.engine.ports.OperatorReads.count_instances_by`."""
        counts: dict[tuple[str, str, str], int] = {}
        for i in self._s.instances.values():
            key = (i.flow_name, i.flow_version, i.state.value)
            counts[key] = counts.get(key, 0) + 1
        overdue = InstanceFilter(overdue_seconds=overdue_seconds, now=now)
        stuck = InstanceFilter(stuck=True, now=now)
        return StateCounts(
            by_state=[
                InstanceCount(f, v, InstanceState(s), n) for (f, v, s), n in sorted(counts.items())
            ],
            overdue=await self.count_matching(overdue),
            stuck=await self.count_matching(stuck),
        )

    async def poll_budget_ends(
        self, pairs: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], datetime]:
        """See :meth:`flowpark.engine.ports.OperatorReads.poll_budget_ends`."""
        ends: dict[tuple[str, int], datetime] = {}
        for instance_id, step_id in pairs:
            rows = [
                r
                for r in self._s.steps.get(instance_id, [])
                if r.step_id == step_id and r.scope == 0 and r.kind == StepKind.DEADLINE
            ]
            rows.sort(key=lambda r: r.try_number)
            for r in rows:
                value = (r.values or {}).get("endsAt")
                if isinstance(value, str):
                    ends[(instance_id, step_id)] = datetime.fromisoformat(value)
        return ends

    async def record_action(self, action: OperatorAction) -> tuple[OperatorAction, bool]:
        """See :meth:`flowpark.engine.ports.OperatorReads.record_action`."""
        if action.idempotency_key is not None:
            first = await self.find_action(
                action.instance_id, action.action, action.idempotency_key
            )
            if first is not None:
                return first, False
        self._s.actions.append(replace(action, details=copy_json(dict(action.details))))
        return action, True

    async def complete_action(self, action: OperatorAction) -> bool:
        """See :meth:`flowpark.engine.ports.OperatorReads.complete_action`."""
        for n, a in enumerate(self._s.actions):
            if a.id == action.id and a.acted_at == action.acted_at:
                self._s.actions[n] = replace(a, details=copy_json(dict(action.details)))
                return True
        return False

    async def retake_action(self, seen: OperatorAction, fresh: OperatorAction) -> bool:
        """See :meth:`flowpark.engine.ports.OperatorReads.retake_action`."""
        for n, a in enumerate(self._s.actions):
            if a.id == seen.id and a.acted_at == seen.acted_at:
                self._s.actions[n] = replace(
                    a,
                    actor=fresh.actor,
                    acted_at=fresh.acted_at,
                    details=copy_json(dict(fresh.details)),
                )
                return True
        return False

    async def find_action(
        self, instance_id: str, action: str, idempotency_key: str
    ) -> OperatorAction | None:
        """See :meth:`flowpark.engine.ports.OperatorReads.find_action`."""
        return next(
            (
                a
                for a in self._s.actions
                if (a.instance_id, a.action, a.idempotency_key)
                == (instance_id, action, idempotency_key)
            ),
            None,
        )

    async def record_wakes(self, batch: WakeBatch) -> list[RecordedWake]:
        """See :meth:`flowpark.engine.ports.OperatorReads.record_wakes` (no other
        transaction holds a row here)."""
        done: list[RecordedWake] = []
        for action in batch.actions:
            key = action.idempotency_key
            first = await self.find_action(action.instance_id, "wake", key) if key else None
            if first is not None:
                done.append(RecordedWake(action.instance_id, None, first))
                continue
            inst = self._s.instances.get(action.instance_id)
            mark = WakeMark(action.instance_id, None)
            if inst is not None:
                mark = WakeMark(inst.id, inst.state, inst.wake_kind)
                if (
                    inst.id not in batch.unmarked
                    and inst.state is SUSPENDED
                    and inst.wake_kind is not WakeKind.SIGNAL
                ):
                    due = batch.at if inst.wake_at is None else min(inst.wake_at, batch.at)
                    self._base._put(inst, woken=True, wake_at=due, updated_at=batch.at)
                    mark = replace(mark, marked=True, wake_at=due)
            details = batch.details(mark)
            record = None
            if details is not None:
                record = replace(action, details=copy_json(dict(details)))
                self._s.actions.append(record)
            done.append(RecordedWake(action.instance_id, mark, record))
        return done

    async def actions_of(self, instance_id: str) -> list[OperatorAction]:
        """See :meth:`flowpark.engine.ports.OperatorReads.actions_of` (in the order recorded,
        as the SQL store's sequence: a retaken record keeps its place)."""
        return [a for a in self._s.actions if a.instance_id == instance_id]

    async def count_matching(self, where: InstanceFilter) -> int:
        """See :meth:`flowpark.engine.ports.OperatorReads.count_matching`."""
        return sum(1 for i in self._s.instances.values() if self._matches(i, where))

    async def journal_of(self, instance_id: str) -> list[StepRow]:
        """See :meth:`flowpark.engine.ports.OperatorReads.journal_of`."""
        return list(self._s.steps.get(instance_id, []))

    # -- OverviewReads ------------------------------------------------------------------
    async def flow_activity(
        self, now: datetime, *, overdue: timedelta, due_within: timedelta, since: datetime
    ) -> list[FlowActivity]:
        """See :meth:`flowpark.engine.ports.OverviewReads.flow_activity`."""
        by: dict[tuple[str, str], dict[str, Any]] = {}
        for i in self._s.instances.values():
            a = by.setdefault((i.flow_name, i.flow_version), {"failures": {}})
            if i.state is RUNNING:
                a["running"] = a.get("running", 0) + 1
                if i.lease_expires_at is not None and i.lease_expires_at < now:
                    a["stuck"] = a.get("stuck", 0) + 1
            elif i.state is SUSPENDED:
                a["suspended"] = a.get("suspended", 0) + 1
                if i.wake_at is not None and i.wake_at < now - overdue:
                    a["overdue"] = a.get("overdue", 0) + 1
                elif i.wake_at is not None and i.wake_at <= now + due_within:
                    a["due_soon"] = a.get("due_soon", 0) + 1
            elif i.updated_at >= since and i.state is InstanceState.COMPLETED:
                a["completed_recently"] = a.get("completed_recently", 0) + 1
            elif i.updated_at >= since and i.state is InstanceState.CANCELLED:
                a["cancelled_recently"] = a.get("cancelled_recently", 0) + 1
            elif i.updated_at >= since and i.state is InstanceState.FAILED:
                a["failed_recently"] = a.get("failed_recently", 0) + 1
                code = i.failure.code if i.failure is not None else ""
                a["failures"][code] = a["failures"].get(code, 0) + 1
        return [
            FlowActivity(
                name,
                version,
                **{k: v for k, v in a.items() if k != "failures"},
                failures=tuple(sorted(a["failures"].items())),
            )
            for (name, version), a in sorted(by.items())
        ]

    async def waiting_by_step(
        self, flow_name: str | None = None, flow_version: str | None = None
    ) -> list[StepWaiting]:
        """See :meth:`flowpark.engine.ports.OverviewReads.waiting_by_step`."""
        counts: dict[tuple[str, str, int], int] = {}
        for i in self._s.instances.values():
            if i.state is not SUSPENDED or i.wake_step_id is None:
                continue
            if flow_name is not None and i.flow_name != flow_name:
                continue
            if flow_version is not None and i.flow_version != flow_version:
                continue
            key = (i.flow_name, i.flow_version, i.wake_step_id)
            counts[key] = counts.get(key, 0) + 1
        return [StepWaiting(f, v, s, n) for (f, v, s), n in sorted(counts.items())]

    async def step_activity(
        self, flow_name: str, flow_version: str, since: datetime
    ) -> StepActivity:
        """See :meth:`flowpark.engine.ports.OverviewReads.step_activity`."""
        running: dict[int, int] = {}
        failed: dict[int, int] = {}
        completed = 0
        for i in self._s.instances.values():
            if (i.flow_name, i.flow_version) != (flow_name, flow_version):
                continue
            at = i.try_step_id if i.try_step_id is not None else i.wake_step_id
            if i.state is RUNNING and at is not None:
                running[at] = running.get(at, 0) + 1
            elif i.updated_at >= since and i.state is InstanceState.COMPLETED:
                completed += 1
            elif i.updated_at >= since and i.state is InstanceState.FAILED:
                node = named_step(i.failure.details) if i.failure is not None else None
                if node is None:
                    steps = [r for r in self._s.steps.get(i.id, []) if r.kind == StepKind.STEP]
                    node = steps[-1].step_id if steps else None
                if node is not None:
                    failed[node] = failed.get(node, 0) + 1
        return StepActivity(running=running, completed=completed, failed=failed)

    async def attempt_starts(self, since: datetime) -> list[AttemptStart]:
        """See :meth:`flowpark.engine.ports.OverviewReads.attempt_starts`."""
        out = []
        for instance_id, rows in self._s.steps.items():
            inst = self._s.instances[instance_id]
            steps = [r for r in rows if r.kind == StepKind.STEP]
            firsts: dict[tuple[int, int], StepRow] = {}
            for r in steps:
                firsts.setdefault((r.step_id, r.scope), r)
            for (step_id, scope), first in firsts.items():
                if scope == 0 or first.started_at < since:
                    continue
                previous = next(
                    (
                        r.committed_at
                        for r in reversed(steps)
                        if (r.step_id, r.scope) == (step_id, scope - 1)
                        and r.outcome is Outcome.SUCCESS
                    ),
                    None,
                )
                zero = firsts.get((step_id, 0))
                budgets = [  # the poll's budget rows written by the previous attempt's end
                    r
                    for r in rows
                    if r.kind == StepKind.DEADLINE
                    and (r.step_id, r.scope, r.capability_id) == (step_id - 1, 0, POLL_BUDGET)
                    and previous is not None
                    and r.committed_at <= previous
                ]
                in_force = max(budgets, key=lambda r: r.try_number) if budgets else None
                out.append(
                    AttemptStart(
                        instance_id,
                        inst.flow_name,
                        inst.flow_version,
                        step_id,
                        scope,
                        first.started_at,
                        previous,
                        zero.started_at if zero is not None else None,
                        ends_at(in_force) if in_force is not None else None,
                        first.deferred_until,
                        first.deferred_by,
                    )
                )
        return sorted(out, key=lambda a: a.started_at, reverse=True)


def _display(i: InstanceRecord, where: InstanceFilter) -> str | None:
    """The display key's value of ``i`` (its flow version's declared input field, as
    text), or None."""
    for flow, version, name in where.display_fields:
        if (i.flow_name, i.flow_version) == (flow, version):
            value = i.input.get(name)
            if value is None:
                return None
            return value if isinstance(value, str) else json.dumps(value)
    return None


def _summary(i: InstanceRecord, display_value: str | None = None) -> InstanceSummary:
    return InstanceSummary(
        id=i.id,
        flow_name=i.flow_name,
        flow_version=i.flow_version,
        state=i.state,
        created_at=i.created_at,
        updated_at=i.updated_at,
        wake_at=i.wake_at,
        wake_kind=i.wake_kind,
        wake_step_id=i.wake_step_id,
        wake_scope=i.wake_scope,
        deadline_at=i.deadline_at,
        lease_expires_at=i.lease_expires_at,
        error_code=i.failure.code if i.failure is not None else None,
        instance_key=i.instance_key,
        cancel_requested=i.cancel_requested,
        display_value=display_value,
        ending=i.ending,
    )
