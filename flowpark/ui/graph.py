"""A compiled plan laid out as a graph for the console's flow page (drawn as SVG).

Plans point strictly forward, so box order is already a topological order: each box gets
the row of its index, and a column by the edges that reach it - the main path (``next``, a
satisfied wait) stays in its parent's column, a branch (``on_timeout``, ``on_failure``)
moves one column right. A poll's body sits beside it, one column left on the poll's row, so
the attempt and its way back ("not yet: park") are two short arrows of their own between
the two, and the satisfied and signal edges go straight down to the next step. Compensations
sit in a column of their own, on the row of the step they undo. Reaching one past the last
box completes the instance: it is drawn as the ``end`` box; a poll without ``on_timeout``
gets a ``fail`` box of its own for ``flow.poll_not_satisfied``.

Every label fits where it is drawn: a column is as wide as its longest text needs (at
generous per-character widths, between :data:`MIN_BOX_W` and :data:`MAX_BOX_W`; longer text
is cut with an ellipsis, the full text is in the box's tooltip and the steps table), the gaps
between columns hold the edge labels, and the drawing's size holds every box and label.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from datetime import timedelta

from flowpark.flows.durations import Backoff
from flowpark.flows.plan import (
    AwaitSignalStep,
    CapabilityStep,
    EmitStep,
    FailStep,
    Plan,
    PollStep,
    Step,
)

__all__ = ["Graph", "GraphBox", "GraphEdge", "describe_backoff", "human_duration", "layout"]

#: Box sizes and gaps (SVG user units, one per CSS pixel at 100 %).
MIN_BOX_W = 200
MAX_BOX_W = 420
BOX_H = 74
GAP_X = 104  # between two columns: the attempt and park labels, a branch's label
ROW_H = BOX_H + 44
MARGIN_X = 24
MARGIN_Y = 30
#: Text starts this far in from a box's left side, and keeps as much room on its right.
PAD_X = 12
#: Widths per character, on the generous side of the console's sans-serif fonts: a bold
#: 13 px title, an 11 px detail, count or edge label.
TITLE_PX = 8.0
TEXT_PX = 6.4
#: A fail box's message is wrapped onto at most two lines of this many characters.
MESSAGE_CHARS = 34

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
        title: the main label (capability id, ``poll``, ``fail <code>``), in full.
        details: smaller lines under the title (schedule, budget, message), in full.
        x, y, w, h: the box's rectangle (SVG user units).
        waiting: suspended instances waiting at this box (plan boxes only).
        provider: the provider its capability calls (``ocr``; drawn as ``calls ocr``).
    """

    key: str
    index: int | None
    kind: str
    title: str
    details: tuple[str, ...]
    x: float
    y: float
    w: float = MIN_BOX_W
    h: float = BOX_H
    waiting: int = 0
    provider: str | None = None

    @property
    def cx(self) -> float:
        """The x of the box's centre line (SVG user units)."""
        return self.x + self.w / 2

    @property
    def shown_title(self) -> str:
        """The title as drawn: cut with an ellipsis only when even :data:`MAX_BOX_W` is too
        narrow for it."""
        return _fit(self.title, (self.w - 2 * PAD_X) / TITLE_PX)

    @property
    def lines(self) -> tuple[str, ...]:
        """The detail lines as drawn (at most two, one when the provider's line is drawn
        under them): a fail box's message wrapped onto two lines, each line cut to the box's
        width."""
        shown = _detail_lines(self)[: 1 if self.provider else 2]
        return tuple(_fit(line, (self.w - 2 * PAD_X) / TEXT_PX) for line in shown)

    @property
    def provider_line(self) -> str | None:
        """The provider's line as drawn (``calls ocr``), or None."""
        line = f"calls {self.provider}" if self.provider else None
        return _fit(line, (self.w - 2 * PAD_X) / TEXT_PX) if line else None


@dataclass(frozen=True)
class GraphEdge:
    """One drawn edge: an SVG path and its label.

    Attributes:
        kind: ``next``, ``attempt`` (poll to body), ``loop`` (body back to its poll),
            ``satisfied``, ``signal``, ``timeout``, ``failure``, ``compensation``.
        source / target: the :attr:`GraphBox.key` of each end.
        path: the SVG path data.
        label, label_x, label_y, anchor: the label, its anchor point and SVG
            ``text-anchor`` (``start``: the text runs right of the point, ``end``: left of
            it, ``middle``: centred on it).
    """

    source: str
    target: str
    kind: str
    path: str
    label: str = ""
    label_x: float = 0.0
    label_y: float = 0.0
    anchor: str = "start"

    def label_span(self) -> tuple[float, float]:
        """The label's estimated horizontal extent ``(left, right)`` (SVG user units)."""
        width = len(self.label) * TEXT_PX
        if self.anchor == "end":
            return self.label_x - width, self.label_x
        if self.anchor == "middle":
            return self.label_x - width / 2, self.label_x + width / 2
        return self.label_x, self.label_x + width


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


