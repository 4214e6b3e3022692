"""Operator routes: find instances (list with filters, counts) and act on them (wake,
cancel, bulk actions).

They read and record through :class:`app.engine.ports.operator.OperatorReads` (no SQL here)
and measure ``overdue`` and ``stuck`` at the engine clock's now. Every action is recorded
in the instance's history (``flow_action``) with the acting token's name and the instant,
and is idempotent by ``Idempotency-Key``: a repeat answers what the first did and acts no
more. Actions on an ended instance are 409 ``instance_ended``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.responses import JSONResponse, Response

from app.api.actions import Extension, cancel, extend, retry, wake
from app.api.bulk import BulkAction, BulkFilter
from app.api.deps import CatalogDep, EngineDep, OperateToken, OperatorReadsDep, ReadToken
from app.api.explain import (
    counts_view,
    decode_cursor,
    encode_cursor,
    poll_of,
    summary_view,
)
from app.api.inputs import JsonBodyRoute
from app.api.models import (
    INSTANT_TEXT,
    BudgetExtension,
    BulkAnswer,
    CancelAnswer,
    CompensationRetryAnswer,
    InstanceCounts,
    InstanceList,
    PlanView,
    WakeAnswer,
)
from app.api.openapi import problem_responses
from app.api.plans import plan_view
from app.api.routes import check_instance_id, idempotency_header
from app.api.views import API
from app.engine.engine import Engine
from app.engine.journal import InstanceState, WakeKind
from app.engine.ports.operator import InstanceFilter, InstanceSummary, OperatorReads
from app.errors import BulkFilterMissing, ErrorCode, InputInvalid, InstanceEnded, InstanceNotFound
from app.flows.catalog import Catalog

__all__ = [
    "BulkAction",
    "BulkFilter",
    "Extension",
    "build_operator_router",
    "cancel",
    "extend",
    "instance_filter",
    "wake",
]

#: Default and largest page size of the list.
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
_MAX_TEXT = 200


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
        WakeKind | None, Query(description="Suspended, waiting for poll, retry, signal, deadline.")
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


async def _actionable(reads: OperatorReads, where: InstanceFilter, action: str) -> int:
    """How many of the instances ``where`` selects the action would touch: cancel those
    that have not ended; wake the parked ones that do not wait for a signal."""
    states = set(where.states) or set(InstanceState)
    if action == "cancel":
        alive = sorted(states & {InstanceState.RUNNING, InstanceState.SUSPENDED})
        return await reads.count_matching(replace(where, states=tuple(alive))) if alive else 0
    if InstanceState.SUSPENDED not in states or where.waiting is WakeKind.SIGNAL:
        return 0
    parked = replace(where, states=(InstanceState.SUSPENDED,))
    count = await reads.count_matching(parked)
    if where.waiting is None:
        count -= await reads.count_matching(replace(parked, waiting=WakeKind.SIGNAL))
    return count


def display_fields(catalog: Catalog) -> tuple[tuple[str, str, str], ...]:
    """``(flow, version, input field)`` of every flow version this node serves that
    declares a display key."""
    return tuple(
        (p.name, p.version, p.display_key) for p in catalog.plans() if p.display_key is not None
    )


async def summaries(engine: Engine, rows: list[InstanceSummary]) -> list[dict[str, Any]]:
    """The list's JSON rows, with the stored budget end of each poll an instance waits at
    (one read for the page)."""
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
    ends = await engine.journal.operator.poll_budget_ends([(i, n.index) for i, n in polls.items()])
    return [
        summary_view(
            r,
            plans[(r.flow_name, r.flow_version)],
            ends.get((r.id, polls[r.id].index)) if r.id in polls else None,
        )
        for r in rows
    ]


#: What an action on one instance can answer besides its own answer.
_ACTION_CODES = (
    ErrorCode.INSTANCE_NOT_FOUND,
    ErrorCode.INSTANCE_ENDED,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
)
#: What a bulk action's body can answer.
_BODY_CODES = (
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
)
_KEY_DOC = "Repeats with the same key answer the first request's answer."
_CANCEL_REF = "#/components/schemas/CancelAnswer"


def build_operator_router() -> APIRouter:
    """The operator's ``/api/v1/instances`` list and counts routes (registered before the
    ``/instances/{id}`` routes, so ``counts`` is not read as an id)."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)

    @router.get(
        "/instances",
        tags=["instances"],
        operation_id="list_instances",
        response_model=InstanceList,
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
    ) -> JSONResponse:
        """Instances, newest first (by `createdAt`, then id), filtered by every parameter
        given (AND): `flow`, `version`, `state` (repeatable: any of), `overdue` (seconds:
        suspended with `wakeAt` that long ago), `stuck` (running, lease expired),
        `errorCode`, `compensationFailed` (`true`: ended with a compensation that failed
        for good), `waiting` (`poll`, `retry`, `signal`, `deadline`), `instanceKey`,
        `createdAfter`/`createdBefore` (ISO-8601 with offset). Keyset pagination: pass the
        answer's `nextCursor` as `cursor` for the next page (`null` on the last page); rows
        started while paging never shift a page. Each row: `instanceId`, `flow`,
        `version`, `state`, `createdAt`, `wakeAt`, `waiting` (`kind`, `stepId`,
        `capabilityId`, `attempt`, `wakeAt`), `attempt`, `budgetEndsAt`, `errorCode`,
        `instanceKey`. 422 `input_invalid` for a bad parameter or cursor."""
        after = decode_cursor(cursor) if cursor else None
        page = await reads.list_instances(where, limit=limit, after=after)
        return JSONResponse(
            {
                "instances": await summaries(engine, page.rows),
                "nextCursor": encode_cursor(page.after) if page.after else None,
            }
        )

    @router.get(
        "/instances/counts",
        tags=["instances"],
        operation_id="count_instances",
        response_model=InstanceCounts,
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
    ) -> JSONResponse:
        """Instance counts by flow, version and state (`byState`, and nested as
        `flows[flow][version][state]`), totals by state, and the `overdue` (suspended with
        `wakeAt` more than `overdue` seconds ago) and `stuck` (running with an expired
        lease) counts."""
        counts = await reads.count_instances_by(engine.clock.now(), overdue)
        return JSONResponse(counts_view(counts, overdue))

    @router.get(
        "/flows/{name}",
        tags=["flows"],
        operation_id="get_flow",
        response_model=PlanView,
        responses=problem_responses(ErrorCode.FLOW_NOT_FOUND, ErrorCode.INPUT_INVALID),
    )
    async def show_flow(
        token: ReadToken,
        catalog: CatalogDep,
        name: Annotated[str, Path(description="the flow's name")],
        version: Annotated[
            str | None, Query(max_length=_MAX_TEXT, description="Default: the latest.")
        ] = None,
    ) -> JSONResponse:
        """One flow's compiled plan (`version`, default the latest registered on this
        step): `steps`, each with `index`, `kind` (`capability`, `poll`, `await`, `fail`,
        `emit`) and its fields (capability, retry policy, compensation, poll interval and
        `timeoutSeconds`, signal, `satisfied`/`onTimeout`/`onFailure`/`next` targets;
        `end` is the index that completes the flow). 404 `flow_not_found`."""
        plan = catalog.get(name, version) if version else catalog.latest(name)
        return JSONResponse(plan_view(plan))

    @router.post(
        "/instances/actions",
        tags=["instances"],
        operation_id="act_on_instances",
        response_model=BulkAnswer,
        responses=problem_responses(
            ErrorCode.INPUT_INVALID, ErrorCode.BULK_FILTER_MISSING, *_BODY_CODES
        ),
    )
    async def bulk_action(
        token: OperateToken,
        engine: EngineDep,
        body: BulkAction,
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", include_in_schema=False)
        ] = None,
    ) -> JSONResponse:
        """Act (`wake` or `cancel`) on the instances a filter selects (`filter`: the list's
        parameters as JSON, e.g. `{"waiting": "poll", "overdue": 600}`). A filter that
        names no field would select every instance: it is refused, 422
        `bulk_filter_missing`, unless the body says `"all": true`. `dryRun: true` acts on
        none and answers how many match (`matched`). Otherwise at most `limit` instances
        (1-1000, default 100) are taken in the list's order, from `cursor` on, and each is
        acted on as by its own route (recorded in its history; ended ones and ones not
        parked are skipped); the answer counts them (`acted`, `skipped`), lists each
        (`results`) and gives `nextCursor` to continue with (null once the filter's
        instances are all visited). With an `Idempotency-Key`, each instance's action is
        idempotent by that key, so a retried batch acts on none twice."""
        key = idempotency_header(idempotency_key, required=False)
        if body.filter.is_empty() and not body.all_:
            raise BulkFilterMissing(
                "the filter names no field, so it selects every instance: give at least one "
                'filter field, or send "all": true to act on every instance'
            )
        where = body.filter.to_filter(engine.clock.now(), display_fields(engine.catalog))
        # checked before a dry run too, so a dry run is refused what the action would be
        after = decode_cursor(body.cursor, ("body", "cursor")) if body.cursor else None
        reads = engine.journal.operator
        if body.dry_run:
            matched = await reads.count_matching(where)
            actionable = await _actionable(reads, where, body.action)
            return JSONResponse(
                {
                    "action": body.action,
                    "dryRun": True,
                    "matched": matched,
                    "actionable": actionable,
                    "acted": 0,
                }
            )
        page = await reads.list_instances(where, limit=body.limit, after=after)
        results: list[dict[str, Any]] = []
        acted = skipped = 0
        act = wake if body.action == "wake" else cancel
        for row in page.rows:
            per_key = f"bulk:{key}" if key else None
            try:
                status, answer = await act(engine, token, row.id, per_key)
            except (InstanceEnded, InstanceNotFound) as exc:
                skipped += 1
                results.append({"instanceId": row.id, "outcome": "skipped", "code": exc.code})
                continue
            woken = getattr(answer, "woken", True)
            done = True if woken is None else woken
            acted += 1 if done else 0
            skipped += 0 if done else 1
            results.append(
                {
                    "instanceId": row.id,
                    "outcome": "acted" if done else "skipped",
                    "state": str(answer.state) if answer.state is not None else None,
                    "status": status,
                }
            )
        return JSONResponse(
            {
                "action": body.action,
                "dryRun": False,
                "matched": len(page.rows),
                "acted": acted,
                "skipped": skipped,
                "results": results,
                "nextCursor": encode_cursor(page.after) if page.after else None,
            }
        )

    @router.post(
        "/instances/{instance_id}/wake",
        tags=["instances"],
        operation_id="wake_instance",
        response_model=WakeAnswer,
        responses=problem_responses(*_ACTION_CODES),
    )
    async def wake_instance(
        token: OperateToken,
        engine: EngineDep,
        response: Response,
        instance_id: Annotated[str, Path(description="the instance's id")],
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", description=_KEY_DOC)
        ] = None,
    ) -> WakeAnswer:
        """Wake a parked instance now: it is claimed and the wait it is parked on runs at
        once (a poll's next attempt, a retry's next try), then it parks again or ends as
        the sweep would have continued it. The answer: `woken`, the `state` and `wakeAt`
        after, and the recorded action (`actionId`, `actor`, `actedAt`). Not parked (running)
        or waiting for a signal: `woken: false` with the `reason`, nothing done. 409
        `instance_ended` once ended. Idempotent by `Idempotency-Key`."""
        check_instance_id(instance_id)
        key = idempotency_header(idempotency_key, required=False)
        status, answer = await wake(engine, token, instance_id, key)
        response.status_code = status
        return answer

    @router.post(
        "/instances/{instance_id}/budget",
        tags=["instances"],
        operation_id="extend_instance_budget",
        response_model=BudgetExtension,
        responses=problem_responses(
            *_ACTION_CODES,
            *_BODY_CODES,
            ErrorCode.INPUT_INVALID,
            ErrorCode.NO_BUDGET,
            ErrorCode.INSTANCE_BUSY,
        ),
    )
    async def extend_instance_budget(
        token: OperateToken,
        engine: EngineDep,
        response: Response,
        instance_id: Annotated[str, Path(description="the instance's id")],
        body: Extension,
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", description=_KEY_DOC)
        ] = None,
    ) -> BudgetExtension:
        """Extend the budget of the poll the instance is parked at: `{"extendBy": "PT2H"}`
        (an ISO-8601 duration, or seconds). The new end (`endsAt`, never past the flow
        deadline: `cappedByDeadline`) is stored in the journal, so whichever node resumes
        the instance reads it at its next decision; the instance stays parked as it was.
        409 `instance_ended`, `no_budget` (it does not wait in a poll), `instance_busy`
        (a node runs it now: try again). Recorded in the instance's history; idempotent
        by `Idempotency-Key`."""
        check_instance_id(instance_id)
        key = idempotency_header(idempotency_key, required=False)
        status, answer = await extend(engine, token, instance_id, body.extend_by, key)
        response.status_code = status
        return answer

    @router.post(
        "/instances/{instance_id}/cancel",
        tags=["instances"],
        operation_id="cancel_instance",
        response_model=CancelAnswer,
        responses={
            202: {
                "description": "Cancel requested; another node finishes the unwind",
                "content": {"application/json": {"schema": {"$ref": _CANCEL_REF}}},
            },
            **problem_responses(*_ACTION_CODES),
        },
    )
    async def cancel_instance(
        token: OperateToken,
        engine: EngineDep,
        response: Response,
        instance_id: Annotated[str, Path(description="the instance's id")],
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", description=_KEY_DOC)
        ] = None,
    ) -> CancelAnswer:
        """Cancel: compensations of completed steps run once, in reverse order, and the
        instance ends `cancelled` (202 while another node finishes the unwind). 409
        `instance_ended` when it had already ended. Recorded in the instance's history
        (`actionId`, `actor`, `actedAt`); idempotent by `Idempotency-Key`."""
        check_instance_id(instance_id)
        key = idempotency_header(idempotency_key, required=False)
        status, answer = await cancel(engine, token, instance_id, key)
        response.status_code = status
        return answer

    @router.post(
        "/instances/{instance_id}/compensations/retry",
        tags=["instances"],
        operation_id="retry_instance_compensations",
        response_model=CompensationRetryAnswer,
        responses=problem_responses(
            ErrorCode.INSTANCE_NOT_FOUND,
            ErrorCode.IDEMPOTENCY_KEY_INVALID,
            ErrorCode.COMPENSATION_NOT_FAILED,
            ErrorCode.INSTANCE_BUSY,
            ErrorCode.INSTANCE_KEY_IN_USE,
        ),
    )
    async def retry_instance_compensations(
        token: OperateToken,
        engine: EngineDep,
        response: Response,
        instance_id: Annotated[str, Path(description="the instance's id")],
        idempotency_key: Annotated[
            str | None, Header(alias="Idempotency-Key", description=_KEY_DOC)
        ] = None,
    ) -> CompensationRetryAnswer:
        """Retry the compensations of an ended (`failed` or `cancelled`) instance that
        failed for good (its `compensationFailures`): each runs one more try now, through
        the engine (a `retry` row in the journal asks for it; the try's row follows), and
        the instance ends again in its state: still marked, with the new error, if a try
        failed (`stillFailed` counts them), cleared if every one succeeded. The journal
        keeps every try. 409 `compensation_not_failed` when none failed for good (or this
        node does not serve its flow version), `instance_busy` while another retry of it
        runs, `instance_key_in_use` while a running instance of its flow holds its
        instance key. Recorded in the instance's history (`actionId`, `actor`,
        `actedAt`); idempotent by `Idempotency-Key`."""
        check_instance_id(instance_id)
        key = idempotency_header(idempotency_key, required=False)
        status, answer = await retry(engine, token, instance_id, key)
        response.status_code = status
        return answer

    return router
