"""Flow routes: the flow versions this node serves or that wait for a node that serves
them (``GET /api/v1/flows``), and one version's compiled plan (``GET
/api/v1/flows/{name}``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from flowpark.api.deps import CatalogDep, EngineDep, ReadToken
from flowpark.api.inputs import JsonBodyRoute
from flowpark.api.models import FlowView, PlanView
from flowpark.api.openapi import problem_responses
from flowpark.api.plans import plan_view
from flowpark.api.views import API
from flowpark.engine.node.versions import unfinished_by_version, unserved
from flowpark.errors import ErrorCode

__all__ = ["build_flows_router"]

_MAX_TEXT = 200


def build_flows_router() -> APIRouter:
    """``GET /api/v1/flows/{name}`` and ``GET /api/v1/flows``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["flows"])

    @router.get(
        "/flows/{name}",
        operation_id="get_flow",
        responses=problem_responses(ErrorCode.FLOW_NOT_FOUND, ErrorCode.INPUT_INVALID),
    )
    async def show_flow(
        token: ReadToken,
        catalog: CatalogDep,
        name: Annotated[str, Path(description="the flow's name")],
        version: Annotated[
            str | None, Query(max_length=_MAX_TEXT, description="Default: the latest.")
        ] = None,
    ) -> PlanView:
        """One flow's compiled plan (`version`, default the latest registered on this
        node): `steps`, each with `index`, `kind` (`capability`, `poll`, `await`, `fail`,
        `emit`) and its fields (capability, retry policy, compensation, poll interval and
        `timeoutSeconds`, signal, `satisfied`/`onTimeout`/`onWarning`/`onFailure`/`next`
        targets;
        `end` is the index that completes the flow) and the `providers` its capabilities
        call. 404 `flow_not_found`."""
        plan = catalog.get(name, version) if version else catalog.latest(name)
        return plan_view(plan)

    @router.get(
        "/flows",
        operation_id="list_flows",
        responses=problem_responses(),
    )
    async def flows(token: ReadToken, engine: EngineDep) -> list[FlowView]:
        """Flow versions: every version registered on this node (`served: true`), then
        every version with unfinished instances that this node does not serve (`served:
        false`: they wait for a node that serves it). `unfinished` counts the version's
        running and suspended instances; a start through a flow's route takes its newest
        served version."""
        catalog = engine.catalog
        unfinished = await unfinished_by_version(engine.store.operator, engine.clock.now())
        served = [
            FlowView(
                name=p.name,
                version=p.version,
                served=True,
                unfinished=unfinished.get(p.key, 0),
                profile=p.profile,
                route=p.trigger.route if p.trigger else None,
                signals=sorted(p.signals),
                streams=sorted(p.streams),
                deadline_seconds=p.deadline.total_seconds() if p.deadline else None,
                providers=[provider.name for provider in p.providers],
            )
            for p in sorted(catalog.plans(), key=lambda p: p.key)
        ]
        missing = [
            FlowView(name=name, version=version, served=False, unfinished=n)
            for (name, version), n in unserved(unfinished, catalog).items()
        ]
        return served + missing

    return router
