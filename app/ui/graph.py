"""A compiled plan laid out as a graph for the console's flow page (drawn as SVG).

Plans point strictly forward, so box order is already a topological order: each box gets
the row of its index, and a column by the edges that reach it - the main path (``next``, a
satisfied wait, a poll's body) stays in its parent's column, a branch (``on_timeout``,
``on_failure``) moves one column right. Compensations sit in a column of their own, on the
row of the step they undo. Reaching one past the last box completes the instance: it is
drawn as the ``end`` box; a poll without ``on_timeout`` gets a ``fail`` box of its own for
``flow.poll_not_satisfied``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from app.flows.durations import Backoff
from app.flows.plan import AwaitSignalStep, CapabilityStep, EmitStep, FailStep, Plan, PollStep, Step

__all__ = ["Graph", "GraphEdge", "GraphBox", "describe_backoff", "human_duration", "layout"]

BOX_W = 250
BOX_H = 58
COL_W = 300
ROW_H = 92
MARGIN_X = 220  # room on the left for the loop and skip edges and their labels
MARGIN_Y = 30

#: Step kinds (the SVG's ``data-kind`` and CSS class).
KINDS = ("capability", "poll", "attempt", "await", "fail", "emit", "end", "compensation")


@dataclass(frozen=True)
class GraphBox:
    """One drawn step.

    Attributes:
        key: stable id within the graph (``"3"`` for plan box 3, ``"end"``,
            ``"comp-0"`` for the compensation of box 0, ``"timeout-1"`` for the implicit
            failure of poll 1).
        index: the plan box index, or None for drawn-only boxes (end, compensations,
            implicit failures).
        kind: one of :data:`KINDS`.
        title: the main label (capability id, ``poll``, ``fail <code>``).
        details: smaller lines under the title (schedule, budget, message).
        waiting: suspended instances waiting at this box (plan boxes only).
    """

    key: str
    index: int | None
    kind: str
    title: str
    details: tuple[str, ...]
    x: float
    y: float
    w: float = BOX_W
    h: float = BOX_H
    waiting: int = 0

    @property
    def cx(self) -> float:
        """The x of the box's centre line (SVG user units)."""
        return self.x + self.w / 2


@dataclass(frozen=True)
class GraphEdge:
    """One drawn edge: an SVG path and its label.

    Attributes:
        kind: ``next``, ``attempt`` (poll to body), ``loop`` (body back to its poll),
            ``satisfied``, ``signal``, ``timeout``, ``failure``, ``compensation``.
        source / target: the :attr:`GraphBox.key` of each end.
    """

    source: str
    target: str
    kind: str
    path: str
    label: str = ""
    label_x: float = 0.0
    label_y: float = 0.0
    anchor: str = "start"  # SVG text-anchor of the label: "end" left of a curve


@dataclass(frozen=True)
class Graph:
    """A laid-out plan: boxes, edges and the drawing's size (SVG user units)."""

    name: str
    version: str
    boxes: list[GraphBox] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0

    def box(self, key: str) -> GraphBox:
        """The box with ``key``.

        Raises:
            KeyError: no such step.
        """
        for n in self.boxes:
            if n.key == key:
                return n
        raise KeyError(key)


