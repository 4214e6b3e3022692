"""The demo's progress line names the attempt count and the last attempt, not the whole list."""

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