def _fit(text: str, chars: float) -> str:
    """``text`` cut to ``chars`` characters, the last one an ellipsis, when longer."""
    limit = max(int(chars), 4)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _detail_lines(box: GraphBox) -> tuple[str, ...]:
    """The detail lines of ``box`` before fitting: a fail box's one message on up to two
    lines of :data:`MESSAGE_CHARS`, the others as they are (the first two)."""
    if box.kind == "fail" and len(box.details) == 1:
        wrapped = textwrap.wrap(box.details[0], MESSAGE_CHARS) or [""]
        if len(wrapped) > 2:
            wrapped = [wrapped[0], _fit(" ".join(wrapped[1:]), MESSAGE_CHARS)]
        return tuple(wrapped)
    return box.details[:2]


def _needed_width(
    kind: str, title: str, details: tuple[str, ...], note: str = "", provider: str | None = None
) -> float:
    """The width a box of these texts needs, between :data:`MIN_BOX_W` and
    :data:`MAX_BOX_W` (``note``: the counts line drawn in it; ``provider``: the provider it
    calls)."""
    probe = GraphBox("", None, kind, title, details, 0, 0)
    calls = f"calls {provider}" if provider else ""
    text = max(
        [len(title) * TITLE_PX]
        + [len(line) * TEXT_PX for line in _detail_lines(probe)]
        + [len(note) * TEXT_PX, len(calls) * TEXT_PX]
    )
    return min(max(text + 2 * PAD_X, MIN_BOX_W), MAX_BOX_W)


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
    branches add one, a poll's body is one left of its poll; the smallest wins. Columns may
    be negative (a body beside a poll of the main path): :func:`layout` shifts them.
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
            column[step.body_index] = col - 1
            reach(step.satisfied_target, col)
            reach(step.timeout_target, col + 1)
            reach(step.warning_target, col + 1)
        elif isinstance(step, AwaitSignalStep):
            reach(step.satisfied_target, col)
            reach(step.timeout_target, col + 1)
            reach(step.warning_target, col + 1)
        elif isinstance(step, EmitStep):
            reach(step.next, col)
    column.setdefault(plan.end, 0)
    return column


def _rows(plan: Plan, column: dict[int, int]) -> dict[int, int]:
    """Row of every box (and of the end): below everything that leads to it, a poll's body
    on its poll's row, and never two boxes on one row of one column.
    """
    row: dict[int, int] = {0: 0}

    def below(target: int | None, than: int) -> None:
        if target is not None:
            row[target] = max(row.get(target, 0), than + 1)

    taken: set[tuple[int, int]] = set()
    beside: set[int] = set()  # bodies, placed with their poll
    for index in range(plan.end + 1):
        at = row.setdefault(index, 0)
        step = plan.steps[index] if index < plan.end else None
        if index not in beside:
            body = step.body_index if isinstance(step, PollStep) else None
            while (column[index], at) in taken or (
                body is not None and (column[body], at) in taken
            ):
                at += 1
            row[index] = at
            taken.add((column[index], at))
            if body is not None:
                row[body] = at
                taken.add((column[body], at))
                beside.add(body)
        if step is None:
            break
        if isinstance(step, CapabilityStep):
            below(step.next, at)
            below(step.failure_target, at)
        elif isinstance(step, PollStep | AwaitSignalStep):
            below(step.satisfied_target, at)
            below(step.timeout_target, at)
            below(step.warning_target, at - 1)  # beside its wait, right of it
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
        return "fail", f"fail {step.code}", (step.message,)
    return "emit", f"emit {step.name}", ("outbox event",)


def _note(counts: dict[str, int] | None) -> str:
    """The counts line drawn in a box (as the template writes it): ``"3 parked · 1 failed"``."""
    return " · ".join(f"{v} {k}" for k, v in (counts or {}).items() if v)


@dataclass(frozen=True)
class _Spec:
    """A box to place: what it shows and its grid cell."""

    key: str
    index: int | None
    kind: str
    title: str
    details: tuple[str, ...]
    row: int
    col: int
    provider: str | None = None


def _provider(step: Step, compensation: bool = False) -> str | None:
    """The name of the provider the step's capability (or its compensation) calls."""
    capability = getattr(step, "compensation" if compensation else "capability", None)
    provider = getattr(capability, "provider", None)
    return provider.name if provider is not None else None


