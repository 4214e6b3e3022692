"""The fake OCR provider's rate limit and load recorder: what a real vendor's API gateway does.

A :class:`RateGate` stands in front of the provider's public routes (upload, status read):

* **Rate.** With ``rate_per_second`` set, a token bucket (capacity ``burst``) admits calls; a
  call beyond it is answered ``429 Too Many Requests`` with ``Retry-After`` (whole seconds until
  the bucket holds a token again, at least 1) and the body ``{"code": "ocr.rate_limited"}``.
* **Scripted pushback.** :meth:`RateGate.push_back` makes every call answer ``status``
  (429 or 503) with ``Retry-After: retry_after`` for ``duration`` seconds, whatever the rate:
  a benchmark or a demo plays a provider's bad minute with it.
* **Load recorder.** Every call is counted in 100 ms buckets of the gate's clock (epoch
  milliseconds), as ``served`` or ``refused``; :meth:`RateGate.load` returns the buckets, so a
  test or the benchmark sees the provider's calls per second as the provider saw them. The
  last hour is kept.

Admin routes (prefix ``/fake/ocr/admin``, same access as the other admin routes):

* ``GET /load?since=<epoch ms>`` -> :class:`LoadView`
* ``PUT /rate`` ``{"ratePerSecond": float | null, "burst": int | null}`` -> :class:`GateView`
* ``POST /pushback`` ``{"status": 429, "retryAfterSeconds": 5, "durationSeconds": 30}``
  -> :class:`GateView`
* ``DELETE /load`` clears the counts -> :class:`GateView`
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from flowpark.samples.fakes.admin import admin_refusal

__all__ = [
    "BUCKET_MS",
    "RATE_LIMITED",
    "GateView",
    "LoadBucket",
    "LoadView",
    "PushbackRequest",
    "RateChange",
    "RateGate",
    "create_gate_router",
]

#: Width of one load bucket, in milliseconds.
BUCKET_MS = 100
#: Buckets kept (one hour).
_KEPT_BUCKETS = 36_000
#: Instants of served calls kept.
_KEPT_INSTANTS = 100_000
#: The body code of a call refused by the rate.
RATE_LIMITED = "ocr.rate_limited"


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class LoadBucket(_Camel):
    """Calls seen in one 100 ms bucket."""

    start_ms: int = Field(description="The bucket's start, epoch milliseconds (UTC).")
    served: int = Field(description="Calls answered normally.")
    refused: int = Field(description="Calls answered 429 or 503.")


class GateView(_Camel):
    """The gate's configuration now."""

    rate_per_second: float | None = Field(description="Calls/s admitted; null: no limit.")
    burst: int = Field(description="Calls admitted at once above the rate (bucket capacity).")
    pushback_status: int | None = Field(description="Status of the scripted pushback, if on.")
    pushback_retry_after_seconds: int | None = Field(description="Its Retry-After, seconds.")
    pushback_until_ms: int | None = Field(description="Its end, epoch milliseconds.")


class LoadView(GateView):
    """Calls per 100 ms bucket (only buckets with a call), oldest first."""

    bucket_ms: int = Field(default=BUCKET_MS, description="Width of a bucket, milliseconds.")
    buckets: list[LoadBucket]
    served: int = Field(description="Calls served since the counts were cleared.")
    refused: int = Field(description="Calls refused since the counts were cleared.")
    served_ms: list[int] = Field(
        default_factory=list,
        description="The instant (epoch ms) of each call served from `since`, oldest first "
        "(the last 100,000): a vendor's sliding window is counted on these.",
    )


class RateChange(_Camel):
    """A new rate for the gate (``PUT /fake/ocr/admin/rate``)."""

    rate_per_second: float | None = Field(default=None, gt=0, description="null: no limit.")
    burst: int | None = Field(default=None, ge=1, description="null: one second's worth.")


class PushbackRequest(_Camel):
    """A scripted pushback window (``POST /fake/ocr/admin/pushback``)."""

    status: Literal[429, 503] = 429
    retry_after_seconds: int = Field(default=5, ge=0, le=86_400)
    duration_seconds: float = Field(ge=0, le=86_400, description="0 ends a window now.")


@dataclass(frozen=True)
class Refusal:
    """A call the gate refuses: the status and the ``Retry-After`` seconds to answer."""

    status: int
    retry_after: int

    def response(self) -> JSONResponse:
        """The answer: ``status`` with ``Retry-After`` and ``{"code": "ocr.rate_limited"}``."""
        return JSONResponse(
            status_code=self.status,
            content={"code": RATE_LIMITED if self.status == 429 else "ocr.unavailable"},
            headers={"Retry-After": str(self.retry_after)},
        )


def _default_burst(rate: float | None) -> int:
    return max(1, math.ceil(rate)) if rate is not None else 1


