"""The answers of the provider routes (``/api/v1/providers``) and the body of a live change of
a provider's limit."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import ConfigDict, Field

from flowpark.api.models._base import _AT, _ID, _LATER, JSON_INTEGER, ApiModel, _examples
from flowpark.flows.providers import MAX_BURST, MAX_RATE, MIN_RATE

__all__ = [
    "LimitChangeBody",
    "OldestDeferralView",
    "ProviderCalls",
    "ProviderDetail",
    "ProviderMinuteView",
    "ProviderView",
]


class ProviderCalls(ApiModel):
    """Calls to a provider by outcome, as the nodes reported them."""

    ok: int = Field(ge=0, description="Calls that succeeded.")
    pushback: int = Field(ge=0, description="Calls the provider pushed back (429/503).")
    failed: int = Field(ge=0, description="Calls that failed (a failed try).")
    deferred: int = Field(
        ge=0, description="Due calls deferred for lack of budget or by a pushback."
    )


class ProviderMinuteView(ProviderCalls):
    """One minute of calls to a provider."""

    minute: datetime = Field(description="The minute's start (UTC).")


class OldestDeferralView(ApiModel):
    """The deferred instance parked the longest ago."""

    instance_id: str
    flow: str
    version: str
    since: datetime = Field(description="When it was last parked (deferred).")
    wake_at: datetime | None = Field(description="When it is to try again.")


_EXAMPLE = {
    "name": "ocr",
    "ratePerSecond": 50.0,
    "burst": 5,
    "maxInFlight": None,
    "floorRatio": 0.1,
    "effectiveRate": 25.0,
    "lowered": True,
    "loweredReason": "429 from ocr.status at 2026-12-01T09:30:00Z; Retry-After 5 s",
    "pausedUntil": _LATER,
    "pushbacks": 3,
    "updatedAt": _AT,
    "updatedBy": "declared",
    "flows": ["document.process@1.0.0"],
    "lastMinute": {"ok": 2950, "pushback": 1, "failed": 0, "deferred": 420},
    "deferred": 180,
    "deferredByPushback": 20,
    "waiting": 20000,
    "oldestDeferral": {
        "instanceId": _ID,
        "flow": "document.process",
        "version": "1.0.0",
        "since": _AT,
        "wakeAt": _LATER,
    },
}


class ProviderView(ApiModel):
    """A declared provider: its limit, the rate in force, and what waits on it."""

    model_config = _examples(_EXAMPLE)

    name: str
    rate_per_second: float = Field(
        description="The limit in force: calls per second of all nodes together (declared, "
        "overridden by FLOWPARK_PROVIDER_LIMITS, or set by an operator)."
    )
    burst: int
    max_in_flight: int | None = Field(description="Calls in flight at once on each node.")
    floor_ratio: float = Field(description="Pushback never lowers the rate below this share.")
    effective_rate: float = Field(
        description="The rate the nodes hold to now (calls/s): the limit, lowered by pushback."
    )
    lowered: bool = Field(description="The effective rate is below the limit.")
    lowered_reason: str | None = Field(description="Why the rate was last lowered.")
    paused_until: datetime | None = Field(
        description="No call before this instant (null when the provider is not paused now)."
    )
    pushbacks: int = Field(description="Pushbacks seen in total.")
    updated_at: datetime
    updated_by: str | None = Field(
        description="Who set the limit: `declared`, `setting`, or an operator's token name."
    )
    flows: list[str] = Field(description="The flow versions (`name@version`) that call it.")
    last_minute: ProviderCalls = Field(description="Calls in the last complete minute.")
    deferred: int = Field(description="Instances deferred now for lack of budget.")
    deferred_by_pushback: int = Field(description="Instances parked now by a pushback.")
    waiting: int = Field(
        description="Parked instances whose next wake calls this provider (deferred or not)."
    )
    oldest_deferral: OldestDeferralView | None


class ProviderDetail(ProviderView):
    """A provider and its calls per minute over the last hour."""

    model_config = _examples(
        _EXAMPLE
        | {
            "minutes": [
                {"minute": "2026-12-01T09:29:00Z", "ok": 2990, "pushback": 0}
                | {"failed": 0, "deferred": 0}
            ]
        }
    )

    minutes: list[ProviderMinuteView] = Field(
        description="Calls per minute over the last hour, oldest first (minutes without "
        "calls are absent)."
    )


class LimitChangeBody(ApiModel):
    """An operator's change of a provider's limit: ``ratePerSecond`` replaces the one in
    force; ``burst`` and ``maxInFlight`` replace theirs when given and are kept when left
    out."""

    # JSON names only, as every body: ``rate_per_second`` is an unknown field (422
    # ``input_invalid``), not a second name of ``ratePerSecond``
    model_config = _examples({"ratePerSecond": 20, "burst": 2}) | ConfigDict(
        validate_by_name=False, validate_by_alias=True
    )

    # a JSON number: a string ("1e3") or a boolean is refused, not read as one
    rate_per_second: Annotated[float, JSON_INTEGER] = Field(
        ge=MIN_RATE,
        le=MAX_RATE,
        allow_inf_nan=False,
        description=f"Calls per second of all nodes together, a JSON number from {MIN_RATE:g} "
        f"to {MAX_RATE:g}. It takes effect from now: slots the old limit placed ahead are "
        "not kept.",
    )
    burst: Annotated[int | None, JSON_INTEGER] = Field(
        default=None, ge=1, le=MAX_BURST, description="Calls at once above the rate (>= 1)."
    )
    max_in_flight: Annotated[int | None, JSON_INTEGER] = Field(
        default=None,
        ge=0,
        le=MAX_BURST,
        description="Calls in flight on each node; 0 removes the cap.",
    )
