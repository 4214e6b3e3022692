"""Durations and instants as people type them on the command line.

A duration is a number of seconds (``90``), a number with a unit (``90s``, ``15m``,
``2h``, ``1d``, ``1w``) or several (``1h30m``), or ISO-8601 (``PT2H``, ``P1D``). An instant
is ISO-8601 (``2026-12-01T09:30:00Z``; without an offset it is UTC; a date alone is its
midnight UTC), ``now``, ``today`` or ``yesterday`` (midnight UTC), or a duration meaning
that long ago (``2h``). A value that is neither is a usage error in these words, never a
parser's.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

import typer

from flowpark.cli.consoles import err
from flowpark.errors import ErrorCode
from flowpark.flows.durations import to_timedelta

__all__ = ["DURATION_HELP", "INSTANT_HELP", "duration_seconds", "instant_text"]

DURATION_HELP = "90, 90s, 15m, 2h, 1d, 1h30m or PT2H"
INSTANT_HELP = (
    "ISO-8601 (2026-12-01T09:30Z; without an offset: UTC), now, today, yesterday, or 2h (ago)"
)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


def _usage(option: str, value: str, what: str) -> typer.Exit:
    err.print(f"error: {ErrorCode.USAGE}: {option} {value!r} is not {what}", markup=False)
    return typer.Exit(2)


def _seconds(text: str) -> float | None:
    value = text.strip().lower()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if math.isfinite(seconds) else None
    if value.startswith("p"):
        try:
            return to_timedelta(value.upper(), name="duration").total_seconds()
        except ValueError:
            return None
    at, total = 0, 0.0
    for match in _PART.finditer(value):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _UNITS[match.group(2)]
        at = match.end()
    return total if at == len(value) else None


def duration_seconds(text: str, option: str, *, positive: bool = False) -> float:
    """``text`` as seconds.

    Raises:
        typer.Exit: 2 (usage) when it is no duration, or (``positive``) not above zero.
    """
    seconds = _seconds(text)
    if seconds is None or seconds < 0:
        raise _usage(option, text, f"a duration ({DURATION_HELP})")
    if positive and seconds <= 0:
        raise _usage(option, text, "a duration above zero")
    return seconds


def instant_text(text: str, option: str, now: datetime | None = None) -> str:
    """``text`` as an ISO-8601 instant with an offset (what the API takes).

    Raises:
        typer.Exit: 2 (usage) when it is no instant.
    """
    now = now or datetime.now(UTC)
    value = text.strip().lower()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    named = {"now": now, "today": midnight, "yesterday": midnight - timedelta(days=1)}
    if value in named:
        return named[value].isoformat()
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        seconds = _seconds(value)
        if seconds is None or seconds < 0:
            raise _usage(option, text, f"an instant ({INSTANT_HELP})") from None
        try:
            return (now - timedelta(seconds=seconds)).isoformat()
        except OverflowError:  # further back than year 1
            raise _usage(option, text, f"an instant ({INSTANT_HELP})") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.isoformat()
