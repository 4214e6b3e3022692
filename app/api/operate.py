"""Operator routes: find instances (list with filters, counts).

They read through :class:`app.store.read_model.OperatorReads` (no SQL here) and measure
``overdue`` and ``stuck`` at the engine clock's now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from app.api.auth import require_token
from app.api.explain import (
    counts_view,
    decode_cursor,
    encode_cursor,
    poll_of,
    summary_view,
)
from app.api.views import API
from app.engine.engine import Engine
from app.engine.journal import InstanceState, WakeKind
from app.errors import InputInvalid
from app.store.read_model import InstanceFilter, InstanceSummary, OperatorReads

__all__ = ["build_operator_router", "instance_filter"]

#: Default and largest page size of the list.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
_MAX_TEXT = 200


def _engine(request: Request) -> Engine:
    return cast(Engine, request.app.state.engine)


def _reads(request: Request) -> OperatorReads:
    return cast(OperatorReads, _engine(request).journal)


def _aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise InputInvalid(
            f"{name} must be an instant with a UTC offset or Z (e.g. 2026-01-31T12:00:00Z)",
            errors=[{"loc": ["query", name], "msg": "naive datetime", "type": "value_error"}],
        )
    return value


def instance_filter(
    request: Request,
    flow: Annotated[str | None, Query(max_length=_MAX_TEXT, description="Flow name.")] = None,
    version: Annotated[str | None, Query(max_length=_MAX_TEXT, description="Flow version.")] = None,
    state: Annotated[
        list[InstanceState] | None,
        Query(description="Instance state; repeat for any of several."),
    ] = None,
    overdue: Annotated[
        float | None,
        Query(
            ge=0,
            le=10 * 365 * 86400,
            description="Suspended with wakeAt more than this many seconds ago (0: due now).",
        ),
    ] = None,
    stuck: Annotated[
        bool, Query(description="Running with an expired lease (its node is gone).")
    ] = False,
    error_code: Annotated[
        str | None, Query(alias="errorCode", max_length=_MAX_TEXT, description="Error code.")
    ] = None,
    waiting: Annotated[
        WakeKind | None, Query(description="Suspended, waiting for poll, retry, signal, deadline.")
    ] = None,
    instance_key: Annotated[
        str | None, Query(alias="instanceKey", max_length=_MAX_TEXT, description="Instance key.")
    ] = None,
    created_after: Annotated[
        datetime | None, Query(alias="createdAfter", description="Created after (ISO-8601, UTC).")
    ] = None,
    created_before: Annotated[
        datetime | None,
        Query(alias="createdBefore", description="Created before (ISO-8601, UTC)."),
    ] = None,
) -> InstanceFilter:
    """FastAPI dependency: the list's filters from the query string (AND of all given)."""
    return InstanceFilter(
        flow=flow,
        version=version,
        states=tuple(dict.fromkeys(state or ())),
        overdue_seconds=overdue,
        stuck=stuck,
        error_code=error_code,
        waiting=waiting,
        instance_key=instance_key,
        created_after=_aware("createdAfter", created_after),
        created_before=_aware("createdBefore", created_before),
        now=_engine(request).clock.now(),
    )


async def summaries(request: Request, rows: list[InstanceSummary]) -> list[dict[str, Any]]:
    """The list's JSON rows, with each parked poll's budget end (one read for the page)."""
    engine = _engine(request)
    plans = {
        (r.flow_name, r.flow_version): engine.catalog.find(r.flow_name, r.flow_version)
        for r in rows
    }
    polls = {
        r.id: node
        for r in rows
        if not r.state.ended
        and (node := poll_of(plans[(r.flow_name, r.flow_version)], r.wake_step_id)) is not None
    }
    started = await _reads(request).poll_started([(i, n.body_index) for i, n in polls.items()])
    out = []
    for r in rows:
        node = polls.get(r.id)
        first = started.get((r.id, node.body_index)) if node is not None else None
        ends = first + node.timeout if node is not None and first is not None else None
        out.append(summary_view(r, plans[(r.flow_name, r.flow_version)], ends))
    return out


def build_operator_router() -> APIRouter:
    """The operator's ``/api/v1/instances`` list and counts routes (registered before the
    ``/instances/{id}`` routes, so ``counts`` is not read as an id)."""
    router = APIRouter(prefix=API, dependencies=[Depends(require_token)])

    @router.get("/instances", tags=["instances"])
    async def list_instances(
        request: Request,
        where: Annotated[InstanceFilter, Depends(instance_filter)],
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = DEFAULT_LIMIT,
        cursor: Annotated[
            str | None, Query(max_length=400, description="nextCursor of the previous page.")
        ] = None,
    ) -> JSONResponse:
        """Instances, newest first (by `createdAt`, then id), filtered by every parameter
        given (AND): `flow`, `version`, `state` (repeatable: any of), `overdue` (seconds:
        suspended with `wakeAt` that long ago), `stuck` (running, lease expired),
        `errorCode`, `waiting` (`poll`, `retry`, `signal`, `deadline`), `instanceKey`,
        `createdAfter`/`createdBefore` (ISO-8601 with offset). Keyset pagination: pass the
        answer's `nextCursor` as `cursor` for the next page (`null` on the last page); rows
        started while paging never shift a page. Each row: `instanceId`, `flow`,
        `version`, `state`, `createdAt`, `wakeAt`, `waiting` (`kind`, `stepId`,
        `capabilityId`, `attempt`, `wakeAt`), `attempt`, `budgetEndsAt`, `errorCode`,
        `instanceKey`. 422 `input_invalid` for a bad parameter or cursor."""
        after = decode_cursor(cursor) if cursor else None
        page = await _reads(request).list_instances(where, limit=limit, after=after)
        return JSONResponse(
            {
                "instances": await summaries(request, page.rows),
                "nextCursor": encode_cursor(page.after) if page.after else None,
            }
        )

    @router.get("/instances/counts", tags=["instances"])
    async def count_instances(
        request: Request,
        overdue: Annotated[
            float,
            Query(ge=0, le=10 * 365 * 86400, description="Overdue threshold in seconds."),
        ] = 0.0,
    ) -> JSONResponse:
        """Instance counts by flow, version and state (`byState`, and nested as
        `flows[flow][version][state]`), totals by state, and the `overdue` (suspended with
        `wakeAt` more than `overdue` seconds ago) and `stuck` (running with an expired
        lease) counts."""
        now = _engine(request).clock.now()
        counts = await _reads(request).count_instances_by(now, overdue)
        return JSONResponse(counts_view(counts, overdue))

    return router