class RateGate:
    """A token bucket, a scripted pushback window and a per-100 ms call counter.

    Args:
        rate_per_second: calls/s admitted (> 0), or None: every call is admitted.
        burst: bucket capacity (>= 1); default one second's worth of the rate.
        clock: epoch seconds (float); default :func:`time.time`.

    Attributes:
        clock: the clock the bucket and the counts read (a test may replace it).

    Raises:
        ValueError: ``rate_per_second`` <= 0 or ``burst`` < 1.
    """

    def __init__(
        self,
        rate_per_second: float | None = None,
        burst: int | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.clock = clock or time.time
        self._counts: dict[int, list[int]] = {}
        self._served_ms: deque[int] = deque(maxlen=_KEPT_INSTANTS)
        self._pushback: tuple[int, int, float] | None = None  # status, retry after, until
        self.set_rate(rate_per_second, burst)

    # -- configuration ---------------------------------------------------------------------

    def set_rate(self, rate_per_second: float | None, burst: int | None = None) -> None:
        """Change the rate (None: no limit) and the burst (None: one second's worth); the
        bucket starts full.

        Raises:
            ValueError: ``rate_per_second`` <= 0 or ``burst`` < 1.
        """
        if rate_per_second is not None and not rate_per_second > 0:
            raise ValueError(f"rate_per_second must be > 0, got {rate_per_second}")
        if burst is not None and burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.rate_per_second = rate_per_second
        self.burst = burst if burst is not None else _default_burst(rate_per_second)
        self._tokens = float(self.burst)
        self._filled_at = self.clock()

    def push_back(self, status: int, retry_after: int, duration: float) -> None:
        """Refuse every call with ``status`` and ``Retry-After: retry_after`` for the next
        ``duration`` seconds (0: end a window now)."""
        if duration <= 0:
            self._pushback = None
        else:
            self._pushback = (status, retry_after, self.clock() + duration)

    def view(self) -> GateView:
        """The configuration now."""
        pushback = self._active_pushback(self.clock())
        return GateView(
            rate_per_second=self.rate_per_second,
            burst=self.burst,
            pushback_status=pushback[0] if pushback else None,
            pushback_retry_after_seconds=pushback[1] if pushback else None,
            pushback_until_ms=round(pushback[2] * 1000) if pushback else None,
        )

    # -- calls -----------------------------------------------------------------------------

    def admit(self) -> Refusal | None:
        """Count one call and decide it: None (serve it) or the refusal to answer."""
        now = self.clock()
        refusal = self._decide(now)
        bucket = self._counts.setdefault(int(now * 1000) // BUCKET_MS, [0, 0])
        bucket[0 if refusal is None else 1] += 1
        if refusal is None:
            self._served_ms.append(int(now * 1000))
        if len(self._counts) > _KEPT_BUCKETS:
            oldest = min(self._counts)
            del self._counts[oldest]
        return refusal

    def _active_pushback(self, now: float) -> tuple[int, int, float] | None:
        if self._pushback is not None and now >= self._pushback[2]:
            self._pushback = None
        return self._pushback

    def _decide(self, now: float) -> Refusal | None:
        pushback = self._active_pushback(now)
        if pushback is not None:
            return Refusal(pushback[0], pushback[1])
        rate = self.rate_per_second
        if rate is None:
            return None
        self._tokens = min(float(self.burst), self._tokens + (now - self._filled_at) * rate)
        self._filled_at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return None
        return Refusal(429, max(1, math.ceil((1.0 - self._tokens) / rate)))

    # -- load ------------------------------------------------------------------------------

    def load(self, since_ms: int | None = None) -> LoadView:
        """The calls counted per 100 ms bucket from ``since_ms`` (epoch ms; None: all kept).

        Returns:
            The non-empty buckets, oldest first, with the totals over them.
        """
        first = None if since_ms is None else since_ms // BUCKET_MS
        buckets = [
            LoadBucket(start_ms=key * BUCKET_MS, served=counts[0], refused=counts[1])
            for key, counts in sorted(self._counts.items())
            if first is None or key >= first
        ]
        return LoadView(
            **self.view().model_dump(),
            buckets=buckets,
            served=sum(b.served for b in buckets),
            refused=sum(b.refused for b in buckets),
            served_ms=[ms for ms in self._served_ms if since_ms is None or ms >= since_ms],
        )

    def clear(self) -> None:
        """Forget every count."""
        self._counts.clear()
        self._served_ms.clear()


def create_gate_router(gate: RateGate, admin_token: str | None = None) -> APIRouter:
    """Build the gate's admin routes (``/fake/ocr/admin/...``, see the module docstring).

    Args:
        gate: the gate they read and change.
        admin_token: the bearer token the routes take from a client off loopback.

    Returns:
        An ``APIRouter`` with prefix ``/admin``, to include in the ``/fake/ocr`` router.
    """
    router = APIRouter(prefix="/admin")

    @router.get("/load", response_model=LoadView, response_model_by_alias=True)
    async def load(
        request: Request, since: int | None = Query(default=None, ge=0, description="Epoch ms.")
    ) -> object:
        """Calls per 100 ms bucket, as the provider saw them."""
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        return gate.load(since)

    @router.delete("/load", response_model=GateView, response_model_by_alias=True)
    async def clear(request: Request) -> object:
        """Forget the counts."""
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        gate.clear()
        return gate.view()

    @router.put("/rate", response_model=GateView, response_model_by_alias=True)
    async def rate(change: RateChange, request: Request) -> object:
        """Change the rate the provider admits (null: no limit)."""
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        gate.set_rate(change.rate_per_second, change.burst)
        return gate.view()

    @router.post("/pushback", response_model=GateView, response_model_by_alias=True)
    async def pushback(body: PushbackRequest, request: Request) -> object:
        """Answer every call ``status`` with ``Retry-After`` for ``durationSeconds``."""
        if (refused := admin_refusal(request, admin_token)) is not None:
            return refused
        gate.push_back(body.status, body.retry_after_seconds, body.duration_seconds)
        return gate.view()

    return router
