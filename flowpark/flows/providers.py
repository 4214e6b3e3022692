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

from flowpark.flows.durations import DurationLike, to_timedelta

__all__ = [
    "MAX_BURST",
    "MAX_RATE",
    "MAX_WINDOW",
    "MIN_RATE",
    "PROVIDER_NAME",
    "PUSHBACK_STATUSES",
    "WINDOW_MARGIN",
    "Provider",
    "ProviderPushback",
    "check_limit",
    "pushback_of",
    "retry_after_instant",
]

#: The format of a provider's name (rule ``provider.name_invalid``): 1 to 64 of
#: ``a-z 0-9 _ . -``, starting with a letter or digit (it is a URL segment and a label).
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
#: The lowest rate a provider's limit may name, calls per second (declared, set by
#: ``FLOWPARK_PROVIDER_LIMITS`` or changed live): one call every 1,000 s. Below it a call
#: slot is further away than any wait a flow declares, and the schedule's arithmetic (an
#: instant in seconds since the epoch plus ``1 / rate``) leaves the range of an instant.
MIN_RATE = 0.001
#: The highest rate a provider's limit may name, calls per second (declared, set or changed
#: live): a limit is a vendor's contract, and no vendor takes more than this from one account.
MAX_RATE = 1_000_000.0
#: The longest window a limit declared as ``limit`` calls ``per`` window may name.
MAX_WINDOW = timedelta(days=1)
#: The spare time a limit declared as ``limit`` calls ``per`` window keeps in each window:
#: its schedule spreads the ``limit`` calls over ``per`` plus this, so a call that reaches
#: the vendor up to this much later than its slot (a slot is used up to 50 ms after its
#: instant, then the call's own way: a busy node, the network) still leaves at most
#: ``limit`` calls in any window of ``per`` as the vendor counts them.
WINDOW_MARGIN = timedelta(milliseconds=100)
#: The highest burst (and per-node in-flight cap) a provider's limit may name, calls.
MAX_BURST = 1_000_000
#: HTTP statuses that are a provider's pushback (not a failed try).
PUSHBACK_STATUSES = frozenset({429, 503})


