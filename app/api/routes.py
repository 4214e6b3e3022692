"""HTTP routes: flow triggers and their signal routes, instances, reviews, events.

Routes are thin: they authenticate, parse, call the engine or the store's read side, and
shape JSON. Every error leaves as problem+json (see ``app.api.problems``).

Bodies (start and signal routes here; the routes whose body is a model, such as bulk
actions and budget extensions, by the same check through ``JsonBodyRoute``) are JSON: a
non-empty body must be sent as ``application/json`` or ``application/*+json`` (any
parameters, e.g. ``charset``, are ignored: JSON is UTF-8); a body sent with no
``Content-Type``, or any other, is 415 ``unsupported_media_type``. A
body larger than ``max_body_bytes`` is 413 ``body_too_large`` (``app.runtime.app``). A body
that is not UTF-8 JSON, repeats a key in one object, nests deeper than ``MAX_DEPTH`` or
holds a string (or key) with U+0000 or a lone surrogate - which no store can keep - is 422
``input_invalid``.

Instance ids are canonical UUID strings (lowercase, dashed). An id in a path that cannot
name an instance is answered as an unknown id, 404 ``instance_not_found``, on both stores:
one longer than ``MAX_INSTANCE_ID`` or holding a control character or a surrogate without a
look-up, any other spelling that is not a canonical UUID (upper case, no dashes, braces, a
word) by the store, which refuses it as ``InstanceNotFound`` before any look-up.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Header, Path, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from app.api.deps import (
    DeliveryIdsDep,
    EngineDep,
    ReadToken,
    SettingsDep,
    SignalToken,
    StartToken,
)
from app.api.explain import explain_view
from app.api.inputs import (
    _BODY_DOC,
    IDEMPOTENCY_KEY_DOC,
    INSTANCE_KEY_SCHEMA,
    MAX_KEY,
    MAX_SEQUENCE,
    JsonBodyRoute,
    _json_body,
    _same_json,
    check_instance_id,
    idempotency_header,
    well_formed,
)
from app.api.models import (
    EventView,
    FlowView,
    InstanceView,
    ReviewView,
    SignalAnswer,
    StartAnswer,
)
from app.api.openapi import DEFS_KEY, REQUIRED_HEADERS_KEY, problem_responses, request_schema
from app.api.views import (
    API,
    awaiting,
    event_view,
    instance_view,
    review_view,
    signal_view,
)
from app.api.webhooks import _slug, add_keyed_signal_routes, claim_delivery_id, verified_delivery
from app.engine.engine import Engine
from app.engine.journal import InstanceState, SignalRecord
from app.engine.versions import unfinished_by_version, unserved
from app.errors import (
    ErrorCode,
    IdempotencyKeyReused,
    InputInvalid,
)
from app.flows.capability import Signal
from app.flows.catalog import version_key
from app.flows.plan import Plan, Profile

__all__ = [
    "add_trigger_routes",
    "build_router",
    "check_instance_id",
    "idempotency_header",
    "well_formed",
]

log = logging.getLogger("flowpark.api")


#: ``_deliver``'s default body: the request's JSON body.
_READ: Any = object()


def _start_handler(plan: Plan):  # type: ignore[no-untyped-def]
    async def start(
        token: StartToken,
        engine: EngineDep,
        request: Request,
        idempotency_key: str | None = Header(
            default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
        ),
    ) -> JSONResponse:
        key = idempotency_header(
            idempotency_key, required=bool(plan.trigger and plan.trigger.idempotent)
        )
        body = await _json_body(request)
        instance_key = None
        if isinstance(body, dict) and "instanceKey" in body:
            body = dict(body)
            instance_key = body.pop("instanceKey")
            if not isinstance(instance_key, str) or not 0 < len(instance_key) <= MAX_KEY:
                raise InputInvalid(
                    f"instanceKey must be a non-empty string of at most {MAX_KEY} characters"
                )
        started = await engine.start(plan, body, idempotency_key=key, instance_key=instance_key)
        inst = started.instance
        if plan.profile is Profile.EPHEMERAL:
            payload: dict[str, Any] = {
                "instanceId": inst.id,
                "status": str(inst.state),
                "result": inst.result,
            }
            if inst.failure is not None:
                payload["error"] = {"code": inst.failure.code, "message": inst.failure.message}
            return JSONResponse(payload, status_code=200)
        payload = {"instanceId": inst.id, "status": str(inst.state)}
        if inst.state is InstanceState.COMPLETED:
            payload["result"] = inst.result
        waits = awaiting(plan, inst)
        if waits:
            payload["awaiting"] = waits
        return JSONResponse(
            payload, status_code=202, headers={"Location": f"{API}/instances/{inst.id}"}
        )

    start.__doc__ = (
        f"Start `{plan.name}` {plan.version}. Requires a bearer token"
        + (" and an `Idempotency-Key` header" if plan.trigger and plan.trigger.idempotent else "")
        + ". "
        + (
            "Runs inside the request and answers 200 with `instanceId`, `status` and the "
            "`result` (or `error`)."
            if plan.profile is Profile.EPHEMERAL
            else "Answers 202 once the instance parks or ends: `instanceId`, `status` (its "
            "state then), `result` once completed, and `awaiting` (the signals it waits for "
            "now, each with the path to POST it to); `Location` is the instance's URL. When "
            "it has done neither within `FLOWPARK_START_WAIT_SECONDS` (default 2 s), 202 "
            'with `"status": "running"`: the instance is durably created and its run goes '
            "on on the node (follow `Location`). A replay with the same `Idempotency-Key` "
            "answers the same instance with its state now."
        )
        + " The body is the flow's input, plus an optional `instanceKey` (a business id "
        "unique among the flow's running instances: 409 `instance_key_in_use` when one holds "
        "it)." + _BODY_DOC
    )
    return start


async def _deliver(
    engine: Engine,
    request: Request,
    instance_id: str,
    name: str,
    key: str | None,
    body: Any = _READ,
) -> JSONResponse:
    """Deliver a signal (``body``: its payload, default the request's JSON body); a repeat
    of its ``Idempotency-Key`` answers the first signal (``created: false``) when it is the
    same signal - same name, same validated payload - and 422 ``idempotency_key_reused``
    otherwise (as the start routes do)."""
    check_instance_id(instance_id)
    idempotency_key = idempotency_header(key, required=False)
    if body is _READ:
        body = await _json_body(request)
    # the answer comes from the delivery: the signal as the run it started left it (taken
    # when the instance took it) and the state after that run, with nothing read back
    delivery = await engine.deliver(instance_id, name, body, idempotency_key)
    record = delivery.signal
    if not delivery.created and not _same_signal(
        engine, delivery.flow_name, delivery.flow_version, record, name, body
    ):
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} of instance {instance_id!r} was used with "
            "a different signal",
            idempotency_key=idempotency_key,
            instance_id=instance_id,
            signal_id=record.id,
        )
    view = signal_view(record)
    view.update(instanceId=instance_id, created=delivery.created, state=str(delivery.state))
    return JSONResponse(view, status_code=202)


def _same_signal(
    engine: Engine, flow_name: str, flow_version: str, first: SignalRecord, name: str, body: Any
) -> bool:
    """``body`` as signal ``name`` is what ``first`` stored: the same name, and the same
    payload once validated by the signal's model, as the engine stores it."""
    if first.name != name:
        return False
    plan = engine.catalog.find(flow_name, flow_version)
    signal = plan.signals.get(name) if plan is not None else None
    if signal is None:  # the engine refuses such a delivery before the store is asked
        return False
    # the body came as JSON: validated in JSON mode (strict fields read ISO strings), as
    # the engine stores it; it validated this very body already, so this succeeds
    try:
        payload = signal.model.model_validate_json(
            json.dumps(body), by_alias=True, by_name=False
        ).model_dump(mode="json", by_alias=True)
    except (ValidationError, ValueError):  # pragma: no cover - the engine refused it first
        payload = body
    return _same_json(first.payload, payload)


#: The body codes every start and signal route can answer.
_BODY_CODES = (
    ErrorCode.INPUT_INVALID,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
    ErrorCode.IDEMPOTENCY_KEY_REUSED,
)


def _body_examples(model: type[Any]) -> list[Any]:
    config = getattr(model, "model_config", {})
    extra = config.get("json_schema_extra")
    examples = extra.get("examples") if isinstance(extra, dict) else None
    return list(examples) if isinstance(examples, list) else []


def _start_links(plan: Plan) -> dict[str, Any]:
    """OpenAPI links from a start's answer to the reads and actions on its instance
    (schemathesis walks them: start -> read -> signal -> cancel)."""
    instance = {"instance_id": "$response.body#/instanceId"}
    links: dict[str, Any] = {
        "GetInstance": {"operationId": "get_instance", "parameters": instance},
        "CancelInstance": {"operationId": "cancel_instance", "parameters": instance},
        "ExtendBudget": {"operationId": "extend_instance_budget", "parameters": instance},
    }
    for name in plan.signals:
        links[f"Signal_{_slug(name)}"] = {
            "operationId": f"signal_{_slug(plan.name)}_{_slug(name)}",
            "parameters": instance,
        }
    return links


def _start_operation(plan: Plan) -> dict[str, Any]:
    trigger = plan.trigger
    assert trigger is not None
    ephemeral = plan.profile is Profile.EPHEMERAL
    status = 200 if ephemeral else 202
    codes = [*_BODY_CODES, ErrorCode.INSTANCE_KEY_IN_USE]
    if trigger.idempotent:
        codes.append(ErrorCode.IDEMPOTENCY_KEY_MISSING)
    schema, defs = request_schema(plan.input_model, {"instanceKey": INSTANCE_KEY_SCHEMA})
    body: dict[str, Any] = {"schema": schema}
    examples = _body_examples(plan.input_model)
    if examples:
        body["example"] = examples[0]
    answer: dict[str, Any] = {
        "description": (
            "The instance's outcome (an ephemeral flow runs inside the request)"
            if ephemeral
            else "The instance once it parked or ended; `Location` is its URL"
        ),
    }
    if not ephemeral:
        answer["headers"] = {
            "Location": {"description": "the instance's URL", "schema": {"type": "string"}}
        }
        answer["links"] = _start_links(plan)
    extra: dict[str, Any] = {
        # required when the input has required fields (none: `{}` or nothing)
        "requestBody": {
            "required": bool(schema.get("required")),
            "content": {"application/json": body},
        },
        DEFS_KEY: defs,
    }
    if trigger.idempotent:
        extra[REQUIRED_HEADERS_KEY] = ["Idempotency-Key"]
    return {
        "status_code": status,
        "response_model": StartAnswer,
        "responses": {status: answer, **problem_responses(*codes)},
        "openapi_extra": extra,
        "operation_id": f"start_{_slug(plan.name)}",
    }


def add_trigger_routes(app: FastAPI, plans: list[Plan]) -> None:
    """One start route per flow with an HTTP trigger, plus a signal route per declared
    signal at ``{route}/{instance_id}/signals/{name}``. Where several versions of a flow
    declare the same route, it starts the newest (instances finish on their own version)."""
    newest: dict[tuple[str, str], Plan] = {}
    for plan in plans:
        if plan.trigger is not None:
            route = (plan.trigger.method.upper(), plan.trigger.route)
            held = newest.get(route)
            if held is None or version_key(plan.version) > version_key(held.version):
                newest[route] = plan
    for plan in plans:
        trigger = plan.trigger
        if trigger is None or newest[(trigger.method.upper(), trigger.route)] is not plan:
            continue
        app.add_api_route(
            trigger.route,
            _start_handler(plan),
            methods=[trigger.method.upper()],
            tags=["flows"],
            name=f"start {plan.name}@{plan.version}",
            **_start_operation(plan),
        )
        for signal in plan.signals.values():
            if signal.verify is not None:
                _add_signed_signal_route(app, plan, trigger.route, signal)
                continue

            def make(sig_name: str, flow_name: str):  # type: ignore[no-untyped-def]
                async def deliver(
                    token: SignalToken,
                    engine: EngineDep,
                    request: Request,
                    instance_id: str = Path(description="the instance's id"),
                    idempotency_key: str | None = Header(
                        default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
                    ),
                ) -> JSONResponse:
                    return await _deliver(engine, request, instance_id, sig_name, idempotency_key)

                deliver.__doc__ = (
                    f"Deliver the `{sig_name}` signal to an instance of "
                    f"`{flow_name}`. Stored before anything else happens; "
                    "idempotent by `Idempotency-Key` (the same key with "
                    "another payload: 422 `idempotency_key_reused`). The "
                    "answer shows the signal as stored after delivery "
                    "(`takenAt` once the instance took it)." + _BODY_DOC
                )
                return deliver

            schema, defs = request_schema(signal.model)
            body: dict[str, Any] = {"schema": schema}
            examples = _body_examples(signal.model)
            if examples:
                body["example"] = examples[0]
            app.add_api_route(
                f"{trigger.route}/{{instance_id}}/signals/{signal.name}",
                make(signal.name, plan.name),
                methods=["POST"],
                tags=["signals"],
                status_code=202,
                name=f"signal {signal.name} ({plan.name}@{plan.version})",
                operation_id=f"signal_{_slug(plan.name)}_{_slug(signal.name)}",
                response_model=SignalAnswer,
                responses=problem_responses(*_SIGNAL_CODES),
                openapi_extra={
                    # required when the payload has required fields (none: `{}` or nothing)
                    "requestBody": {
                        "required": bool(schema.get("required")),
                        "content": {"application/json": body},
                    },
                    DEFS_KEY: defs,
                },
            )
        add_keyed_signal_routes(app, plan, trigger.route, _deliver)


_SIGNAL_CODES = (
    *_BODY_CODES,
    ErrorCode.INSTANCE_NOT_FOUND,
    ErrorCode.SIGNAL_NOT_DECLARED,
    ErrorCode.INSTANCE_ENDED,
)
_SIGNED_CODES = (ErrorCode.SIGNATURE_INVALID, ErrorCode.SIGNAL_DELIVERY_REPLAYED)
_INSTANCE_ID = Path(description="the instance's id (a lowercase, dashed UUID)")


def _add_signed_signal_route(app: FastAPI, plan: Plan, base: str, signal: Signal) -> None:
    """The route of a signal verified by its webhook verifier (no bearer token)."""
    verifier = signal.verify
    assert verifier is not None
    sig_name = signal.name

    async def deliver_signed(
        engine: EngineDep,
        settings: SettingsDep,
        delivery_ids: DeliveryIdsDep,
        request: Request,
        instance_id: str = Path(description="the instance's id"),
    ) -> Response:
        delivery = await verified_delivery(request, engine, settings, plan.name, signal)
        if delivery.body is None:  # adapt: not this signal (e.g. a provider's ping)
            return Response(status_code=204)
        if delivery.idempotency_key is not None:
            check_instance_id(instance_id)
            await claim_delivery_id(
                delivery_ids, engine, plan.name, sig_name, delivery.idempotency_key, instance_id
            )
        # the delivery's id is its idempotency key: a replay stores nothing new
        return await _deliver(
            engine, request, instance_id, sig_name, delivery.idempotency_key, delivery.body
        )

    deliver_signed.__doc__ = (
        f"Deliver the `{sig_name}` signal to an instance of `{plan.name}`, "
        + verifier.describe()
        + ", instead of a bearer token. A missing, stale or wrong signature: 401 "
        "`signature_invalid` (nothing stored). A replay of a delivery id answers the first "
        "signal (`created: false`) and stores nothing; its replay to another instance than "
        "the one it reached first is 409 `signal_delivery_replayed` (nothing stored)."
        + (
            " The body is the provider's own JSON, mapped to the signal's payload; a "
            "delivery that is not this signal is 204, one `adapt` cannot read is 422 "
            "`signal_payload_invalid` (nothing stored)."
            if signal.adapt is not None
            else ""
        )
        + _BODY_DOC
    )
    adapt_codes = [ErrorCode.SIGNAL_PAYLOAD_INVALID] if signal.adapt else []
    if signal.adapt is None:
        schema, defs = request_schema(signal.model)
    else:  # the provider's own payload
        schema, defs = {"type": "object", "description": "the provider's payload"}, {}
    body: dict[str, Any] = {"schema": schema}
    examples = _body_examples(signal.model) if signal.adapt is None else []
    if examples:
        body["example"] = examples[0]
    app.add_api_route(
        f"{base}/{{instance_id}}/signals/{sig_name}",
        deliver_signed,
        methods=["POST"],
        tags=["signals"],
        status_code=202,
        name=f"signal {sig_name} ({plan.name}@{plan.version})",
        operation_id=f"signal_{_slug(plan.name)}_{_slug(sig_name)}",
        response_model=SignalAnswer,
        responses={
            **({204: {"description": "Not this signal: nothing stored"}} if signal.adapt else {}),
            **problem_responses(*_SIGNAL_CODES, *_SIGNED_CODES, *adapt_codes, auth=False),
        },
        openapi_extra={
            "security": [],
            "requestBody": {"content": {"application/json": body}},
            DEFS_KEY: defs,
        },
    )


def build_router() -> APIRouter:
    """The generic ``/api/v1`` routes."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)

    @router.get(
        "/instances/{instance_id}",
        tags=["instances"],
        operation_id="get_instance",
        response_model=InstanceView,
        responses=problem_responses(ErrorCode.INSTANCE_NOT_FOUND),
    )
    async def get_instance(
        token: ReadToken, engine: EngineDep, instance_id: str = _INSTANCE_ID
    ) -> JSONResponse:
        """One instance: state, wake (``wakeAt``, ``wakeStepId``, ``wakeScope``), result or
        error (``code``, ``message``), lease, journal rows, signals, and what explains its
        wait: ``waiting`` (``kind``: poll, retry, signal or deadline; ``stepId``,
        ``capabilityId``, ``attempt``, ``wakeAt``), ``budget`` of the poll it waits at
        (``startedAt``, ``endsAt``, ``usedRatio``), ``attempts`` (one entry per poll
        attempt: ``scheduledAt``, ``startedAt``, ``latenessSeconds``, ``durationSeconds``,
        ``outcome`` and every try with its error ``type`` and ``detail``), ``tries`` (the
        number of capability executions in the journal) and ``actions`` (the operator's
        wake, extend-budget and cancel history: who and when)."""
        check_instance_id(instance_id)
        snap = await engine.journal.reads.load(instance_id)
        signals = await engine.journal.reads.list_signals(instance_id)
        actions = await engine.journal.operator.actions_of(instance_id)
        plan = engine.catalog.find(snap.instance.flow_name, snap.instance.flow_version)
        view = instance_view(snap.instance, snap.steps, signals, plan, now=engine.clock.now())
        view.update(explain_view(plan, snap.instance, snap.steps, engine.clock.now(), actions))
        return JSONResponse(view)

    @router.post(
        "/instances/{instance_id}/signals/{name}",
        tags=["signals"],
        status_code=202,
        operation_id="signal_instance",
        response_model=SignalAnswer,
        responses=problem_responses(*_SIGNAL_CODES),
        openapi_extra={
            "requestBody": {
                "content": {
                    "application/json": {
                        "schema": {"description": "the signal's payload (its model's JSON)"},
                        "example": {"jobId": "job-17"},
                    }
                }
            }
        },
    )
    async def signal_instance(
        token: SignalToken,
        engine: EngineDep,
        request: Request,
        instance_id: str = _INSTANCE_ID,
        name: str = Path(description="the signal's name, as the flow declares it"),
        idempotency_key: str | None = Header(
            default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
        ),
    ) -> JSONResponse:
        """Deliver signal ``name``: 404 ``instance_not_found`` / ``signal_not_declared``,
        409 ``instance_ended`` (nothing stored), 422 ``input_invalid``, 422
        ``idempotency_key_reused`` (the same ``Idempotency-Key`` with another payload).

        The payload's schema is the signal's in the instance's flow (stated by the flow's own
        signal route): one it does not take is 422 ``input_invalid`` naming the ``signal``.

        The body is JSON: ``Content-Type: application/json`` (or ``application/*+json``);
        no ``Content-Type``, or any other, is 415 ``unsupported_media_type``; at most
        ``max_body_bytes``, else 413 ``body_too_large``; no string with U+0000, else 422."""
        return await _deliver(engine, request, instance_id, name, idempotency_key)

    @router.get(
        "/reviews",
        tags=["reviews"],
        operation_id="list_reviews",
        response_model=list[ReviewView],
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def reviews(
        token: ReadToken, engine: EngineDep, limit: int = Query(100, ge=1, le=1000)
    ) -> JSONResponse:
        """The human review queue, oldest first."""
        items = await engine.journal.reads.list_reviews(limit)
        return JSONResponse([review_view(i) for i in items])

    @router.get(
        "/events",
        tags=["events"],
        operation_id="list_events",
        response_model=list[EventView],
        responses=problem_responses(ErrorCode.INPUT_INVALID),
    )
    async def events(
        token: ReadToken,
        engine: EngineDep,
        limit: int = Query(100, ge=1, le=1000),
        after: int | None = Query(None, ge=0, le=MAX_SEQUENCE),
    ) -> JSONResponse:
        """The outbox of emitted events, in commit order (``after``: a sequence)."""
        items = await engine.journal.reads.list_events(limit, after)
        return JSONResponse([event_view(i) for i in items])

    @router.get(
        "/flows",
        tags=["flows"],
        operation_id="list_flows",
        response_model=list[FlowView],
        responses=problem_responses(),
    )
    async def flows(token: ReadToken, engine: EngineDep) -> JSONResponse:
        """Flow versions: every version registered on this node (`served: true`), then
        every version with unfinished instances that this node does not serve (`served:
        false`: they wait for a node that serves it). `unfinished` counts the version's
        running and suspended instances; a start through a flow's route takes its newest
        served version."""
        catalog = engine.catalog
        unfinished = await unfinished_by_version(engine.journal.operator, engine.clock.now())
        served = [
            {
                "name": p.name,
                "version": p.version,
                "served": True,
                "unfinished": unfinished.get(p.key, 0),
                "profile": str(p.profile),
                "route": p.trigger.route if p.trigger else None,
                "signals": sorted(p.signals),
                "streams": sorted(p.streams),
                "deadlineSeconds": p.deadline.total_seconds() if p.deadline else None,
            }
            for p in sorted(catalog.plans(), key=lambda p: p.key)
        ]
        missing = [
            {"name": name, "version": version, "served": False, "unfinished": n}
            for (name, version), n in unserved(unfinished, catalog).items()
        ]
        return JSONResponse(served + missing)

    return router
