"""The flow page's graph: every plan node is drawn, with the edges a reader needs to follow
a poll's loop, its signal, its on_timeout branch and the compensations."""

from __future__ import annotations

import itertools
import re

import httpx
import pytest

from flowpark.flows import Capability, Catalog, Flow, StepContext
from flowpark.flows.plan import CapabilityStep, Plan
from flowpark.samples.document_processing import OcrClient, build_document_flow
from flowpark.ui.graph import (
    Graph,
    GraphBox,
    GraphEdge,
    describe_backoff,
    human_duration,
    layout,
)
from tests.engine.flows import (
    BUDGET,
    INTERVAL,
    After,
    Check,
    Order,
    Start,
    Status,
    Undo,
    await_flow,
    done,
    poll_flow,
)


def _plan(flow: Flow) -> Plan:
    catalog = Catalog()
    catalog.register(flow)
    return catalog.get(flow.name, flow.version)


@pytest.fixture
def document_plan() -> Plan:
    return _plan(build_document_flow(OcrClient(httpx.AsyncClient(), "http://ocr.invalid")))


def _edges(graph: Graph, kind: str) -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in graph.edges if e.kind == kind}


def test_document_flow_draws_every_node_and_the_poll_edges(document_plan: Plan) -> None:
    graph = layout(document_plan, {1: 7, 5: 2})

    drawn = {n.key: n for n in graph.boxes}
    assert {str(i) for i in range(len(document_plan.steps))} | {"end", "comp-0"} == set(drawn)
    assert drawn["0"].title == "ocr.upload" and drawn["comp-0"].title == "ocr.cancel"
    assert drawn["1"].kind == "poll" and drawn["1"].title == "poll ocr.status"
    assert drawn["1"].details == ("every 5s, x2 up to 5m, jitter 50%", "budget 4h")
    assert drawn["4"].kind == "fail" and drawn["4"].title == "fail document.not_read_in_time"
    upload, status = document_plan.steps[0], document_plan.steps[2]
    assert isinstance(upload, CapabilityStep) and isinstance(status, CapabilityStep)
    upload_retry, status_retry = upload.capability.options.retry, status.capability.options.retry
    assert upload_retry is not None and status_retry is not None
    # each step's retry policy is on it
    # the samples' calls are bounded by time, not by a count of tries
    assert (upload_retry.maximum_tries, status_retry.maximum_tries) == (None, None)
    assert drawn["0"].details == ("not idempotent, tries for 3m",)
    assert drawn["2"].details == ("one attempt, tries for 3m",)
    # instances waiting at a node are drawn on it
    assert (drawn["1"].waiting, drawn["5"].waiting, drawn["0"].waiting) == (7, 2, 0)

    assert _edges(graph, "attempt") == {("1", "2")}
    assert _edges(graph, "loop") == {("2", "1")}
    assert _edges(graph, "satisfied") == {("1", "5")}
    assert _edges(graph, "signal") == {("1", "5")}
    assert _edges(graph, "timeout") == {("1", "3")}
    assert _edges(graph, "compensation") == {("0", "comp-0")}
    assert _edges(graph, "next") == {("0", "1"), ("3", "4"), ("5", "6"), ("6", "end")}
    signal = next(e for e in graph.edges if e.kind == "signal")
    assert signal.label == "or ocr.completed"
    timeout = next(e for e in graph.edges if e.kind == "timeout")
    assert timeout.label == "on_timeout (4h)"
    # the on_timeout block sits in a column of its own; the main path stays in one
    assert drawn["3"].x > drawn["1"].x == drawn["5"].x == drawn["end"].x
    # the poll's body sits beside it, on its row, to its left; the next step right below it
    assert drawn["2"].y == drawn["1"].y and drawn["2"].x + drawn["2"].w < drawn["1"].x
    assert drawn["5"].y > drawn["1"].y and not [
        n for n in graph.boxes if n.x == drawn["1"].x and drawn["1"].y < n.y < drawn["5"].y
    ]


def test_no_two_nodes_overlap_and_the_drawing_holds_them(document_plan: Plan) -> None:
    for plan in _plans(document_plan):
        graph = layout(plan)
        for a, b in itertools.combinations(graph.boxes, 2):
            apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
            assert apart, (plan.name, a.key, b.key)
        assert all(n.x >= 0 and n.x + n.w <= graph.width for n in graph.boxes)
        assert all(n.y >= 0 and n.y + n.h <= graph.height for n in graph.boxes)


def _undone_after_a_bare_poll() -> Flow:
    """A compensated step on the row of a poll's implicit failure."""
    flow = Flow("t.undone", "1.0.0", input=Order)
    flow.step(Start()).poll_until(
        Check(), until=done, interval=INTERVAL, timeout=BUDGET, reads=(Status,)
    )
    return flow.step(After()).compensate_with(Undo())


def _plans(document_plan: Plan) -> list[Plan]:
    return [
        document_plan,
        _plan(poll_flow(on_timeout="rejoin")),
        _plan(poll_flow(on_timeout="none", signal=False)),
        _plan(await_flow()),
        _plan(_undone_after_a_bare_poll()),
    ]


def _label_box(edge: GraphEdge) -> tuple[float, float, float, float]:
    """An edge label's estimated extent (left, top, right, bottom): 11 px text."""
    left, right = edge.label_span()
    return left, edge.label_y - 10, right, edge.label_y + 3