def check_limit(
    name: str,
    rate_per_second: float,
    burst: int | None = None,
    max_in_flight: int | None = None,
    floor_ratio: float | None = None,
) -> None:
    """Refuse a provider limit out of range: the one rule for a declaration, the
    ``FLOWPARK_PROVIDER_LIMITS`` setting, the store and an operator's live change.

    Args:
        name: the provider (named in the message).
        rate_per_second: calls per second, :data:`MIN_RATE` to :data:`MAX_RATE` (a float;
            a bool is refused).
        burst: 1 to :data:`MAX_BURST` (None: not checked).
        max_in_flight: 1 to :data:`MAX_BURST` (None: not checked).
        floor_ratio: in (0, 1] (None: not checked).

    Raises:
        ValueError: the first value out of range, named with its bounds.
    """
    rate = rate_per_second
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        or not math.isfinite(rate)
        or not MIN_RATE <= rate <= MAX_RATE
    ):
        raise ValueError(
            f"provider {name!r}: rate_per_second must be a number from {MIN_RATE:g} to "
            f"{MAX_RATE:g} calls per second (got {rate!r})"
        )
    for field_name, value in (("burst", burst), ("max_in_flight", max_in_flight)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_BURST:
            raise ValueError(
                f"provider {name!r}: {field_name} must be an integer from 1 to {MAX_BURST} "
                f"(got {value!r})"
            )
    if floor_ratio is not None and not (
        isinstance(floor_ratio, int | float)
        and not isinstance(floor_ratio, bool)
        and 0.0 < floor_ratio <= 1.0
    ):
        raise ValueError(f"provider {name!r}: floor_ratio must be in (0, 1] (got {floor_ratio!r})")


@dataclass(frozen=True)
class Provider:
    """An external system capabilities call, with the limit all nodes share.

    A limit is declared as the vendor states it, ``limit`` calls ``per`` window, or as a
    rate::

        OCR = Provider("ocr", limit=10, per="PT1S")  # "10 requests per second"
        GITHUB = Provider("github", limit=5000, per="PT1H", burst=100)
        BUILDS = Provider("builds", rate_per_second=20, burst=5)

        class OcrStatus(Capability):
            id = "ocr.status"
            provider = OCR

    Either way the schedule of call slots puts at most ``rate_per_second x W`` calls in any
    window of ``W`` seconds (``W >= burst / rate_per_second``), the burst included: after a
    burst the next slot comes one slot's time per call of the burst later. A limit declared
    with ``limit`` and ``per`` spreads its calls over ``per`` plus :data:`WINDOW_MARGIN`
    (``rate_per_second = limit / (per + WINDOW_MARGIN)``), so it holds at the vendor when a
    call arrives a little late. See ``docs/providers.md`` for choosing ``burst``.

    Attributes:
        name: stable name, 1 to 64 of ``a-z 0-9 _ . -`` starting with a letter or digit,
            unique per node: two
            different declarations under one name are a definition error
            (``provider.conflicting_declaration``); a malformed one too
            (``provider.name_invalid``).
        rate_per_second: calls per second of all nodes together (:data:`MIN_RATE` to
            :data:`MAX_RATE`); computed from ``limit`` and ``per`` when they are given
            (then leave it out). A deployment may override it (``FLOWPARK_PROVIDER_LIMITS``)
            and an operator may change it live.
        burst: calls allowed at once after a quiet time (1 to :data:`MAX_BURST`); at most
            ``limit`` keeps a sliding window of ``per`` (it is refused above ``limit``).
        max_in_flight: cap on calls in flight at once on each node (1 to
            :data:`MAX_BURST`; None: no cap).
        floor_ratio: pushback never lowers the effective rate below
            ``rate_per_second * floor_ratio`` (0 < floor_ratio <= 1).
        limit: the vendor's count: at most this many calls in any window of ``per``
            (1 to :data:`MAX_BURST`), or None.
        per: the vendor's window (an ISO-8601 duration such as ``"PT1S"``, or a
            ``timedelta``; more than 0, at most :data:`MAX_WINDOW`), with ``limit``.

    Raises:
        ValueError: a limit out of range, or neither (or both) of ``rate_per_second`` and
            ``limit``/``per`` (raised when the provider is built).
    """

    name: str
    rate_per_second: float = 0.0
    burst: int = 1
    max_in_flight: int | None = None
    floor_ratio: float = 0.1
    limit: int | None = None
    per: DurationLike | None = None

    def __post_init__(self) -> None:
        if self.limit is not None or self.per is not None:
            self._from_window()
        check_limit(
            self.name, self.rate_per_second, self.burst, self.max_in_flight, self.floor_ratio
        )

    def _from_window(self) -> None:
        """Set ``rate_per_second`` (and ``per`` as a ``timedelta``) from ``limit`` per
        ``per``."""
        name = self.name
        limit, per = self.limit, self.per
        if limit is None or per is None:
            raise ValueError(f"provider {name!r}: limit and per go together")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_BURST:
            raise ValueError(f"provider {name!r}: limit must be an integer from 1 to {MAX_BURST}")
        window = to_timedelta(per, name="per")
        if not timedelta(0) < window <= MAX_WINDOW:
            raise ValueError(f"provider {name!r}: per must be more than 0, at most {MAX_WINDOW}")
        if self.burst > limit:
            raise ValueError(
                f"provider {name!r}: a burst above the limit ({self.burst} > {limit}) would "
                f"put more than {limit} calls in a window of {window}"
            )
        rate = limit / (window + WINDOW_MARGIN).total_seconds()
        if self.rate_per_second and not math.isclose(self.rate_per_second, rate):
            # (a copy made by dataclasses.replace carries the rate computed here: kept)
            raise ValueError(f"provider {name!r}: give rate_per_second, or limit and per, not both")
        object.__setattr__(self, "per", window)
        object.__setattr__(self, "rate_per_second", rate)


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
