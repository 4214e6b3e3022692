"""``GET /metrics`` of ``flowpark serve``: the node's Prometheus metrics
(:class:`flowpark.runtime.telemetry.Telemetry`).

Access (``FLOWPARK_METRICS_ACCESS``):

* ``loopback`` (default): answered to clients on a loopback address only; anything else
  gets 403 ``metrics_forbidden``. For a Prometheus on the same host, or a sidecar.
* ``token``: the request needs ``Authorization: Bearer <token>`` with one of
  ``FLOWPARK_API_TOKENS`` (401 ``unauthorized`` otherwise).
* ``open``: anyone who reaches the port (behind a network policy).

``flowpark worker`` serves its metrics with prometheus-client's own listener instead
(``--metrics-port``), without this module and FastAPI.
"""

from __future__ import annotations

import asyncio
import ipaddress

from fastapi import FastAPI, Request, Response

from flowpark.api.auth import require_token
from flowpark.api.problems import problem
from flowpark.errors import ErrorCode
from flowpark.runtime.metrics import CONTENT_TYPE_LATEST, render
from flowpark.runtime.telemetry import Telemetry
from flowpark.settings import Settings

__all__ = ["add_metrics_route"]


def _loopback(host: str | None) -> bool:
    if host is None:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def add_metrics_route(app: FastAPI, settings: Settings, telemetry: Telemetry) -> None:
    """Add ``GET /metrics`` to ``app`` (when metrics are on)."""

    if telemetry.metrics is not None:
        metrics = telemetry.metrics

        @app.get("/metrics", include_in_schema=False)
        async def metrics_route(request: Request) -> Response:
            """Prometheus metrics of this node (all worker processes under ``serve
            --workers N``); access as ``FLOWPARK_METRICS_ACCESS`` says."""
            access = settings.metrics_access
            if access == "token":
                await require_token(request)
            elif access == "loopback":
                host = request.client.host if request.client else None
                if not _loopback(host):
                    return problem(
                        ErrorCode.METRICS_FORBIDDEN,
                        "metrics are served to loopback clients only "
                        "(FLOWPARK_METRICS_ACCESS=loopback)",
                    )
            body = await asyncio.to_thread(render, metrics)
            return Response(body, media_type=CONTENT_TYPE_LATEST)
