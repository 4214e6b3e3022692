"""A compiled plan laid out as a graph for the console's flow page (drawn as SVG).

Plans point strictly forward, so node order is already a topological order: each node gets
the row of its index, and a column by the edges that reach it - the main path (``next``, a
satisfied wait, a poll's body) stays in its parent's column, a branch (``on_timeout``,
``on_failure``) moves one column right. Compensations sit in a column of their own, on the
row of the step they undo. Reaching one past the last node completes the instance: it is
drawn as the ``end`` node; a poll without ``on_timeout`` gets a ``fail`` node of its own for
``flow.poll_not_satisfied``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from app.flows.durations import Backoff
from app.flows.plan import AwaitSignalNode, EmitNode, FailNode, Node, Plan, PollNode, StepNode

__all__ = ["Graph", "GraphEdge", "GraphNode", "describe_backoff", "human_duration", "layout"]

NODE_W = 250
NODE_H = 58
COL_W = 300
ROW_H = 92
MARGIN_X = 220  # room on the left for the loop and skip edges and their labels
MARGIN_Y = 30

#: Node kinds (the SVG's ``data-kind`` and CSS class).
KINDS = ("step", "poll", "attempt", "await", "fail", "emit", "end", "compensation")


@dataclass(frozen=True)
class GraphNode:
    """One drawn node.

    Attributes:
        key: stable id within the graph (``"3"`` for plan node 3, ``"end"``,
            ``"comp-0"`` for the compensation of node 0, ``"timeout-1"`` for the implicit
            failure of poll 1).
        index: the plan node index, or None for drawn-only nodes (end, compensations,
            implicit failures).
        kind: one of :data:`KINDS`.
        title: the main label (capability id, ``poll``, ``fail <code>``).
        details: smaller lines under the title (schedule, budget, message).
        waiting: suspended instances waiting at this node (plan nodes only).
    """

    key: str
    index: int | None
    kind: str
    title: str
    details: tuple[str, ...]
    x: float
    y: float
    w: float = NODE_W
    h: float = NODE_H
    waiting: int = 0

    @property
    def cx(self) -> float:
        """The x of the node's centre line (SVG user units)."""
        return self.x + self.w / 2


@dataclass(frozen=True)
class GraphEdge:
    """One drawn edge: an SVG path and its label.

    Attributes:
        kind: ``next``, ``attempt`` (poll to body), ``loop`` (body back to its poll),
            ``satisfied``, ``signal``, ``timeout``, ``failure``, ``compensation``.
        source / target: the :attr:`GraphNode.key` of each end.
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
    """A laid-out plan: nodes, edges and the drawing's size (SVG user units)."""

    name: str
    version: str
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0

    def node(self, key: str) -> GraphNode:
        """The node with ``key``.

        Raises:
            KeyError: no such node.
        """
        for n in self.nodes:
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
    """Column of every node (and of the end, at ``plan.end``): main edges keep the column,
    branches add one; the smallest wins.
    """
    column: dict[int, int] = {0: 0}

    def reach(target: int | None, col: int) -> None:
        if target is not None:
            column[target] = min(column.get(target, col), col)

    for node in plan.nodes:
        col = column.setdefault(node.index, 0)
        if isinstance(node, StepNode):
            reach(node.next, col)
            reach(node.failure_target, col + 1)
        elif isinstance(node, PollNode):
            reach(node.body_index, col)
            reach(node.satisfied_target, col)
            reach(node.timeout_target, col + 1)
        elif isinstance(node, AwaitSignalNode):
            reach(node.satisfied_target, col)
            reach(node.timeout_target, col + 1)
        elif isinstance(node, EmitNode):
            reach(node.next, col)
    column.setdefault(plan.end, 0)
    return column


def _rows(plan: Plan, column: dict[int, int]) -> dict[int, int]:
    """Row of every node (and of the end): below everything that leads to it, a poll's
    satisfied target below its body, and never two nodes on one row of one column.
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
        node = plan.nodes[index]
        if isinstance(node, StepNode):
            below(node.next, at)
            below(node.failure_target, at)
        elif isinstance(node, PollNode):
            below(node.body_index, at)
            below(node.satisfied_target, at + 1)
            below(node.timeout_target, at)
        elif isinstance(node, AwaitSignalNode):
            below(node.satisfied_target, at)
            below(node.timeout_target, at)
        elif isinstance(node, EmitNode):
            below(node.next, at)
    return row


def _tries(node: StepNode) -> str:
    """``"1 try"`` or the retry policy's bound, e.g. ``"up to 3 tries"``."""
    retry = node.capability.options.retry
    if retry is None:
        return "1 try"
    if retry.maximum_tries is not None:
        return f"up to {retry.maximum_tries} tries"
    if retry.total_duration is not None:
        return f"tries for {human_duration(retry.total_duration)}"
    return "retried"


def _describe(plan: Plan, node: Node) -> tuple[str, str, tuple[str, ...]]:
    """(kind, title, details) of a plan node."""
    if isinstance(node, PollNode):
        body = plan.nodes[node.body_index]
        body_id = body.capability.id if isinstance(body, StepNode) else "?"
        details = [describe_backoff(node.interval), f"budget {human_duration(node.timeout)}"]
        return "poll", f"poll {body_id}", tuple(details)
    if isinstance(node, StepNode):
        tries = _tries(node)
        if node.poll_index is not None:
            return "attempt", node.capability.id, (f"one attempt, {tries}",)
        flags = "idempotent" if node.capability.idempotent else "not idempotent"
        options = node.capability.options
        if options.heartbeat_timeout is not None:
            flags = f"heartbeats (timeout {human_duration(options.heartbeat_timeout)})"
        return "step", node.capability.id, (f"{flags}, {tries}",)
    if isinstance(node, AwaitSignalNode):
        limit = f"timeout {human_duration(node.timeout)}" if node.timeout else "no timeout"
        return "await", f"await {node.signal.name}", (limit,)
    if isinstance(node, FailNode):
        message = node.message if len(node.message) <= 36 else node.message[:35] + "…"
        return "fail", f"fail {node.code}", (message,)
    return "emit", f"emit {node.name}", ("outbox event",)


