"""The demo's progress line names the attempt count and the last attempt, not the whole list;
its options are checked before anything is served."""

import pytest
from typer.testing import CliRunner

from app import demo
from app.cli import app
from app.demo import _last_attempt, _path


def test_no_attempt_yet() -> None:
    assert _last_attempt([]) == "attempts=0"


def test_last_polled_attempt_with_lateness() -> None:
    attempts = [
        {"attempt": 0, "outcome": "success", "latenessSeconds": 0.0, "tries": [{"try": 1}]},
        {"attempt": 1, "outcome": "success", "latenessSeconds": 0.8014, "tries": [{"try": 1}]},
    ]
    assert _last_attempt(attempts) == "attempts=2 last=#1 success (0.80 s late)"


def test_last_attempt_ended_by_a_signal() -> None:
    attempts = [
        {"attempt": 0, "outcome": "success", "latenessSeconds": 0.0},
        {"attempt": 1, "outcome": "signal", "signal": "ocr.completed", "latenessSeconds": None},
    ]
    line = _last_attempt(attempts)
    assert line == "attempts=2 last=#1 signal ocr.completed"
    assert "tries" not in line


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
