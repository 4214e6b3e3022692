"""Event delivery routes: the state of each event's delivery to each subscriber, and retry.

They read and write through :class:`flowpark.engine.ports.outbox.Deliveries` (no SQL here).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from flowpark.api.deps import DeliveriesDep, EngineDep, OperateToken, ReadToken
from flowpark.api.inputs import JsonBodyRoute
from flowpark.api.models import DeliveryView
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API
from flowpark.errors import DeliveryNotFailed, DeliveryNotFound, ErrorCode

__all__ = ["build_delivery_router", "delivery_view"]

MAX_SEQUENCE = 2**63 - 1


def _at(instant: datetime | None) -> str | None:
    return instant.isoformat().replace("+00:00", "Z") if instant is not None else None


def delivery_view(row: dict[str, Any]) -> dict[str, Any]:
    """One delivery (camelCase) from the store's row dict."""
    return {
        "deliveryId": row["sequence"],
        "eventId": row["event_id"],
        "eventName": row.get("event_name"),
        "instanceId": row["instance_id"],
        "subscriber": row["subscriber"],
        "state": row["state"],
        "tries": row["tries"],
        "nextTryAt": _at(row["next_try_at"]) if row["state"] == "pending" else None,
        "lastError": row["last_error"],
        "lastStatus": row["last_status"],
        "deliveredAt": _at(row["delivered_at"]),
        "createdAt": _at(row["created_at"]),
    }


def build_delivery_router() -> APIRouter:
    """``GET /api/v1/deliveries`` and ``POST /api/v1/deliveries/{deliveryId}/retry``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["deliveries"])

    @router.get(
        "/deliveries",
        operation_id="list_deliveries",
        response_model=list[DeliveryView],
        # an instanceId that cannot name an instance (not a UUID) is 404 instance_not_found
        responses=problem_responses(ErrorCode.INPUT_INVALID, ErrorCode.INSTANCE_NOT_FOUND),
    )
    async def deliveries(
        token: ReadToken,
        store: DeliveriesDep,
        state: Literal["pending", "delivered", "failed"] | None = Query(None),
        subscriber: str | None = Query(None, max_length=200),
        instance_id: str | None = Query(None, alias="instanceId", max_length=100),
        after: int | None = Query(None, ge=0, le=MAX_SEQUENCE),
        limit: int = Query(100, ge=1, le=1000),
    ) -> JSONResponse:
        """Event deliveries (scope ``read``) in creation order: one per event and
        subscriber, with its ``state`` (``pending``, ``delivered``, ``failed``: its tries
        ran out), ``tries``
        (tries made), ``nextTryAt`` (pending), ``lastError``/``lastStatus`` and
        ``deliveredAt``. Filters: ``state``, ``subscriber``, ``instanceId``; ``after`` a
        ``deliveryId`` (a cursor: the last one of the previous page)."""
        rows = await store.list_deliveries(
            state=state, subscriber=subscriber, instance_id=instance_id, after=after, limit=limit
        )
        return JSONResponse([delivery_view(r) for r in rows])

    @router.post(
        "/deliveries/{delivery_id}/retry",
        operation_id="retry_delivery",
        response_model=DeliveryView,
        responses=problem_responses(
            ErrorCode.DELIVERY_NOT_FOUND, ErrorCode.DELIVERY_NOT_FAILED, ErrorCode.INPUT_INVALID
        ),
    )
    async def retry(
        token: OperateToken, engine: EngineDep, store: DeliveriesDep, delivery_id: int
    ) -> JSONResponse:
        """Send a failed delivery again (scope ``operate``): it becomes ``pending``, due
        now, its tries counted afresh. 404 ``delivery_not_found``; 409
        ``delivery_not_failed`` when it is pending or delivered."""
        if not 0 <= delivery_id <= MAX_SEQUENCE:
            raise DeliveryNotFound(f"no delivery {delivery_id}", delivery_id=delivery_id)
        try:
            row = await store.retry(delivery_id, engine.clock.now())
        except ValueError as exc:
            raise DeliveryNotFailed(str(exc), delivery_id=delivery_id) from None
        if row is None:
            raise DeliveryNotFound(f"no delivery {delivery_id}", delivery_id=delivery_id)
        return JSONResponse(delivery_view(row))

    return router