def layout(
    plan: Plan,
    waiting: dict[int, int] | None = None,
    counts: dict[str, dict[str, int]] | None = None,
) -> Graph:
    """Lay out ``plan``.

    Args:
        plan: the compiled plan.
        waiting: suspended instances per plan box index (``wake_step_id``); default none.
        counts: the counts line of each box by key (``{"1": {"parked": 3, ...}}``), drawn in
            the box: its column is made wide enough for it; default none.

    Returns:
        :class:`Graph` with every plan box (key ``str(index)``), the ``end`` step, one
        box per compensation and per implicit poll failure, and their edges; no label
        leaves the drawing.
    """
    waiting = waiting or {}
    counts = counts or {}
    column = _columns(plan)
    row = _rows(plan, column)
    specs: list[_Spec] = []
    for step in plan.steps:
        kind, title, details = _describe(plan, step)
        specs.append(
            _Spec(
                str(step.index),
                step.index,
                kind,
                title,
                details,
                row[step.index],
                column[step.index],
                _provider(step),
            )
        )
    specs.append(
        _Spec(
            "end", None, "end", "completed", ("the flow's result",), row[plan.end], column[plan.end]
        )
    )
    for step in plan.steps:  # the implicit failures, one column right of their wait
        if isinstance(step, PollStep) and step.timeout_target is None:
            specs.append(
                _Spec(
                    f"timeout-{step.index}",
                    None,
                    "fail",
                    "fail flow.poll_not_satisfied",
                    ("no on_timeout block",),
                    row[step.index] + 1,
                    column[step.index] + 1,
                )
            )
        elif (
            isinstance(step, AwaitSignalStep)
            and step.timeout_target is None
            and step.timeout is not None
        ):
            specs.append(
                _Spec(
                    f"timeout-{step.index}",
                    None,
                    "fail",
                    "fail flow.signal_not_received",
                    ("no on_timeout block",),
                    row[step.index] + 1,
                    column[step.index] + 1,
                )
            )

    # compensations in a column of their own, right of every other box
    comp_col = max(spec.col for spec in specs) + 1
    for step in plan.steps:
        if isinstance(step, CapabilityStep) and step.compensation is not None:
            specs.append(
                _Spec(
                    f"comp-{step.index}",
                    None,
                    "compensation",
                    step.compensation.id,
                    ("runs on failure or cancel",),
                    row[step.index],
                    comp_col,
                    _provider(step, compensation=True),
                )
            )
    # each column as wide as its widest box needs; the columns from left to right
    first = min(spec.col for spec in specs)
    widths: dict[int, float] = {}
    for spec in specs:
        need = _needed_width(
            spec.kind, spec.title, spec.details, _note(counts.get(spec.key)), spec.provider
        )
        widths[spec.col] = max(widths.get(spec.col, MIN_BOX_W), need)
    left: dict[int, float] = {}
    x = 0.0
    for col in range(first, max(widths) + 1):
        left[col] = x
        x += widths.get(col, MIN_BOX_W) + GAP_X

    def place(dx: float) -> dict[str, GraphBox]:
        return {
            spec.key: GraphBox(
                key=spec.key,
                index=spec.index,
                kind=spec.kind,
                title=spec.title,
                details=spec.details,
                x=dx + left[spec.col],
                y=MARGIN_Y + spec.row * ROW_H,
                w=widths[spec.col],
                waiting=waiting.get(spec.index, 0) if spec.index is not None else 0,
                provider=spec.provider,
            )
            for spec in specs
        }

    boxes = place(MARGIN_X)
    edges = _edges(plan, boxes)
    # a label left of every box (a skip edge's) moves the drawing right
    leftmost = min([b.x for b in boxes.values()] + [e.label_span()[0] for e in edges if e.label])
    if leftmost < MARGIN_X:
        boxes = place(2 * MARGIN_X - leftmost)
        edges = _edges(plan, boxes)
    width = max([n.x + n.w for n in boxes.values()] + [e.label_span()[1] for e in edges]) + MARGIN_X
    height = max(n.y + n.h for n in boxes.values()) + MARGIN_Y
    return Graph(plan.name, plan.version, list(boxes.values()), edges, width, height)


