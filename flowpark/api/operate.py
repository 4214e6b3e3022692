"""Operator action routes: wake, extend the budget of, cancel one instance and retry its
compensations that failed for good, and act on the instances a filter selects (bulk
actions).

Every action is recorded in the instance's history (``flow_action``) with the acting
token's name and the instant (:mod:`flowpark.api.actions`), and is idempotent by
``Idempotency-Key``: a repeat answers what the first did (its status and answer, or the
same problem when it was refused) and acts no more; while the first still acts, a repeat
is 409 ``action_in_progress``. Actions on an ended instance are 409 ``instance_ended``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Header, Path, Response

from flowpark.api.actions import Extension, cancel, extend, retry, wake
from flowpark.api.bulk import BulkAction, BulkFilter
from flowpark.api.deps import EngineDep, OperateToken
from flowpark.api.explain import decode_cursor, encode_cursor
from flowpark.api.inputs import JsonBodyRoute, check_instance_id, idempotency_header
from flowpark.api.instances import display_fields
from flowpark.api.models import (
    BudgetExtension,
    BulkAnswer,
    BulkResult,
    CancelAnswer,
    CompensationRetryAnswer,
    WakeAnswer,
)
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API
from flowpark.api.wakes import record_wakes
from flowpark.engine.ports.operator import InstanceFilter, OperatorReads
from flowpark.engine.records import InstanceState, WakeKind
from flowpark.errors import BulkFilterMissing, ErrorCode, FlowparkError

__all__ = ["BulkAction", "BulkFilter", "build_operator_router"]


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


#: What an action on one instance can answer besides its own answer.
_ACTION_CODES = (
    ErrorCode.INSTANCE_NOT_FOUND,
    ErrorCode.INSTANCE_ENDED,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
    ErrorCode.ACTION_IN_PROGRESS,
)
#: What a bulk action's body can answer.
_BODY_CODES = (
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
)
#: What a bulk action skips an instance for (an error code in its result).
_SKIPPED = frozenset(
    {
        ErrorCode.INSTANCE_ENDED,
        ErrorCode.INSTANCE_NOT_FOUND,
        ErrorCode.ACTION_IN_PROGRESS,
        ErrorCode.VERSION_NOT_SERVED,
    }
)
_KEY_DOC = (
    "Repeats with the same key answer the first request's answer: the same status and "
    "answer, or the same problem when it was refused; 409 `action_in_progress` while the "
    "first is still acting."
)
_CANCEL_REF = "#/components/schemas/CancelAnswer"


def build_operator_router() -> APIRouter:
    """``POST /api/v1/instances/actions`` (bulk), and ``/instances/{instance_id}/wake``,
    ``/budget``, ``/cancel`` and ``/compensations/retry``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["instances"])

    @router.post(
        "/instances/actions",
        operation_id="act_on_instances",
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
    ) -> BulkAnswer:
        """Act (`wake` or `cancel`) on the instances a filter selects (`filter`: the list's
        parameters as JSON, e.g. `{"waiting": "poll", "overdue": 600}`). A filter that
        names no field would select every instance: it is refused, 422
        `bulk_filter_missing`, unless the body says `"all": true`. `dryRun: true` acts on
        none and answers how many match (`matched`). Otherwise at most `limit` instances
        (1-1000, default 100) are taken in the list's order, from `cursor` on, and each is
        acted on (recorded in its history with who and when; ended ones and ones not
        parked are skipped); the answer counts them (`acted`, `skipped`), lists each
        (`results`) and gives `nextCursor` to continue with (null once the filter's
        instances are all visited). A cancel acts as its own route does. A wake is
        recorded and answered at once (`queued: true`, each acted one with status 202):
        the instance is marked woken and due now, and the sweep runs the wait it is parked
        on (a poll's next attempt, a retry's next try) at its next pass, at its provider's
        pace, so a batch of a limited provider's instances answers without waiting for
        the provider. With an `Idempotency-Key`, each instance's action is idempotent by
        that key, so a retried batch acts on none twice (an instance the first batch still
        acts on is skipped with code `action_in_progress`)."""
        key = idempotency_header(idempotency_key, required=False)
        if body.filter.is_empty() and not body.all_:
            raise BulkFilterMissing(
                "the filter names no field, so it selects every instance: give at least one "
                'filter field, or send "all": true to act on every instance'
            )
        where = body.filter.to_filter(engine.clock.now(), display_fields(engine.catalog))
        # checked before a dry run too, so a dry run is refused what the action would be
        after = decode_cursor(body.cursor, ("body", "cursor")) if body.cursor else None
        reads = engine.store.operator
        if body.dry_run:
            matched = await reads.count_matching(where)
            actionable = await _actionable(reads, where, body.action)
            return BulkAnswer(
                action=body.action, dry_run=True, matched=matched, actionable=actionable, acted=0
            )
        page = await reads.list_instances(where, limit=body.limit, after=after)
        next_cursor = encode_cursor(page.after) if page.after else None
        if body.action == "wake":
            woken = await record_wakes(engine, token, page.rows, key)
            acted = sum(1 for r in woken if r.outcome == "acted")
            return BulkAnswer(
                action=body.action,
                dry_run=False,
                matched=len(page.rows),
                acted=acted,
                skipped=len(woken) - acted,
                queued=True,
                results=woken,
                next_cursor=next_cursor,
            )
        results: list[BulkResult] = []
        acted = skipped = 0
        for row in page.rows:
            per_key = f"bulk:{key}" if key else None
            try:
                status, answer = await cancel(engine, token, row.id, per_key)
            except FlowparkError as exc:
                # ended or gone since it was listed (a repeat of the batch's key answers
                # the first refusal again), or the first batch still acts on it
                if exc.code not in _SKIPPED:
                    raise
                skipped += 1
                results.append(BulkResult(instance_id=row.id, outcome="skipped", code=exc.code))
                continue
            acted += 1
            results.append(
                BulkResult(instance_id=row.id, outcome="acted", state=answer.state, status=status)
            )
        return BulkAnswer(
            action=body.action,
            dry_run=False,
            matched=len(page.rows),
            acted=acted,
            skipped=skipped,
            results=results,
            next_cursor=next_cursor,
        )

    @router.post(
        "/instances/{instance_id}/wake",
        operation_id="wake_instance",
        responses=problem_responses(*_ACTION_CODES, ErrorCode.VERSION_NOT_SERVED),
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
        `instance_ended` once ended; 409 `version_not_served` when this node does not serve
        the instance's flow version (nothing done). Idempotent by `Idempotency-Key`."""
        check_instance_id(instance_id)
        key = idempotency_header(idempotency_key, required=False)
        status, answer = await wake(engine, token, instance_id, key)
        response.status_code = status
        return answer

    @router.post(
        "/instances/{instance_id}/budget",
        operation_id="extend_instance_budget",
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
        operation_id="retry_instance_compensations",
        responses=problem_responses(
            ErrorCode.INSTANCE_NOT_FOUND,
            ErrorCode.IDEMPOTENCY_KEY_INVALID,
            ErrorCode.COMPENSATION_NOT_FAILED,
            ErrorCode.INSTANCE_BUSY,
            ErrorCode.INSTANCE_KEY_IN_USE,
            ErrorCode.ACTION_IN_PROGRESS,
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