def layout(plan: Plan, waiting: dict[int, int] | None = None) -> Graph:
    """Lay out ``plan``.

    Args:
        plan: the compiled plan.
        waiting: suspended instances per plan node index (``wake_step_id``); default none.

    Returns:
        :class:`Graph` with every plan node (key ``str(index)``), the ``end`` node, one
        node per compensation and per implicit poll failure, and their edges.
    """
    waiting = waiting or {}
    column = _columns(plan)
    row = _rows(plan, column)
    comp_col = max(column.values()) + 1
    nodes: dict[str, GraphNode] = {}

    def place(key: str, index: int | None, kind: str, title: str, details: tuple[str, ...],
              row: int, col: int) -> GraphNode:  # fmt: skip
        node = GraphNode(
            key=key,
            index=index,
            kind=kind,
            title=title,
            details=details,
            x=MARGIN_X + col * COL_W,
            y=MARGIN_Y + row * ROW_H,
            waiting=waiting.get(index, 0) if index is not None else 0,
        )
        nodes[key] = node
        return node

    for node in plan.nodes:
        kind, title, details = _describe(plan, node)
        place(
            str(node.index), node.index, kind, title, details, row[node.index], column[node.index]
        )
    place("end", None, "end", "completed", ("the flow's result",), row[plan.end], column[plan.end])

    edges: list[GraphEdge] = []

    def key_of(target: int) -> str:
        return "end" if target >= plan.end else str(target)

    def connect(source: str, target: str, kind: str, label: str = "") -> None:
        edges.append(_route(nodes, source, target, kind, label))

    for node in plan.nodes:
        here = str(node.index)
        if isinstance(node, StepNode):
            if node.next is not None:
                connect(here, key_of(node.next), "next")
            if node.failure_target is not None:
                connect(here, key_of(node.failure_target), "failure", "on failure")
            if node.poll_index is not None:
                connect(here, str(node.poll_index), "loop", "not yet: park")
            if node.compensation is not None:
                comp = place(
                    f"comp-{node.index}",
                    None,
                    "compensation",
                    node.compensation.id,
                    ("compensation (on failure or cancel)",),
                    row[node.index],
                    comp_col,
                )
                connect(here, comp.key, "compensation", "undone by")
        elif isinstance(node, PollNode):
            connect(here, str(node.body_index), "attempt", "attempt")
            connect(here, key_of(node.satisfied_target), "satisfied", "satisfied")
            if node.signal is not None:
                connect(here, key_of(node.satisfied_target), "signal", f"or {node.signal.name}")
            budget = f"on_timeout ({human_duration(node.timeout)})"
            if node.timeout_target is not None:
                connect(here, key_of(node.timeout_target), "timeout", budget)
            else:
                fail = place(
                    f"timeout-{node.index}",
                    None,
                    "fail",
                    "fail flow.poll_not_satisfied",
                    ("no on_timeout block",),
                    row[node.index] + 1,
                    column[node.index] + 1,
                )
                connect(here, fail.key, "timeout", budget)
        elif isinstance(node, AwaitSignalNode):
            connect(here, key_of(node.satisfied_target), "signal", node.signal.name)
            if node.timeout_target is not None:
                connect(here, key_of(node.timeout_target), "timeout", "on_timeout")
            elif node.timeout is not None:
                fail = place(
                    f"timeout-{node.index}",
                    None,
                    "fail",
                    "fail flow.signal_not_received",
                    ("no on_timeout block",),
                    row[node.index] + 1,
                    column[node.index] + 1,
                )
                connect(here, fail.key, "timeout", "timeout")
        elif isinstance(node, EmitNode):
            connect(here, key_of(node.next), "next")

    width = max(n.x + n.w for n in nodes.values()) + 40
    height = max(n.y + n.h for n in nodes.values()) + MARGIN_Y
    return Graph(plan.name, plan.version, list(nodes.values()), edges, width, height)


def _route(
    nodes: dict[str, GraphNode], source: str, target: str, kind: str, label: str
) -> GraphEdge:
    """The SVG path of one edge between two placed nodes."""
    a, b = nodes[source], nodes[target]
    if kind == "loop":  # the body back up to its poll, around the left side
        x0, y0 = a.x, a.y + a.h / 2
        x1, y1 = b.x, b.y + b.h / 2
        bend = x0 - 46
        path = f"M{x0:.0f},{y0:.0f} C{bend:.0f},{y0:.0f} {bend:.0f},{y1:.0f} {x1:.0f},{y1:.0f}"
        mid_x = 0.25 * x0 + 0.75 * bend
        return GraphEdge(source, target, kind, path, label, mid_x - 4, (y0 + y1) / 2 + 4, "end")
    if a.x == b.x and b.y > a.y:
        between = [
            n for n in nodes.values() if n.x == a.x and a.y < n.y < b.y and n.key not in (source,)
        ]
        if not between:  # straight down
            x = a.cx + (18 if kind == "signal" else 0)
            path = f"M{x:.0f},{a.y + a.h:.0f} L{x:.0f},{b.y:.0f}"
            return GraphEdge(source, target, kind, path, label, x + 6, (a.y + a.h + b.y) / 2)
        # skip over the nodes in between, along the left side (further out when longer)
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
