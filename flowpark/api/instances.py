"""Instance routes: one instance's view, the list with its filters, and the counts.

They read through the engine's read model (:class:`flowpark.engine.ports.operator.OperatorReads`
and the journal's reads; no SQL here) and measure ``overdue`` and ``stuck`` at the engine
clock's now.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from flowpark.api.deps import EngineDep, OperatorReadsDep, ReadToken
from flowpark.api.explain import counts_view, decode_cursor, encode_cursor, poll_of, summary_view
from flowpark.api.inputs import JsonBodyRoute, check_instance_id
from flowpark.api.models import (
    INSTANT_TEXT,
    InstanceCounts,
    InstanceList,
    InstanceSummaryView,
    InstanceView,
)
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API, instance_view
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.operator import InstanceFilter, InstanceSummary
from flowpark.engine.records import InstanceState, WakeKind
from flowpark.errors import ErrorCode, InputInvalid
from flowpark.flows.catalog import Catalog

__all__ = ["build_instances_router", "display_fields", "instance_filter", "summaries"]

#: Default and largest page size of the list.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
MAX_TEXT = 200
_MAX_TEXT = MAX_TEXT
_INSTANCE_ID = Path(description="the instance's id (a lowercase, dashed UUID)")


def _aware(name: str, value: datetime | None) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise InputInvalid(
            f"{name} must be an instant with a UTC offset or Z (e.g. 2026-01-31T12:00:00Z)",
            errors=[{"loc": ["query", name], "msg": "naive datetime", "type": "value_error"}],
        )
    return value


def instance_filter(
    engine: EngineDep,
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
    compensation_failed: Annotated[
        bool,
        Query(
            alias="compensationFailed",
            description="Ended with a compensation that failed for good (not retried with "
            "success since): its `compensationFailures` are not empty.",
        ),
    ] = False,
    waiting: Annotated[
        WakeKind | None,
        Query(
            description="Suspended, waiting for poll, retry, signal, deadline, "
            "provider_budget or provider_pushback."
        ),
    ] = None,
    instance_key: Annotated[
        str | None, Query(alias="instanceKey", max_length=_MAX_TEXT, description="Instance key.")
    ] = None,
    created_after: Annotated[
        datetime | None,
        INSTANT_TEXT,
        Query(alias="createdAfter", description="Created after (ISO-8601, UTC)."),
    ] = None,
    created_before: Annotated[
        datetime | None,
        INSTANT_TEXT,
        Query(alias="createdBefore", description="Created before (ISO-8601, UTC)."),
    ] = None,
    display_key: Annotated[
        str | None,
        Query(
            alias="displayKey",
            max_length=_MAX_TEXT,
            description="The value of the flow's display key (an input field it declares).",
        ),
    ] = None,
    id_prefix: Annotated[
        str | None,
        Query(
            alias="idPrefix",
            min_length=4,
            max_length=36,
            pattern=r"^[0-9a-f-]+$",
            description="The instance id starts with this (lowercase hex and dashes).",
        ),
    ] = None,
) -> InstanceFilter:
    """FastAPI dependency: the list's filters from the query string (AND of all given)."""
    return InstanceFilter(
        display_fields=display_fields(engine.catalog),
        display_value=display_key,
        id_prefix=id_prefix,
        flow=flow,
        version=version,
        states=tuple(dict.fromkeys(state or ())),
        overdue_seconds=overdue,
        stuck=stuck,
        error_code=error_code,
        compensation_failed=compensation_failed,
        waiting=waiting,
        instance_key=instance_key,
        created_after=_aware("createdAfter", created_after),
        created_before=_aware("createdBefore", created_before),
        now=engine.clock.now(),
    )


def display_fields(catalog: Catalog) -> tuple[tuple[str, str, str], ...]:
    """``(flow, version, input field)`` of every flow version this node serves that
    declares a display key."""
    return tuple(
        (p.name, p.version, p.display_key) for p in catalog.plans() if p.display_key is not None
    )


async def summaries(engine: Engine, rows: list[InstanceSummary]) -> list[InstanceSummaryView]:
    """The list's rows, with the stored budget end of each poll an instance waits at (one
    read for the page).

    Args:
        engine: the node's engine (its catalog, and its operator reads).
        rows: a page of :meth:`~flowpark.engine.ports.operator.OperatorReads.list_instances`.
    """
    plans = {
        (r.flow_name, r.flow_version): engine.catalog.find(r.flow_name, r.flow_version)
        for r in rows
    }
    polls = {
        r.id: step
        for r in rows
        if not r.state.ended
        and (step := poll_of(plans[(r.flow_name, r.flow_version)], r.wake_step_id)) is not None
    }
    ends = await engine.store.operator.poll_budget_ends([(i, n.index) for i, n in polls.items()])
    return [
        summary_view(
            r,
            plans[(r.flow_name, r.flow_version)],
            ends.get((r.id, polls[r.id].index)) if r.id in polls else None,
        )
        for r in rows
    ]


