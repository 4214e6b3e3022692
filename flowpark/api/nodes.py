"""``GET /api/v1/nodes``: the nodes' liveness rows, and whether overdue work has a live
sweeping node to take it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from flowpark.api.deps import EngineDep, NodesDep, ReadToken, SettingsDep
from flowpark.api.models._base import _AT, _LATER, ApiModel, _examples
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.nodes import NodeRecord, Nodes, NodesReport
from flowpark.settings import Settings, overdue_before

__all__ = ["NodeList", "NodeView", "build_nodes_router", "nodes_report", "nodes_view"]


def _at(instant: datetime | None) -> str | None:
    return instant.isoformat().replace("+00:00", "Z") if instant is not None else None


class NodeView(ApiModel):
    """One node process, from the liveness row it writes every beat."""

    model_config = _examples(
        {
            "id": "web-1-4711",
            "role": "serve",
            "version": "0.1.0",
            "flows": ["document.process@1.0.0"],
            "sweeps": True,
            "live": True,
            "sweeping": True,
            "beatSeconds": 10.0,
            "startedAt": _AT,
            "seenAt": _LATER,
            "stoppedAt": None,
            "lastSweepAt": _LATER,
            "lastClaimed": 3,
        }
    )

    id: str
    role: str
    version: str
    flows: list[str]
    sweeps: bool
    live: bool
    sweeping: bool
    beat_seconds: float
    started_at: datetime
    seen_at: datetime
    stopped_at: datetime | None
    last_sweep_at: datetime | None
    last_claimed: int | None


class NodeList(ApiModel):
    """The nodes, the most recently seen first, and the sweep coverage of overdue work."""

    model_config = _examples(
        {
            "nodes": [NodeView.model_config["json_schema_extra"]["examples"][0]],  # type: ignore[index]
            "live": 1,
            "sweeping": 0,
            "overdue": 5,
            "notice": "no live sweeping node: 5 overdue instances will wait until a node "
            "that sweeps runs",
        }
    )

    nodes: list[NodeView]
    live: int
    sweeping: int
    overdue: int
    notice: str | None


def node_view(node: NodeRecord, now: datetime) -> dict[str, Any]:
    """One node as the API shows it (camelCase keys)."""
    return {
        "id": node.id,
        "role": node.role,
        "version": node.version,
        "flows": list(node.flows),
        "sweeps": node.sweeps,
        "live": node.live(now),
        "sweeping": node.sweeping(now),
        "beatSeconds": node.beat_seconds,
        "startedAt": _at(node.started_at),
        "seenAt": _at(node.seen_at),
        "stoppedAt": _at(node.stopped_at),
        "lastSweepAt": _at(node.last_sweep_at),
        "lastClaimed": node.last_claimed,
    }


def nodes_view(report: NodesReport) -> dict[str, Any]:
    """The answer of ``GET /api/v1/nodes`` from a report."""
    return {
        "nodes": [node_view(n, report.now) for n in report.nodes],
        "live": report.live,
        "sweeping": report.sweeping,
        "overdue": report.overdue,
        "notice": report.notice,
    }


async def nodes_report(engine: Engine, nodes: Nodes, settings: Settings) -> NodesReport:
    """The nodes' report as of the engine clock's now (overdue: two scan intervals late).

    Args:
        engine: the node's engine (its clock).
        nodes: the nodes' liveness rows.
        settings: the node's settings (the scan interval).

    Raises:
        StoreUnavailable: the database could not be reached (``store_unavailable``).
    """
    now = engine.clock.now()
    return await nodes.report(now, overdue_before(settings, now))


def build_nodes_router() -> APIRouter:
    """``GET /api/v1/nodes``."""
    router = APIRouter(prefix=API)

    @router.get(
        "/nodes",
        tags=["nodes"],
        operation_id="list_nodes",
        response_model=NodeList,
        responses=problem_responses(),
    )
    async def list_nodes(
        token: ReadToken, engine: EngineDep, nodes: NodesDep, settings: SettingsDep
    ) -> JSONResponse:
        """The node processes that wrote a liveness row in the last day, the most recently
        seen first: `id`, `role` (`serve` or `worker`), `version`, `flows` served
        (`name@version`), `sweeps`, `live` (wrote its row within three beats and did not
        stop), `sweeping` (live, and its last sweep ended within three beats),
        `lastSweepAt` and `lastClaimed` (instances that sweep claimed). `overdue` counts
        parked instances due more than two scan intervals ago; `notice` says so when no
        live node sweeps them (null otherwise)."""
        return JSONResponse(nodes_view(await nodes_report(engine, nodes, settings)))

    return router
