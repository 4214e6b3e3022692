"""Answers about flows, plans, event streams, reviews, deliveries and health."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from flowpark.api.models._base import (
    _AT,
    _ID,
    _LATER,
    ApiModel,
    _examples,
)
from flowpark.flows.plan import Profile

__all__ = [
    "DeliveryView",
    "EventView",
    "FlowView",
    "Health",
    "PlanView",
    "Readiness",
    "ReviewView",
    "StreamMessageView",
]


class StreamMessageView(ApiModel):
    """One stream message; ``sequence`` is the cursor to resume after."""

    model_config = _examples(
        {"sequence": 31, "stream": "JobProgress", "createdAt": _AT, "value": {"state": "RUNNING"}}
    )

    sequence: int
    stream: str
    created_at: datetime | None
    value: Any


class EventView(ApiModel):
    """One outbox event."""

    model_config = _examples(
        {
            "sequence": 7,
            "id": "01936b2e-9d22-7e3b-81c5-1fa06d7e8f92",
            "instanceId": _ID,
            "name": "document.processed",
            "payload": {"documentId": "invoice-42", "fieldCount": 3},
            "createdAt": _AT,
            "publishedAt": None,
        }
    )

    sequence: int
    id: str
    instance_id: str
    name: str
    payload: Any
    created_at: datetime | None
    published_at: datetime | None


class ReviewView(ApiModel):
    """One item of the human review queue: what the instance asked (``subject``,
    ``reason``, ``details``), where the item is (``state``: ``open``, ``claimed``,
    ``resolved``, ``dismissed``) and who did what with it, when."""

    model_config = _examples(
        {
            "sequence": 3,
            "id": "01936b2e-a033-7f4c-92d6-20b17e8f9a03",
            "instanceId": _ID,
            "flow": "document.process",
            "subject": "invoice-42",
            "reason": "the OCR did not finish within the budget",
            "details": {},
            "createdAt": _AT,
            "state": "claimed",
            "claimedBy": "ops-alice",
            "claimedAt": _AT,
            "closedBy": None,
            "closedAt": None,
            "note": None,
        }
    )

    sequence: int
    id: str
    instance_id: str
    flow: str = Field(description="The instance's flow name (empty once it was purged).")
    subject: str
    reason: str
    details: Any
    created_at: datetime | None
    state: Literal["open", "claimed", "resolved", "dismissed"]
    claimed_by: str | None = Field(description="Who claimed it (the token's name).")
    claimed_at: datetime | None
    closed_by: str | None = Field(description="Who resolved or dismissed it.")
    closed_at: datetime | None
    note: str | None = Field(description="The note it was resolved or dismissed with.")


class FlowView(ApiModel):
    """A flow version: one this node serves (``served`` true, with its definition), or one
    it does not serve that still has unfinished instances (``served`` false, name, version
    and ``unfinished`` only: they wait for a node that serves it)."""

    model_config = _examples(
        {
            "name": "document.process",
            "version": "1.0.0",
            "served": True,
            "unfinished": 12,
            "profile": "durable",
            "route": "/api/v1/documents",
            "signals": ["ocr.completed"],
            "streams": [],
            "deadlineSeconds": None,
            "providers": ["ocr"],
        }
    )

    name: str
    version: str
    served: bool
    unfinished: int = Field(ge=0, description="Running and suspended instances.")
    profile: Profile | None = None
    route: str | None = None
    signals: list[str] = Field(default_factory=list)
    streams: list[str] = Field(default_factory=list)
    deadline_seconds: float | None = None
    providers: list[str] = Field(
        default_factory=list, description="The providers its capabilities call, by name."
    )


class PlanView(ApiModel):
    """A flow version's compiled plan: its steps in order; ``end`` is the index that
    completes the flow."""

    model_config = _examples(
        {
            "name": "document.process",
            "version": "1.0.0",
            "profile": "durable",
            "route": "/api/v1/documents",
            "deadlineSeconds": None,
            "signals": ["ocr.completed"],
            "streams": [],
            "providers": ["ocr"],
            "end": 2,
            "steps": [
                {"index": 0, "kind": "capability", "capabilityId": "ocr.upload", "next": 1},
                {"index": 1, "kind": "poll", "bodyIndex": 0, "timeoutSeconds": 3600.0},
            ],
        }
    )

    name: str
    version: str
    profile: Profile
    route: str | None
    deadline_seconds: float | None
    signals: list[str]
    streams: list[str]
    providers: list[str] = Field(
        default_factory=list,
        description="The providers its capabilities call (compensations included), by name: "
        "`GET /api/v1/providers/{name}` shows each one's limit and load.",
    )
    end: int
    steps: list[dict[str, Any]] = Field(
        description="each with `index` and `kind` (`step`, `poll`, `await`, `fail`, "
        "`emit`) and the fields of its kind"
    )


class DeliveryView(ApiModel):
    """The delivery of one event to one subscriber."""

    model_config = _examples(
        {
            "deliveryId": 14,
            "eventId": "01936b2e-9d22-7e3b-81c5-1fa06d7e8f92",
            "eventName": "document.processed",
            "instanceId": _ID,
            "subscriber": "billing",
            "state": "pending",
            "tries": 1,
            "nextTryAt": _LATER,
            "lastError": "503 Service Unavailable",
            "lastStatus": 503,
            "deliveredAt": None,
            "createdAt": _AT,
        }
    )

    delivery_id: int
    event_id: str
    event_name: str | None
    instance_id: str
    subscriber: str
    state: str = Field(description="`pending`, `delivered` or `failed` (its tries ran out)")
    tries: int = Field(description="tries made (each one POST to the subscriber)")
    next_try_at: datetime | None
    last_error: str | None
    last_status: int | None
    delivered_at: datetime | None
    created_at: datetime | None


class Health(ApiModel):
    """Liveness of a node."""

    model_config = _examples({"status": "ok", "node": "node-a"})

    status: str
    node: str


class Readiness(ApiModel):
    """A node ready to serve: every check ``ok``."""

    model_config = _examples(
        {"status": "ready", "checks": {"database": "ok", "schema": "ok", "sweep": "ok"}}
    )

    status: str
    checks: dict[str, str]
    #: what an operator should know that does not make this node unready: ``sweepers``
    #: says overdue work has no live sweeping node (on every node)
    warnings: dict[str, str] | None = None