def build_instances_router() -> APIRouter:
    """``GET /api/v1/instances`` (the list), ``/instances/counts`` and
    ``/instances/{instance_id}`` (registered in that order, so ``counts`` is not read as
    an id)."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["instances"])

    @router.get(
        "/instances",
        operation_id="list_instances",
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def list_instances(
        token: ReadToken,
        reads: OperatorReadsDep,
        engine: EngineDep,
        where: Annotated[InstanceFilter, Depends(instance_filter)],
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = DEFAULT_LIMIT,
        cursor: Annotated[
            str | None, Query(max_length=400, description="nextCursor of the previous page.")
        ] = None,
    ) -> InstanceList:
        """Instances, newest first (by `createdAt`, then id), filtered by every parameter
        given (AND): `flow`, `version`, `state` (repeatable: any of), `overdue` (seconds:
        suspended with `wakeAt` that long ago), `stuck` (running, lease expired),
        `errorCode`, `compensationFailed` (`true`: ended with a compensation that failed
        for good), `waiting` (`poll`, `retry`, `signal`, `deadline`, `provider_budget`,
        `provider_pushback`), `instanceKey`,
        `createdAfter`/`createdBefore` (ISO-8601 with offset). Keyset pagination: pass the
        answer's `nextCursor` as `cursor` for the next page (`null` on the last page); rows
        started while paging never shift a page. Each row: `instanceId`, `flow`,
        `version`, `state`, `createdAt`, `wakeAt`, `waiting` (`kind`, `stepId`,
        `capabilityId`, `attempt`, `wakeAt`), `attempt`, `budgetEndsAt`, `errorCode`,
        `instanceKey`. 422 `input_invalid` for a bad parameter or cursor."""
        after = decode_cursor(cursor) if cursor else None
        page = await reads.list_instances(where, limit=limit, after=after)
        return InstanceList(
            instances=await summaries(engine, page.rows),
            next_cursor=encode_cursor(page.after) if page.after else None,
        )

    @router.get(
        "/instances/counts",
        operation_id="count_instances",
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def count_instances(
        token: ReadToken,
        engine: EngineDep,
        reads: OperatorReadsDep,
        overdue: Annotated[
            float,
            Query(ge=0, le=10 * 365 * 86400, description="Overdue threshold in seconds."),
        ] = 0.0,
    ) -> InstanceCounts:
        """Instance counts by flow, version and state (`byState`, and nested as
        `flows[flow][version][state]`), totals by state, and the `overdue` (suspended with
        `wakeAt` more than `overdue` seconds ago) and `stuck` (running with an expired
        lease) counts."""
        counts = await reads.count_instances_by(engine.clock.now(), overdue)
        return counts_view(counts, overdue)

    @router.get(
        "/instances/{instance_id}",
        operation_id="get_instance",
        responses=problem_responses(ErrorCode.INSTANCE_NOT_FOUND),
    )
    async def get_instance(
        token: ReadToken, engine: EngineDep, request: Request, instance_id: str = _INSTANCE_ID
    ) -> InstanceView:
        """One instance: state, wake (``wakeAt``, ``wakeStepId``, ``wakeScope``), result or
        error (``code``, ``message``), lease, journal rows, signals, and what explains its
        wait: ``waiting`` (``kind``: poll, retry, signal, deadline, provider_budget or
        provider_pushback; ``stepId``,
        ``capabilityId``, ``attempt``, ``wakeAt``), ``budget`` of the poll it waits at
        (``startedAt``, ``endsAt``, ``usedRatio``), ``attempts`` (one entry per poll
        attempt: ``scheduledAt``, ``startedAt``, ``latenessSeconds``, ``durationSeconds``,
        ``outcome`` and every try with its error ``type`` and ``detail``), ``tries`` (the
        number of capability executions in the journal) and ``actions`` (the operator's
        wake, extend-budget and cancel history: who and when)."""
        check_instance_id(instance_id)
        snap = await engine.store.reads.load(instance_id)
        signals = await engine.store.reads.list_signals(instance_id)
        actions = await engine.store.operator.actions_of(instance_id)
        plan = engine.catalog.find(snap.instance.flow_name, snap.instance.flow_version)
        now = engine.clock.now()
        root = request.scope.get("root_path", "")  # a host application's prefix
        return instance_view(snap.instance, snap.steps, signals, plan, now, actions, root)

    return router
