"""An expected store outage is logged as one warning line per kind and interval, with the
count of the reports in between, and never with a traceback."""

from __future__ import annotations

import logging

import pytest

from flowpark.errors import StoreUnavailable
from flowpark.outages import OutageLog


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_kind_and_interval_with_the_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Monotonic()
    outages = OutageLog(logging.getLogger("test.outages"), interval_seconds=10, monotonic=clock)
    with caplog.at_level(logging.INFO, logger="test.outages"):
        for _ in range(25):  # 2.5 s of reports, ten a second
            outages.unavailable("sweep", StoreUnavailable("database error: refused"))
            clock.now += 0.1
        outages.unavailable("api", "database error: refused")
        clock.now += 8.0
        outages.unavailable("sweep", "database error: still refused")  # 10.5 s after the first
        outages.unavailable("sweep", "database error: still refused")
        outages.recovered("sweep")
        outages.recovered("retention")  # never failed: nothing

    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "store unavailable (sweep): database error: refused",
        "store unavailable (api): database error: refused",
        "store unavailable (sweep): 25 times in the last 10.5 s; last: database error: "
        "still refused",
        "store unavailable (sweep): 1 more times in the last 0.0 s; answering again",
    ]
    assert all(r.exc_info is None for r in caplog.records)
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 4


def test_a_recovery_after_a_single_report_is_one_info_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outages = OutageLog(logging.getLogger("test.outages"), monotonic=Monotonic())
    with caplog.at_level(logging.INFO, logger="test.outages"):
        outages.unavailable("delivery", "down")
        outages.recovered("delivery")
        outages.unavailable("delivery", "down again")  # a new outage: logged at once
    assert [r.getMessage() for r in caplog.records] == [
        "store unavailable (delivery): down",
        "store answering again (delivery)",
        "store unavailable (delivery): down again",
    ]
