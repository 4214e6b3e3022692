"""Providers: the external systems capabilities call, each with one limit every node shares.

A :class:`Provider` is declared once (a name and a limit) and named by the capabilities that
call it (``Capability.provider``). The engine takes a token from the provider's shared budget
before each try of such a capability; a try without one is *deferred* (the instance parks
until budget is expected, never past a deadline) and is neither a try nor an attempt. A call
the provider pushes back (HTTP 429 or 503, or :class:`ProviderPushback` raised by the
capability) is parked until the provider's ``Retry-After`` and lowers the provider's
effective rate for every node; it is not a failed try.

This module holds the declaration, the exception and the ``Retry-After`` parsing; it imports
no HTTP client (an ``httpx.HTTPStatusError`` is recognised by its ``response`` attribute).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

__all__ = [
    "MAX_BURST",
    "MAX_RATE",
    "PUSHBACK_STATUSES",
    "PROVIDER_NAME",
    "Provider",
    "ProviderPushback",
    "pushback_of",
    "retry_after_instant",
]

#: The format of a provider's name (rule ``provider.name_invalid``): 1 to 64 of
#: ``a-z 0-9 _ . -``, starting with a letter or digit (it is a URL segment and a label).
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
#: The highest rate a provider's limit may name, calls per second (declared, set or changed
#: live): a limit is a vendor's contract, and no vendor takes more than this from one account.
MAX_RATE = 1_000_000.0
#: The highest burst (and per-node in-flight cap) a provider's limit may name, calls.
MAX_BURST = 1_000_000
#: HTTP statuses that are a provider's pushback (not a failed try).
PUSHBACK_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class Provider:
    """An external system capabilities call, with the limit all nodes share.

    Example::

        OCR = Provider("ocr", rate_per_second=20, burst=5)

        class OcrStatus(Capability):
            id = "ocr.status"
            provider = OCR

    Attributes:
        name: stable name, 1 to 64 of ``a-z 0-9 _ . -`` starting with a letter or digit,
            unique per node: two
            different declarations under one name are a definition error
            (``provider.conflicting_declaration``); a malformed one too
            (``provider.name_invalid``).
        rate_per_second: calls per second of all nodes together (> 0, at most
            :data:`MAX_RATE`). A deployment may
            override it (``FLOWPARK_PROVIDER_LIMITS``) and an operator may change it live.
        burst: calls allowed at once above the rate (1 to :data:`MAX_BURST`).
        max_in_flight: cap on calls in flight at once on each node (1 to
            :data:`MAX_BURST`; None: no cap).
        floor_ratio: pushback never lowers the effective rate below
            ``rate_per_second * floor_ratio`` (0 < floor_ratio <= 1).

    Raises:
        ValueError: a limit out of range (raised when the provider is built).
    """

    name: str
    rate_per_second: float
    burst: int = 1
    max_in_flight: int | None = None
    floor_ratio: float = 0.1

    def __post_init__(self) -> None:
        if not (0 < self.rate_per_second <= MAX_RATE and math.isfinite(self.rate_per_second)):
            raise ValueError(
                f"provider {self.name!r}: rate_per_second must be positive, at most {MAX_RATE:g}"
            )
        if not 1 <= self.burst <= MAX_BURST:
            raise ValueError(f"provider {self.name!r}: burst must be 1 to {MAX_BURST}")
        if self.max_in_flight is not None and not 1 <= self.max_in_flight <= MAX_BURST:
            raise ValueError(f"provider {self.name!r}: max_in_flight must be 1 to {MAX_BURST}")
        if not 0.0 < self.floor_ratio <= 1.0:
            raise ValueError(f"provider {self.name!r}: floor_ratio must be in (0, 1]")


class ProviderPushback(Exception):  # noqa: N818 - the provider's word, not an error of ours
    """Raised by a capability when its provider asked to be called later (a 429 or 503, a
    quota answer in a body, a vendor's own "slow down").

    The engine parks the instance until ``retry_after`` (a default backoff when None; never
    past the wait's deadline), does not count the try as failed, and lowers the provider's
    effective rate for every node. An ``httpx.HTTPStatusError`` with status 429 or 503 is
    treated the same way without being wrapped.

    Args:
        retry_after: when to call again: a delay (``timedelta``), an instant (aware
            ``datetime``), or None for the default backoff.
        status: the HTTP status the provider answered, if any.
        detail: a short text for logs and the provider's lowered reason.
    """

    def __init__(
        self,
        retry_after: timedelta | datetime | None = None,
        *,
        status: int | None = None,
        detail: str = "",
    ) -> None:
        super().__init__(detail or f"provider pushback (status {status})")
        self.retry_after = retry_after
        self.status = status
        self.detail = detail


def retry_after_instant(value: str, now: datetime) -> datetime | None:
    """The instant a ``Retry-After`` header value names.

    Args:
        value: the header's value: delay seconds (``"5"``, ``"2.5"``) or an HTTP-date
            (``"Wed, 21 Oct 2026 07:28:00 GMT"``).
        now: the engine clock's instant (aware UTC) a delay counts from.

    Returns:
        The instant (aware UTC; an HTTP-date in the past gives ``now``), or None when the
        value is neither.
    """
    text = value.strip()
    if not text:
        return None
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        return max(when.astimezone(UTC), now)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return now + timedelta(seconds=min(seconds, 86_400.0 * 30))


def pushback_of(
    exc: BaseException, now: datetime
) -> tuple[datetime | None, int | None, str] | None:
    """Whether ``exc`` is a provider's pushback, and until when.

    Args:
        exc: what a try raised.
        now: the engine clock's instant (aware UTC).

    Returns:
        ``(retry-after instant or None, status or None, detail)`` for a
        :class:`ProviderPushback` or an error whose ``response.status_code`` is 429 or 503
        (e.g. ``httpx.HTTPStatusError``; its ``Retry-After`` header in seconds or as an
        HTTP-date); None for any other error (a failed try).
    """
    if isinstance(exc, ProviderPushback):
        after = exc.retry_after
        if isinstance(after, timedelta):
            until: datetime | None = now + max(after, timedelta(0))
        elif isinstance(after, datetime):
            until = max(after if after.tzinfo else after.replace(tzinfo=UTC), now)
        else:
            until = None
        return until, exc.status, exc.detail or str(exc)
    response: Any = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if not isinstance(status, int) or status not in PUSHBACK_STATUSES:
        return None
    headers: Any = getattr(response, "headers", None)
    header = None
    try:
        header = headers.get("Retry-After") if headers is not None else None
    except Exception:  # noqa: BLE001 - a foreign object: no header
        header = None
    until = retry_after_instant(str(header), now) if header is not None else None
    return until, status, f"HTTP {status}"
