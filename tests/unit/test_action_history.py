"""How an operator action's outcome reads in the history: the API's ``outcome`` and
``code`` of each recorded ``details`` shape (an earlier release's too), the console's line
and timeline mark, and ``flowpark instances show``'s line."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from flowpark.api.explain import action_outcome
from flowpark.ui.instances import action_summary
from flowpark.ui.timeline import build_timeline
from tests.unit.test_cli_client import ID, cli, node

__all__ = ["node"]  # the scripted node fixture, shared

REFUSED: dict[str, Any] = {
    "refused": "no_budget",
    "status": 409,
    "problem": {"detail": "it does not wait in a poll with a budget", "code": "no_budget"},
}


@pytest.mark.parametrize(
    ("details", "outcome"),
    [
        ({"answer": {"woken": True}, "status": 200}, ("done", None)),
        (REFUSED, ("refused", "no_budget")),
        (
            {"refused": "instance_busy", "status": 409, "tryAgain": True},
            ("refused", "instance_busy"),
        ),
        ({"pending": True}, ("pending", None)),
        # as an earlier release recorded refusals
        ({"answer": {"instanceId": ID, "refused": "input_invalid"}}, ("refused", "input_invalid")),
        ({"refused": "no_budget", "extendBy": 60.0}, ("refused", "no_budget")),
    ],
)
def test_the_outcome_of_each_recorded_shape(
    details: dict[str, Any], outcome: tuple[str, str | None]
) -> None:
    assert action_outcome(details) == outcome


def history(outcome: str, code: str | None, details: dict[str, Any]) -> dict[str, Any]:
    return {
        "actionId": "a-1",
        "action": "extend_budget",
        "actor": "ops",
        "actedAt": "2026-12-02T10:00:30Z",
        "outcome": outcome,
        "code": code,
        "details": details,
    }


def test_the_console_says_what_was_refused_and_what_has_no_outcome() -> None:
    refused = action_summary(history("refused", "no_budget", REFUSED))
    assert refused == "refused, no_budget: it does not wait in a poll with a budget"
    assert "no outcome recorded" in action_summary(history("pending", None, {"pending": True}))
    done = history("done", None, {"answer": {"endsAt": "2026-12-02T12:00:00Z"}, "status": 200})
    assert action_summary(done) == "endsAt: 2026-12-02T12:00:00Z"


def test_the_console_prints_json_words_not_python_values() -> None:
    answer = {"woken": True, "state": "suspended", "cappedByDeadline": False, "extendedBy": 600}
    line = action_summary(history("done", None, {"answer": answer, "status": 200}))
    assert line == "woken: yes, state: suspended, extendedBy: 600, cappedByDeadline: no"
    assert "True" not in line and "False" not in line and "None" not in line


def test_action_labels_seconds_apart_do_not_overlap() -> None:
    attempt = {"attempt": 0, "outcome": "success", "startedAt": "2026-12-02T10:00:00Z"}
    now = datetime(2026, 12, 2, 11, 0, tzinfo=UTC)
    acted = [
        {**history("done", None, {}), "action": name, "actedAt": f"2026-12-02T10:30:0{n}Z"}
        for n, name in enumerate(("wake", "extend_budget", "cancel"))
    ]
    far = {**history("done", None, {}), "action": "wake", "actedAt": "2026-12-02T10:55:00Z"}
    chart = build_timeline([attempt], now, None, None, actions=[*acted, far])
    assert chart is not None
    marks = sorted(chart.actions, key=lambda m: m.x)
    close = marks[:3]
    assert len({m.label_y for m in close}) == 3  # one lane each
    assert marks[3].label_y == close[0].label_y  # far enough: back in the first lane
    assert all(m.label_y > chart.axis_y for m in marks)  # below the axis, not on the rows
    assert chart.height >= max(m.label_y for m in marks)


def test_the_timeline_marks_a_refused_action_as_refused() -> None:
    attempt = {"attempt": 0, "outcome": "success", "startedAt": "2026-12-02T10:00:00Z"}
    now = datetime(2026, 12, 2, 10, 1, tzinfo=UTC)
    chart = build_timeline(
        [attempt], now, None, None, actions=[history("refused", "no_budget", REFUSED)]
    )
    assert chart is not None
    (mark,) = chart.actions
    assert mark.outcome == "refused" and mark.tip.endswith(": refused (no_budget)")


def test_show_prints_a_refused_action_with_its_code(
    node: Callable[..., list[httpx.Request]],
) -> None:
    view = {
        "instanceId": ID,
        "flow": "document.process",
        "version": "1.0.0",
        "state": "suspended",
        "createdAt": "2026-12-02T09:00:00Z",
        "actions": [history("refused", "no_budget", REFUSED)],
    }
    node(httpx.Response(200, json=view))
    done = cli("instances", "show", ID, "--token", "t")
    assert done.exit_code == 0, done.output
    assert "action: extend_budget by ops at" in done.output
    assert "refused: no_budget" in done.output