def human_duration(value: timedelta) -> str:
    """``timedelta(hours=4)`` -> ``"4h"``, ``timedelta(seconds=90)`` -> ``"1m30s"``."""
    total = value.total_seconds()
    if total < 1:
        return f"{round(total * 1000)}ms"
    seconds = round(total)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, seconds = divmod(seconds, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def describe_backoff(backoff: Backoff) -> str:
    """One line for a poll's interval schedule, e.g. ``"every 5s, x2 up to 5m, jitter 50%"``."""
    text = f"every {human_duration(backoff.initial)}"
    if backoff.multiplier != 1.0 and backoff.maximum > backoff.initial:
        text += f", x{backoff.multiplier:g} up to {human_duration(backoff.maximum)}"
    if backoff.jitter:
        text += f", jitter {backoff.jitter:.0%}"
    return text


def _columns(plan: Plan) -> dict[int, int]:
    """Column of every box (and of the end, at ``plan.end``): main edges keep the column,
    branches add one; the smallest wins.
    """
    column: dict[int, int] = {0: 0}

    def reach(target: int | None, col: int) -> None:
        if target is not None:
            column[target] = min(column.get(target, col), col)

    for step in plan.steps:
        col = column.setdefault(step.index, 0)
        if isinstance(step, CapabilityStep):
            reach(step.next, col)
            reach(step.failure_target, col + 1)
        elif isinstance(step, PollStep):
            reach(step.body_index, col)
            reach(step.satisfied_target, col)
            reach(step.timeout_target, col + 1)
        elif isinstance(step, AwaitSignalStep):
            reach(step.satisfied_target, col)
            reach(step.timeout_target, col + 1)
        elif isinstance(step, EmitStep):
            reach(step.next, col)
    column.setdefault(plan.end, 0)
    return column


def _rows(plan: Plan, column: dict[int, int]) -> dict[int, int]:
    """Row of every box (and of the end): below everything that leads to it, a poll's
    satisfied target below its body, and never two boxes on one row of one column.
    """
    row: dict[int, int] = {0: 0}

    def below(target: int | None, than: int) -> None:
        if target is not None:
            row[target] = max(row.get(target, 0), than + 1)

    taken: set[tuple[int, int]] = set()
    for index in range(plan.end + 1):
        at = row.setdefault(index, 0)
        while (column[index], at) in taken:
            at += 1
        row[index] = at
        taken.add((column[index], at))
        if index == plan.end:
            break
        step = plan.steps[index]
        if isinstance(step, CapabilityStep):
            below(step.next, at)
            below(step.failure_target, at)
        elif isinstance(step, PollStep):
            below(step.body_index, at)
            below(step.satisfied_target, at + 1)
            below(step.timeout_target, at)
        elif isinstance(step, AwaitSignalStep):
            below(step.satisfied_target, at)
            below(step.timeout_target, at)
        elif isinstance(step, EmitStep):
            below(step.next, at)
    return row


def _tries(step: CapabilityStep) -> str:
    """``"1 try"`` or the retry policy's bound, e.g. ``"up to 3 tries"``."""
    retry = step.capability.options.retry
    if retry is None:
        return "1 try"
    if retry.maximum_tries is not None:
        return f"up to {retry.maximum_tries} tries"
    if retry.total_duration is not None:
        return f"tries for {human_duration(retry.total_duration)}"
    return "retried"


def _describe(plan: Plan, step: Step) -> tuple[str, str, tuple[str, ...]]:
    """(kind, title, details) of a plan step."""
    if isinstance(step, PollStep):
        body = plan.steps[step.body_index]
        body_id = body.capability.id if isinstance(body, CapabilityStep) else "?"
        details = [describe_backoff(step.interval), f"budget {human_duration(step.timeout)}"]
        return "poll", f"poll {body_id}", tuple(details)
    if isinstance(step, CapabilityStep):
        tries = _tries(step)
        if step.poll_index is not None:
            return "attempt", step.capability.id, (f"one attempt, {tries}",)
        flags = "idempotent" if step.capability.idempotent else "not idempotent"
        options = step.capability.options
        if options.heartbeat_timeout is not None:
            flags = f"heartbeats (timeout {human_duration(options.heartbeat_timeout)})"
        return "capability", step.capability.id, (f"{flags}, {tries}",)
    if isinstance(step, AwaitSignalStep):
        limit = f"timeout {human_duration(step.timeout)}" if step.timeout else "no timeout"
        return "await", f"await {step.signal.name}", (limit,)
    if isinstance(step, FailStep):
        message = step.message if len(step.message) <= 36 else step.message[:35] + "…"
        return "fail", f"fail {step.code}", (message,)
    return "emit", f"emit {step.name}", ("outbox event",)


def layout(plan: Plan, waiting: dict[int, int] | None = None) -> Graph:
    """Lay out ``plan``.

    Args:
        plan: the compiled plan.
        waiting: suspended instances per plan box index (``wake_step_id``); default none.

    Returns:
        :class:`Graph` with every plan box (key ``str(index)``), the ``end`` step, one
        box per compensation and per implicit poll failure, and their edges.
    """
    waiting = waiting or {}
    column = _columns(plan)
    row = _rows(plan, column)
    comp_col = max(column.values()) + 1
    boxes: dict[str, GraphBox] = {}

    def place(key: str, index: int | None, kind: str, title: str, details: tuple[str, ...],
              row: int, col: int) -> GraphBox:  # fmt: skip
        box = GraphBox(
            key=key,
            index=index,
            kind=kind,
            title=title,
            details=details,
            x=MARGIN_X + col * COL_W,
            y=MARGIN_Y + row * ROW_H,
            waiting=waiting.get(index, 0) if index is not None else 0,
        )
        boxes[key] = box
        return box

    for step in plan.steps:
        kind, title, details = _describe(plan, step)
        place(
            str(step.index), step.index, kind, title, details, row[step.index], column[step.index]
        )
    place("end", None, "end", "completed", ("the flow's result",), row[plan.end], column[plan.end])

    edges: list[GraphEdge] = []

    def key_of(target: int) -> str:
        return "end" if target >= plan.end else str(target)

    def connect(source: str, target: str, kind: str, label: str = "") -> None:
        edges.append(_route(boxes, source, target, kind, label))

    for step in plan.steps:
        here = str(step.index)
        if isinstance(step, CapabilityStep):
            if step.next is not None:
                connect(here, key_of(step.next), "next")
            if step.failure_target is not None:
                connect(here, key_of(step.failure_target), "failure", "on failure")
            if step.poll_index is not None:
                connect(here, str(step.poll_index), "loop", "not yet: park")
            if step.compensation is not None:
                comp = place(
                    f"comp-{step.index}",
                    None,
                    "compensation",
                    step.compensation.id,
                    ("compensation (on failure or cancel)",),
                    row[step.index],
                    comp_col,
                )
                connect(here, comp.key, "compensation", "undone by")
        elif isinstance(step, PollStep):
            connect(here, str(step.body_index), "attempt", "attempt")
            connect(here, key_of(step.satisfied_target), "satisfied", "satisfied")
            if step.signal is not None:
                connect(here, key_of(step.satisfied_target), "signal", f"or {step.signal.name}")
            budget = f"on_timeout ({human_duration(step.timeout)})"
            if step.timeout_target is not None:
                connect(here, key_of(step.timeout_target), "timeout", budget)
            else:
                fail = place(
                    f"timeout-{step.index}",
                    None,
                    "fail",
                    "fail flow.poll_not_satisfied",
                    ("no on_timeout block",),
                    row[step.index] + 1,
                    column[step.index] + 1,
                )
                connect(here, fail.key, "timeout", budget)
        elif isinstance(step, AwaitSignalStep):
            connect(here, key_of(step.satisfied_target), "signal", step.signal.name)
            if step.timeout_target is not None:
                connect(here, key_of(step.timeout_target), "timeout", "on_timeout")
            elif step.timeout is not None:
                fail = place(
                    f"timeout-{step.index}",
                    None,
                    "fail",
                    "fail flow.signal_not_received",
                    ("no on_timeout block",),
                    row[step.index] + 1,
                    column[step.index] + 1,
                )
                connect(here, fail.key, "timeout", "timeout")
        elif isinstance(step, EmitStep):
            connect(here, key_of(step.next), "next")

    width = max(n.x + n.w for n in boxes.values()) + 40
    height = max(n.y + n.h for n in boxes.values()) + MARGIN_Y
    return Graph(plan.name, plan.version, list(boxes.values()), edges, width, height)


def _route(
    boxes: dict[str, GraphBox], source: str, target: str, kind: str, label: str
) -> GraphEdge:
    """The SVG path of one edge between two placed boxes."""
    a, b = boxes[source], boxes[target]
    if kind == "loop":  # the body back up to its poll, around the left side
        x0, y0 = a.x, a.y + a.h / 2
        x1, y1 = b.x, b.y + b.h / 2
        bend = x0 - 46
        path = f"M{x0:.0f},{y0:.0f} C{bend:.0f},{y0:.0f} {bend:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
        mid_x = 0.25 * x0 + 0.75 * bend
        return GraphEdge(source, target, kind, path, label, mid_x - 4, (y0 + y1) / 2 + 4, "end")
    if a.x == b.x and b.y > a.y:
        between = [
            n for n in boxes.values() if n.x == a.x and a.y < n.y < b.y and n.key not in (source,)
        ]
        if not between:  # straight down
            x = a.cx + (18 if kind == "signal" else 0)
            path = f"M{x:.0f},{a.y + a.h:.0f} L{x:.0f},{b.y:.0f}"
            return GraphEdge(source, target, kind, path, label, x + 6, (a.y + a.h + b.y) / 2)
        # skip over the boxes in between, along the left side (further out when longer)
        rows = round((b.y - a.y) / ROW_H)
        bend = a.x - 60 - 12 * rows - (22 if kind == "signal" else 0)
        y0, y1 = a.y + a.h / 2 + (8 if kind == "signal" else 0), b.y + b.h / 2
        path = f"M{a.x:.0f},{y0:.0f} C{bend:.0f},{y0:.0f} {bend:.0f},{y1:.0f} {b.x:.0f},{y1:.0f}"
        label_y = (y0 + y1) / 2 + (16 if kind == "signal" else 0)
        mid_x = 0.25 * a.x + 0.75 * bend
        return GraphEdge(source, target, kind, path, label, mid_x - 4, label_y, "end")
    if b.x > a.x:  # to a column on the right: out of the right side, into the top
        x0, y0 = a.x + a.w, a.y + a.h / 2
        x1, y1 = b.cx, b.y
        if b.y <= a.y + 1:  # same row (a compensation): straight across
            path = f"M{x0:.0f},{y0:.0f} L{b.x:.0f},{b.y + b.h / 2:.0f}"
            return GraphEdge(source, target, kind, path, label, x0 + 8, y0 - 6)
        path = f"M{x0:.0f},{y0:.0f} C{x1:.0f},{y0:.0f} {x1:.0f},{y0:.0f} {x1:.0f},{y1:.0f}"
        return GraphEdge(source, target, kind, path, label, x0 + 10, y0 - 6)
    # back to a column on the left (a block rejoining): out of the bottom, into the right side
    x0, y0 = a.cx, a.y + a.h
    x1, y1 = b.x + b.w, b.y + b.h / 2
    path = f"M{x0:.0f},{y0:.0f} C{x0:.0f},{y1:.0f} {x0:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
    return GraphEdge(source, target, kind, path, label or "rejoins", x0 + 6, (y0 + y1) / 2)