def _meets(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _points(path: str) -> list[tuple[float, float]]:
    """The points of a path of straight lines (``M x,y L x,y``)."""
    return [(float(x), float(y)) for x, y in re.findall(r"[ML](-?[\d.]+),(-?[\d.]+)", path)]


def test_no_edge_label_meets_a_box_another_label_or_the_drawings_edge(
    document_plan: Plan,
) -> None:
    for plan in _plans(document_plan):
        graph = layout(plan)
        labels = [e for e in graph.edges if e.label]
        for edge in labels:
            box = _label_box(edge)
            assert box[0] >= 0 and box[2] <= graph.width, (plan.name, edge.label)
            for n in graph.boxes:
                assert not _meets(box, (n.x, n.y, n.x + n.w, n.y + n.h)), (edge.label, n.key)
        for a, b in itertools.combinations(labels, 2):
            assert not _meets(_label_box(a), _label_box(b)), (plan.name, a.label, b.label)


def test_the_poll_edges_run_in_the_gaps_between_their_boxes(document_plan: Plan) -> None:
    graph = layout(document_plan)
    poll, body, after = graph.box("1"), graph.box("2"), graph.box("5")
    by_kind = {e.kind: e for e in graph.edges}
    for kind in ("attempt", "loop"):  # horizontal, between the body's right and the poll's left
        (x0, y0), (x1, y1) = _points(by_kind[kind].path)
        assert y0 == y1 and poll.y < y0 < poll.y + poll.h, kind
        assert sorted((x0, x1)) == [body.x + body.w, poll.x], kind
    attempt, back = (_points(by_kind[k].path) for k in ("attempt", "loop"))
    assert attempt[0][0] == poll.x and back[1][0] == poll.x  # one out of the poll, one in
    assert by_kind["attempt"].label_y < attempt[0][1] < back[0][1] < by_kind["loop"].label_y
    lines = []
    for kind in ("satisfied", "signal"):  # vertical, from the poll's bottom to the next top
        (x0, y0), (x1, y1) = _points(by_kind[kind].path)
        assert x0 == x1 and (y0, y1) == (poll.y + poll.h, after.y), kind
        lines.append(x0)
    assert lines[0] < poll.cx < lines[1]  # side by side, apart
    assert by_kind["satisfied"].anchor == "end" and by_kind["signal"].anchor == "start"


def test_a_long_name_widens_its_column_instead_of_being_cut() -> None:
    class Long(Capability):
        id = "payments.settlement_report_reconciliation"

        async def execute(self, ctx: StepContext) -> None:
            return None

    flow = Flow("t.long", "1.0.0", input=Order)
    flow.step(Long()).fail("t.reconciliation_failed", "the settlement report never " * 3)
    graph = layout(_plan(flow))
    long, fail = graph.box("0"), graph.box("1")
    assert long.shown_title == long.title and long.w >= len(long.title) * 8.0 + 24
    # a fail message wraps onto two lines, the second cut to the box
    assert len(fail.lines) == 2 and fail.lines[1].endswith("…")
    assert all(len(line) * 6.4 <= fail.w - 24 for line in fail.lines)
    # counts drawn in a box widen it too
    counted = layout(_plan(flow), counts={"0": {"parked": 12345, "running": 67890, "failed": 1}})
    assert counted.box("0").w >= len("12345 parked · 67890 running · 1 failed") * 6.4 + 24


def test_a_rejoining_on_timeout_block_leads_back_to_the_main_path() -> None:
    graph = layout(_plan(poll_flow(on_timeout="rejoin")))
    # nodes: 0 start, 1 poll, 2 check, 3 escalate (on_timeout), 4 after
    assert _edges(graph, "timeout") == {("1", "3")}
    assert ("3", "4") in _edges(graph, "next")
    assert graph.box("3").x > graph.box("4").x  # drawn back into the main column


def test_a_poll_without_on_timeout_fails_the_flow_in_the_drawing() -> None:
    graph = layout(_plan(poll_flow(on_timeout="none", signal=False)))
    implicit = graph.box("timeout-1")
    assert implicit.kind == "fail" and implicit.title == "fail flow.poll_not_satisfied"
    assert _edges(graph, "timeout") == {("1", "timeout-1")}
    assert _edges(graph, "signal") == set()


def test_an_await_signal_node_shows_its_signal_and_timeout() -> None:
    graph = layout(_plan(await_flow()))
    # nodes: 0 start, 1 await t.ready (on_timeout: 2 fail), 3 after
    assert graph.box("1").title == "await t.ready"
    assert graph.box("1").details == ("timeout 1h",)
    assert _edges(graph, "signal") == {("1", "3")}
    assert _edges(graph, "timeout") == {("1", "2")}
    assert graph.box("2").title == "fail t.no_callback"


def test_durations_and_schedules_read_as_people_write_them() -> None:
    from datetime import timedelta

    assert human_duration(timedelta(hours=4)) == "4h"
    assert human_duration(timedelta(seconds=90)) == "1m30s"
    assert human_duration(timedelta(milliseconds=250)) == "250ms"
    assert describe_backoff(INTERVAL) == "every 1m"


def test_the_steps_that_call_a_provider_name_it(document_plan: Plan) -> None:
    graph = layout(document_plan)
    drawn = {n.key: n for n in graph.boxes}
    # the sample's OCR calls (the upload, each status attempt, the extraction that reads the
    # text back, the cancel) go to provider ocr
    calling = {key for key, n in drawn.items() if n.provider is not None}
    assert calling == {"0", "2", "5", "comp-0"}, calling
    assert {drawn[key].provider for key in calling} == {"ocr"}
    assert drawn["2"].provider_line == "calls ocr"
    # drawn under the box's detail, inside the box
    assert drawn["2"].lines == ("one attempt, tries for 3m",)
    assert _needed(drawn["2"]) <= drawn["2"].w
    assert drawn["1"].provider is None and drawn["end"].provider is None  # the poll calls none


def _needed(box: GraphBox) -> float:
    line = box.provider_line or ""
    return len(line) * 6.4 + 24
