"""The instance page's attempt timeline, laid out for SVG.

Input is the operator read model's attempts (:func:`flowpark.api.explain.attempts_view`: one
entry per poll attempt with its scheduled and actual instants, lateness, duration, outcome
and tries). Each attempt is one row: a hollow mark at the instant it was scheduled, a dashed
line to the instant it started (its lateness), and a bar as long as it ran, coloured by its
outcome; an attempt its provider deferred has a solid amber line first, from its scheduled
instant to the end of the deferral (the provider's time, not the sweep's). A parked
instance's next attempt is a hollow mark at its wake; a line marks now.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

__all__ = [
    "ActionMark",
    "Timeline",
    "TimelineRow",
    "build_timeline",
    "held_by",
    "parse_instant",
]

WIDTH = 1000.0
LEFT = 90.0  # room for the row labels
RIGHT = 20.0
ROW_H = 26.0
TOP = 16.0
AXIS_H = 28.0
LANE_H = 14.0  # one lane of operator-action labels
CHAR_W = 6.4  # the width of a label's character at 11 px, about
_ANCHORS = {0: "start", 5: "end"}


def parse_instant(value: str | None) -> datetime | None:
    """An API instant (``...Z``) as an aware datetime, or None."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@dataclass(frozen=True)
class TimelineRow:
    """One attempt (or the next one) placed on the chart (SVG user units)."""

    attempt: int
    outcome: str  # success, failure, retrying, signal, next
    y: float
    scheduled_x: float | None
    start_x: float | None
    end_x: float | None
    tip: str
    tries: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    deferred_x: float | None = None  # where its provider's deferral ended


@dataclass(frozen=True)
class ActionMark:
    """An operator action (wake, extend, cancel) as a vertical mark at its instant."""

    action: str
    actor: str
    x: float
    tip: str
    outcome: str = "done"  # done, refused or pending (the history's ``outcome``)
    label_y: float = 0.0  # its label's baseline, in a lane below the axis (no overlap)

    @property
    def label(self) -> str:
        """The label drawn at the mark: the action and who did it."""
        return f"{self.action} · {self.actor}"


@dataclass(frozen=True)
class Timeline:
    """The chart: rows, axis ticks ``(x, label, text-anchor)``, the now line (None once the
    instance ended), the operator actions and the size."""

    rows: list[TimelineRow]
    ticks: list[tuple[float, str, str]]
    now_x: float | None
    width: float
    height: float
    axis_y: float
    actions: list[ActionMark] = field(default_factory=list)


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f} s"


def _tip(attempt: dict[str, Any]) -> str:
    lines = [f"attempt {attempt['attempt']}: {attempt['outcome']}"]
    if attempt.get("scheduledAt"):
        lines.append(f"scheduled {attempt['scheduledAt']}")
    lines.append(f"started {attempt.get('startedAt')}")
    if attempt.get("deferredSeconds") is not None:
        lines.append(f"deferred {_seconds(attempt['deferredSeconds'])} by {held_by(attempt)}")
    lines.append(f"lateness {_seconds(attempt.get('latenessSeconds'))}")
    lines.append(f"duration {_seconds(attempt.get('durationSeconds'))}")
    if attempt.get("signal"):
        lines.append(f"ended by signal {attempt['signal']}")
    for t in attempt.get("tries") or ():
        error = t.get("error")
        text = f"{error['type']}: {error['detail']}" if error else t.get("outcome", "")
        lines.append(f"try {t['try']}: {text}")
    return "\n".join(lines)


def held_by(attempt: dict[str, Any]) -> str:
    """What deferred the attempt, for people: ``provider ocr's limit``, ``provider ocr's
    pushback`` (``its provider's`` when the attempt names none)."""
    who = f"provider {attempt['provider']}'s" if attempt.get("provider") else "its provider's"
    return f"{who} {'pushback' if attempt.get('deferredBy') == 'pushback' else 'limit'}"


def _fate(action: dict[str, Any]) -> str:
    """What came of an action, for its mark's tip (nothing when it acted)."""
    if action.get("outcome") == "refused":
        return f": refused ({action.get('code')})"
    if action.get("outcome") == "pending":
        return ": no outcome recorded (in progress, or its request was lost)"
    return ""


