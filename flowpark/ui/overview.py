"""The overview page's figures: per flow and version counts, and wake lateness percentiles.

Wake lateness is how long after its scheduled instant a poll attempt started. The scheduled
instant of attempt *n* is what the park after attempt *n - 1* asked for: that attempt's
commit plus the poll's interval for *n - 1* (the same seeded jitter as the engine's), never
past the budget's end in force then (an extension counts from when it was written). Only
attempts started in the window count.

An attempt its provider deferred (no budget under its limit, a pushback) was held back by
the provider, not by the sweep: its row says when the last deferral woke it. From the
scheduled instant to that wake is the provider's *deferral*, counted apart; only the rest
(the deferral's wake to the start) is the sweep's lateness.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from flowpark.engine.ports.operator import AttemptStart, FlowActivity
from flowpark.flows.catalog import Catalog
from flowpark.flows.plan import CapabilityStep, PollStep

__all__ = ["FlowRow", "Lateness", "lateness", "overview_rows", "percentile", "split_lateness"]


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values`` by the nearest-rank method, or None when
    empty.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Lateness:
    """Wake lateness over a window: p50 and p99 in seconds (None without samples), the
    sweep's own; and apart, the attempts their provider held back and for how long."""

    samples: int = 0
    p50: float | None = None
    p99: float | None = None
    deferred: int = 0
    deferred_p50: float | None = None
    deferred_p99: float | None = None

    @classmethod
    def of(cls, values: list[float], deferrals: list[float] | None = None) -> Lateness:
        """The percentiles of ``values`` (the sweep's lateness, seconds) and of
        ``deferrals`` (the deferred attempts' deferral, seconds)."""
        held = deferrals or []
        return cls(
            len(values),
            percentile(values, 0.5),
            percentile(values, 0.99),
            len(held),
            percentile(held, 0.5),
            percentile(held, 0.99),
        )


def split_lateness(
    scheduled: datetime, started: datetime, deferred_until: datetime | None
) -> tuple[float, float | None]:
    """``(the sweep's lateness, the provider's deferral or None)`` of an attempt scheduled
    at ``scheduled`` that started at ``started``, whose provider deferred it until
    ``deferred_until`` (None: not deferred), in seconds, never below zero."""
    if deferred_until is None or deferred_until <= scheduled:
        return max(0.0, (started - scheduled).total_seconds()), None
    held = (deferred_until - scheduled).total_seconds()
    return max(0.0, (started - deferred_until).total_seconds()), held


def lateness(
    catalog: Catalog, starts: list[AttemptStart]
) -> tuple[Lateness, dict[tuple[str, str], Lateness]]:
    """Lateness of ``starts`` overall and per (flow, version), in seconds (never below
    zero: an attempt cannot start before the park that asked for it committed).

    Attempts of a flow version this node does not have, or whose schedule is not in the
    journal, are left out.
    """
    overall: list[float] = []
    by_flow: dict[tuple[str, str], list[float]] = {}
    held: list[float] = []
    held_by_flow: dict[tuple[str, str], list[float]] = {}
    for start in starts:
        plan = catalog.find(start.flow_name, start.flow_version)
        if plan is None or start.previous_committed_at is None:
            continue
        if not 0 <= start.step_id < len(plan.steps):
            continue
        body = plan.steps[start.step_id]
        if not isinstance(body, CapabilityStep) or body.poll_index is None:
            continue
        poll = plan.steps[body.poll_index]
        if not isinstance(poll, PollStep):
            continue
        scheduled = start.previous_committed_at + poll.interval.delay(
            start.scope - 1, start.instance_id
        )
        if start.budget_ends_at is not None:  # the end in force then (extended or not)
            scheduled = min(scheduled, start.budget_ends_at)
        elif start.first_started_at is not None:
            scheduled = min(scheduled, start.first_started_at + poll.timeout)
        late, deferral = split_lateness(scheduled, start.started_at, start.deferred_until)
        key = (start.flow_name, start.flow_version)
        overall.append(late)
        by_flow.setdefault(key, []).append(late)
        if deferral is not None:
            held.append(deferral)
            held_by_flow.setdefault(key, []).append(deferral)
    return Lateness.of(overall, held), {
        k: Lateness.of(v, held_by_flow.get(k)) for k, v in by_flow.items()
    }


@dataclass(frozen=True)
class FlowRow:
    """One row of the overview table."""

    flow: str
    version: str
    known: bool
    running: int = 0
    suspended: int = 0
    due_soon: int = 0
    overdue: int = 0
    stuck: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    p50: float | None = None
    p99: float | None = None
    samples: int = 0
    deferred: int = 0
    deferred_p50: float | None = None
    deferred_p99: float | None = None


def overview_rows(
    catalog: Catalog,
    activity: list[FlowActivity],
    late_by_flow: dict[tuple[str, str], Lateness],
) -> list[FlowRow]:
    """A row per flow version with instances or registered here (sorted by flow, version)."""
    seen: dict[tuple[str, str], FlowActivity] = {(a.flow_name, a.flow_version): a for a in activity}
    keys = set(seen) | {p.key for p in catalog.plans()}
    rows = []
    for name, version in sorted(keys):
        a = seen.get((name, version), FlowActivity(name, version))
        late = late_by_flow.get((name, version), Lateness())
        rows.append(
            FlowRow(
                flow=name,
                version=version,
                known=catalog.find(name, version) is not None,
                running=a.running,
                suspended=a.suspended,
                due_soon=a.due_soon,
                overdue=a.overdue,
                stuck=a.stuck,
                completed=a.completed_recently,
                failed=a.failed_recently,
                cancelled=a.cancelled_recently,
                failures=a.failures,
                p50=late.p50,
                p99=late.p99,
                samples=late.samples,
                deferred=late.deferred,
                deferred_p50=late.deferred_p50,
                deferred_p99=late.deferred_p99,
            )
        )
    return rows