def _edges(plan: Plan, boxes: dict[str, GraphBox]) -> list[GraphEdge]:
    """Every edge of ``plan`` between its placed ``boxes``."""
    edges: list[GraphEdge] = []

    def key_of(target: int) -> str:
        return "end" if target >= plan.end else str(target)

    def connect(source: str, target: str, kind: str, label: str = "", lane: int = 0) -> None:
        edges.append(_route(boxes, source, target, kind, label, lane))

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
                connect(here, f"comp-{step.index}", "compensation", "undone by")
        elif isinstance(step, PollStep):
            connect(here, str(step.body_index), "attempt", "attempt")
            # with a signal: the satisfied edge left of the centre, the signal's right of it
            paired = -1 if step.signal is not None else 0
            connect(here, key_of(step.satisfied_target), "satisfied", "satisfied", paired)
            if step.signal is not None:
                connect(here, key_of(step.satisfied_target), "signal", f"or {step.signal.name}", 1)
            budget = f"on_timeout ({human_duration(step.timeout)})"
            target = key_of(step.timeout_target) if step.timeout_target is not None else None
            connect(here, target or f"timeout-{step.index}", "timeout", budget)
            if step.warning_target is not None:  # run once at the warning, then the wait
                connect(here, str(step.warning_target), "attempt", "on warning", 1)
        elif isinstance(step, AwaitSignalStep):
            connect(here, key_of(step.satisfied_target), "signal", step.signal.name, 1)
            if step.timeout_target is not None:
                connect(here, key_of(step.timeout_target), "timeout", "on_timeout")
            elif step.timeout is not None:
                connect(here, f"timeout-{step.index}", "timeout", "timeout")
            if step.warning_target is not None:
                connect(here, str(step.warning_target), "attempt", "on warning")
        elif isinstance(step, EmitStep):
            connect(here, key_of(step.next), "next")
    return edges


#: How far a pair of edges between the same two boxes sit from each other's centre line.
_LANE = 18


def _route(
    boxes: dict[str, GraphBox], source: str, target: str, kind: str, label: str, lane: int
) -> GraphEdge:
    """The SVG path of one edge between two placed boxes, and where its label goes.

    ``lane``: -1 or 1 for one of two edges that share both ends (drawn left or right of
    the centre, the label on its outer side), 0 for one alone.
    """
    a, b = boxes[source], boxes[target]
    if kind in ("attempt", "loop") and a.y == b.y:
        # a poll and its body side by side: two short arrows in the gap between them, the
        # attempt above (its label over it), the way back below (its label under it)
        poll, body = (a, b) if kind == "attempt" else (b, a)
        y = poll.y + poll.h / 2 + (-9 if kind == "attempt" else 9)
        near, far = (poll.x, body.x + body.w) if body.x < poll.x else (poll.x + poll.w, body.x)
        x0, x1 = (near, far) if kind == "attempt" else (far, near)
        path = f"M{x0:.0f},{y:.0f} L{x1:.0f},{y:.0f}"
        label_y = y - 6 if kind == "attempt" else y + 15
        return GraphEdge(source, target, kind, path, label, (x0 + x1) / 2, label_y, "middle")
    if kind == "loop":  # a body not beside its poll: back up around the left side
        x0, y0 = a.x, a.y + a.h / 2
        x1, y1 = b.x, b.y + b.h / 2
        bend = x0 - 46
        path = f"M{x0:.0f},{y0:.0f} C{bend:.0f},{y0:.0f} {bend:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
        mid_x = 0.25 * x0 + 0.75 * bend
        return GraphEdge(source, target, kind, path, label, mid_x - 4, (y0 + y1) / 2 + 4, "end")
    if a.x == b.x and b.y > a.y:
        between = [n for n in boxes.values() if n.x == a.x and a.y < n.y < b.y]
        if not between:  # straight down; a labelled edge's label beside it, outside the pair
            x = a.cx + lane * _LANE
            path = f"M{x:.0f},{a.y + a.h:.0f} L{x:.0f},{b.y:.0f}"
            mid = (a.y + a.h + b.y) / 2 + 4
            if lane < 0:
                return GraphEdge(source, target, kind, path, label, x - 6, mid, "end")
            return GraphEdge(source, target, kind, path, label, x + 6, mid)
        # skip over the boxes in between, along the left side: an outer lane further out,
        # starting above and ending below the inner one (so the two never cross)
        rows = round((b.y - a.y) / ROW_H)
        outer = lane > 0
        bend = a.x - 60 - 12 * rows - (len(label) * TEXT_PX + 16 if outer else 0)
        shift = -8 if outer else 8
        y0, y1 = a.y + a.h / 2 + shift, b.y + b.h / 2 - shift
        path = f"M{a.x:.0f},{y0:.0f} C{bend:.0f},{y0:.0f} {bend:.0f},{y1:.0f} {b.x:.0f},{y1:.0f}"
        mid_x = 0.25 * a.x + 0.75 * bend
        return GraphEdge(source, target, kind, path, label, mid_x - 6, (y0 + y1) / 2 + 4, "end")
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
