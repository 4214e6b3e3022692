"""The demo's progress line names the attempt count and the last attempt, not the whole list;
its journal is one plain sentence per row (no bare scope numbers or bound names); its options
are checked before anything is served."""

import pytest
from typer.testing import CliRunner

from flowpark.cli import demo
from flowpark.cli.demo import _last_attempt, _path, journal_lines
from flowpark.cli.main import app


def test_no_attempt_yet() -> None:
    assert _last_attempt([]) == "attempts: 0"


def test_last_polled_attempt_with_lateness() -> None:
    attempts = [
        {"attempt": 0, "outcome": "success", "latenessSeconds": 0.0, "tries": [{"try": 1}]},
        {"attempt": 1, "outcome": "success", "latenessSeconds": 0.8014, "tries": [{"try": 1}]},
    ]
    assert _last_attempt(attempts) == "attempts: 2, last #1 success (0.80 s late)"


def test_an_attempt_woken_before_it_was_due_is_early_not_negatively_late() -> None:
    attempts = [{"attempt": 0, "outcome": "success", "latenessSeconds": -1.5}]
    assert _last_attempt(attempts) == "attempts: 1, last #0 success (1.50 s early)"


def test_last_attempt_ended_by_a_signal() -> None:
    attempts = [
        {"attempt": 0, "outcome": "success", "latenessSeconds": 0.0},
        {"attempt": 1, "outcome": "signal", "signal": "ocr.completed", "latenessSeconds": None},
    ]
    line = _last_attempt(attempts)
    assert line == "attempts: 2, last #1 ended by signal ocr.completed"
    assert "tries" not in line


def _row(
    sequence: int, step: int, scope: int, kind: str, name: str, **more: object
) -> dict[str, object]:
    row: dict[str, object] = {
        "sequence": sequence,
        "stepId": step,
        "scope": scope,
        "kind": kind,
        "capabilityId": name,
        "outcome": "success",
        "try": 1,
        "values": {},
    }
    row.update(more)
    return row


def test_the_journal_reads_as_one_sentence_a_row() -> None:
    rows = [
        _row(1, 0, 0, "deadline", "retry.total", values={"endsAt": "2026-01-01T10:03:00Z"}),
        _row(2, 0, 0, "step", "ocr.upload"),
        _row(3, 1, 0, "deadline", "poll.budget", values={"endsAt": "2026-01-01T14:00:00Z"}),
        _row(4, 2, 0, "deadline", "retry.total", values={"endsAt": "2026-01-01T10:03:01Z"}),
        _row(
            5,
            2,
            0,
            "step",
            "ocr.status",
            outcome="failure",
            errorType="ConnectTimeout",
            final=False,
            nextTryAt="2026-01-01T10:00:02Z",
        ),
        _row(6, 2, 0, "step", "ocr.status", **{"try": 2}),
        _row(7, 1, 1, "signal", "ocr.completed"),
        _row(8, 0, 0, "compensation", "ocr.upload"),
        _row(9, 6, 0, "emit", "document.processed"),
    ]
    lines = journal_lines(rows)
    assert lines[0].split() == [
        "#1",
        "step",
        "0",
        "ocr.upload",
        "retry",
        "window",
        "stored:",
        "ends",
        "2026-01-01",
        "10:03:00",
        "UTC",
    ]
    assert "ocr.upload" in lines[0] and "retry.total" not in lines[0]  # named by what it bounds
    assert lines[1].endswith("try 1: success")
    assert " poll " in lines[2] and "poll budget stored: ends 2026-01-01 14:00:00 UTC" in lines[2]
    assert "ocr.status" in lines[3] and "attempt 0, retry window stored" in lines[3]
    assert lines[4].endswith(
        "attempt 0, try 1: failure (ConnectTimeout; next try 2026-01-01 10:00:02 UTC)"
    )
    assert lines[5].endswith("attempt 0, try 2: success")
    assert "signal ocr.completed" in lines[6] and lines[6].endswith("(during attempt 1)")
    assert lines[7].endswith("compensation (undo) try 1: success")
    assert lines[8].endswith("event written to the outbox")
    assert not any(" scope " in line for line in lines)


def test_the_headings_say_what_ends_each_wait() -> None:
    assert _path(webhook=True, callbacks=True) == "webhook (fake OCR completes now)"
    assert "callback" in _path(webhook=False, callbacks=True)
    # FLOWPARK_OCR_CALLBACKS=false: no webhook fires, a status check ends both waits
    assert "webhook" not in _path(webhook=True, callbacks=False)
    assert "next status check" in _path(webhook=True, callbacks=False)
    assert "callbacks off" in _path(webhook=False, callbacks=False)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--pages", "0"),
        ("--pages", "10001"),
        ("--per-page", "-1"),
        ("--per-page", "nan"),
        ("--scan-interval", "0"),
        ("--scan-interval", "inf"),
    ],
)
def test_an_option_out_of_range_is_refused_by_name_before_anything_is_served(
    monkeypatch: pytest.MonkeyPatch, option: str, value: str
) -> None:
    served: list[dict[str, object]] = []

    def run_demo(**kwargs: object) -> int:
        served.append(kwargs)
        return 0

    monkeypatch.setattr(demo, "run_demo", run_demo)
    done = CliRunner().invoke(app, ["demo", option, value])
    assert done.exit_code == 2
    assert f"Invalid value for '{option}'" in done.output
    assert served == []