def build_timeline(
    attempts: list[dict[str, Any]],
    now: datetime,
    next_wake: datetime | None,
    next_attempt: int | None,
    *,
    actions: list[dict[str, Any]] | None = None,
    ended_at: datetime | None = None,
) -> Timeline | None:
    """Lay out ``attempts`` (and the next attempt at ``next_wake``) on a time axis that
    ends at ``now`` or the next wake, whichever is later; for an instance that ended
    (``ended_at``), at its end, with no now line. ``actions`` (the operator's history:
    ``action``, ``actor``, ``actedAt``) are marked at their instants. None when there is
    nothing to draw.
    """
    if ended_at is not None:
        now, next_wake = ended_at, None
    acted = [(a, parse_instant(a.get("actedAt"))) for a in actions or ()]
    instants: list[datetime] = []
    for a in attempts:
        for key in ("scheduledAt", "startedAt"):
            value = parse_instant(a.get(key))
            if value is not None:
                instants.append(value)
    if not instants:
        return None
    for a in attempts:
        begun = parse_instant(a.get("startedAt"))
        if begun is not None:
            instants.append(begun + timedelta(seconds=float(a.get("durationSeconds") or 0.0)))
    start = min(instants)
    later = [x for x in (now, next_wake) if x is not None]
    later += [at for _, at in acted if at is not None]
    end = max(instants + later)
    span = max((end - start).total_seconds(), 1.0)
    start -= timedelta(seconds=span * 0.02)
    span *= 1.04
    scale = (WIDTH - LEFT - RIGHT) / span

    def x_of(instant: datetime | None) -> float | None:
        if instant is None:
            return None
        return LEFT + (instant - start).total_seconds() * scale

    rows: list[TimelineRow] = []
    for i, a in enumerate(attempts):
        begun = parse_instant(a.get("startedAt"))
        finished = (
            begun + timedelta(seconds=float(a.get("durationSeconds") or 0.0))
            if begun is not None
            else None
        )
        rows.append(
            TimelineRow(
                attempt=int(a["attempt"]),
                outcome=str(a["outcome"]),
                y=TOP + i * ROW_H,
                scheduled_x=x_of(parse_instant(a.get("scheduledAt"))),
                start_x=x_of(begun),
                end_x=x_of(finished),
                tip=_tip(a),
                tries=list(a.get("tries") or ()),
                data=a,
                deferred_x=x_of(_deferral_end(a)),
            )
        )
    if next_wake is not None and next_attempt is not None:
        rows.append(
            TimelineRow(
                attempt=next_attempt,
                outcome="next",
                y=TOP + len(rows) * ROW_H,
                scheduled_x=x_of(next_wake),
                start_x=None,
                end_x=None,
                tip=f"attempt {next_attempt}: due {next_wake.isoformat()}",
            )
        )
    axis_y = TOP + len(rows) * ROW_H + 4
    ticks = []
    for k in range(6):
        at = start + timedelta(seconds=span * k / 5)
        label = at.strftime("%H:%M:%S") if span < 86400 else at.strftime("%m-%d %H:%M")
        ticks.append((LEFT + (WIDTH - LEFT - RIGHT) * k / 5, label, _ANCHORS.get(k, "middle")))
    marks = [
        ActionMark(
            action=str(a.get("action")),
            actor=str(a.get("actor")),
            x=x,
            tip=f"{a.get('action')} by {a.get('actor')} at {a.get('actedAt')}" + _fate(a),
            outcome=str(a.get("outcome") or "done"),
        )
        for a, at in acted
        if (x := x_of(at)) is not None
    ]
    marks, lanes = _in_lanes(marks, axis_y + AXIS_H + LANE_H)
    now_x = None if ended_at is not None else x_of(now)
    height = axis_y + AXIS_H + lanes * LANE_H + (6 if lanes else 0)
    return Timeline(rows, ticks, now_x, WIDTH, height, axis_y, marks)


def _deferral_end(attempt: dict[str, Any]) -> datetime | None:
    """When the provider's deferral of ``attempt`` ended (its scheduled instant plus the
    deferral), or None when it was not deferred."""
    scheduled = parse_instant(attempt.get("scheduledAt"))
    held = attempt.get("deferredSeconds")
    if scheduled is None or held is None:
        return None
    return scheduled + timedelta(seconds=float(held))


def _in_lanes(marks: list[ActionMark], top: float) -> tuple[list[ActionMark], int]:
    """The marks with their labels placed in lanes below the axis, left to right, each in
    the first lane where it does not overlap the label before it (about :data:`CHAR_W`
    units a character): actions seconds apart stack instead of overprinting. Returns the
    marks and the number of lanes used."""
    ends: list[float] = []
    placed = []
    for mark in sorted(marks, key=lambda m: m.x):
        lane = next((i for i, end in enumerate(ends) if end < mark.x), len(ends))
        right = mark.x + 3 + CHAR_W * len(mark.label) + 6
        if lane == len(ends):
            ends.append(right)
        else:
            ends[lane] = right
        placed.append(replace(mark, label_y=top + lane * LANE_H))
    return placed, len(ends)
