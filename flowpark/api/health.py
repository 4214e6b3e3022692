"""Health routes: ``GET /healthz`` (liveness; ``HEAD`` too) and ``GET /readyz``
(readiness: the database, its schema, the sweep).

They need no token: an orchestrator's probes call them. ``/metrics`` is the runtime's
(:mod:`flowpark.runtime.telemetry`).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from flowpark.api.deps import NodeParts, NodePartsDep, SettingsDep
from flowpark.api.models import Health, Readiness
from flowpark.api.openapi import problem_responses
from flowpark.api.problems import problem
from flowpark.errors import ErrorCode, SchemaBehindHead
from flowpark.outages import OUTAGES, READY_TIMEOUT_SECONDS
from flowpark.settings import Settings, overdue_before

__all__ = ["READY_TIMEOUT_SECONDS", "build_health_router"]


def build_health_router() -> APIRouter:
    """``GET`` and ``HEAD /healthz``, then ``GET /readyz``."""
    router = APIRouter()

    @router.get("/healthz", tags=["ops"], operation_id="healthz")
    async def healthz(settings: SettingsDep) -> Health:
        """Liveness: the node is up (``HEAD`` answers the same, without a body)."""
        return Health(status="ok", node=settings.node_id)

    # HEAD as its own route: one operation id per method in the OpenAPI document
    router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)

    @router.get(
        "/readyz",
        tags=["ops"],
        operation_id="readyz",
        response_model=Readiness,
        response_model_exclude_unset=True,
        responses=problem_responses(ErrorCode.NOT_READY, auth=False, common=False),
    )
    async def readyz(parts: NodePartsDep, settings: SettingsDep) -> Readiness | JSONResponse:
        """Readiness: the database answers, its schema is at the code's head revision, and
        (on a node that sweeps) a sweep ended without error within the last three scan
        intervals. 200 ``{"status": "ready", "checks": {...}}``, else 503 problem
        ``not_ready`` with the same ``checks`` (each ``ok`` or what failed; an unreachable
        database is ``store_unavailable``, its cause in the node's log only), with
        ``Retry-After`` (the scan interval, whole seconds, at least 1)."""
        checks: dict[str, str] = {}
        schema = parts.schema
        try:
            if schema is None:
                raise RuntimeError("the node is starting")
            await asyncio.wait_for(schema.check_at_head(), READY_TIMEOUT_SECONDS)
            checks["database"] = "ok"
            checks["schema"] = "ok"
        except Exception as exc:  # noqa: BLE001 - each failure is reported, not raised
            if isinstance(exc, SchemaBehindHead):
                checks["database"] = "ok"
                checks["schema"] = str(exc)
            elif schema is None:
                checks["database"] = "starting"
            else:
                # the driver's message names hosts, ports and SQL: to the log only
                checks["database"] = str(ErrorCode.STORE_UNAVAILABLE)
                OUTAGES.unavailable("readyz", f"{type(exc).__name__}: {exc}")
        sweeper = parts.sweeper
        if sweeper is not None:
            window = 3 * settings.timer_scan_interval
            last = sweeper.last_success
            if last is None:
                checks["sweep"] = "no sweep has ended yet"
            elif time.monotonic() - last > window:
                checks["sweep"] = f"last sweep ended {time.monotonic() - last:.1f} s ago"
            else:
                checks["sweep"] = "ok"
        warnings = await _sweep_warnings(parts, settings) if "schema" in checks else {}
        if all(v == "ok" for v in checks.values()) and "database" in checks:
            if warnings:
                return Readiness(status="ready", checks=checks, warnings=warnings)
            return Readiness(status="ready", checks=checks)
        extra: dict[str, Any] = {"warnings": warnings} if warnings else {}
        # a load balancer or a probe asks again after the scan interval, when a sweep may
        # have ended
        retry = str(max(1, math.ceil(settings.timer_scan_interval)))
        return problem(
            ErrorCode.NOT_READY,
            "the node is not ready",
            headers={"Retry-After": retry},
            checks=checks,
            **extra,
        )

    return router


async def _sweep_warnings(parts: NodeParts, settings: Settings) -> dict[str, str]:
    """``{"sweepers": notice}`` when overdue work has no live sweeping node, else empty
    (also when the node rows cannot be read: the database check says why)."""

    nodes, engine = parts.nodes, parts.engine
    if nodes is None or engine is None:
        return {}
    now = engine.clock.now()
    try:
        report = await asyncio.wait_for(
            nodes.report(now, overdue_before(settings, now)), READY_TIMEOUT_SECONDS
        )
    except Exception:  # noqa: BLE001 - the database check reports a fault
        return {}
    return {"sweepers": report.notice} if report.notice else {}
