"""Wake lateness on the overview: from the previous attempt's commit and the poll's schedule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flowpark.engine.ports.operator import AttemptStart, FlowActivity
from flowpark.flows import Catalog
from flowpark.ui.overview import lateness, overview_rows
from tests.engine.flows import poll_flow

T0 = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)


def _catalog() -> Catalog:
    catalog = Catalog()
    catalog.register(poll_flow())  # t.poll: 1 min fixed interval, 10 min budget; body node 2
    return catalog


def _start(
    scope: int, started: datetime, previous: datetime | None, flow: str = "t.poll"
) -> AttemptStart:
    return AttemptStart("i-1", flow, "1.0.0", 2, scope, started, previous, T0)


def test_lateness_is_the_start_after_the_scheduled_wake() -> None:
    starts = [
        _start(1, T0 + timedelta(seconds=62.5), T0 + timedelta(seconds=1)),  # 1.5 s late
        _start(2, T0 + timedelta(seconds=130), T0 + timedelta(seconds=65)),  # 5 s late
        _start(3, T0 + timedelta(seconds=190), T0 + timedelta(seconds=131)),  # 1 s early: 0
        _start(4, T0 + timedelta(seconds=300), None),  # schedule unknown: left out
        _start(1, T0 + timedelta(seconds=99), T0, flow="other.flow"),  # not on this node
    ]
    overall, by_flow = lateness(_catalog(), starts)

    assert overall.samples == 3
    assert overall.p50 == 1.5
    assert overall.p99 == 5.0
    assert by_flow[("t.poll", "1.0.0")] == overall
    assert ("other.flow", "1.0.0") not in by_flow


def test_the_budget_end_caps_the_scheduled_wake() -> None:
    # after a commit at 9:30 the next wake would be 10:30, past the 10 min budget: 10:00
    late = _start(9, T0 + timedelta(minutes=10, seconds=4), T0 + timedelta(minutes=9, seconds=30))
    overall, _ = lateness(_catalog(), [late])
    assert overall.p50 == 4.0


def test_the_overview_lists_registered_flows_and_unknown_versions() -> None:
    activity = [FlowActivity("t.poll", "0.9.0", suspended=3, overdue=2)]
    rows = overview_rows(_catalog(), activity, {})
    assert [(r.flow, r.version, r.known, r.suspended) for r in rows] == [
        ("t.poll", "0.9.0", False, 3),
        ("t.poll", "1.0.0", True, 0),
    ]
