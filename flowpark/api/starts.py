"""Start routes: one per flow with an HTTP trigger (``POST /api/v1/documents`` ...), with
the flow's signal routes beside it.

A start is the measured hot path: the route builds its :class:`~flowpark.api.models.StartAnswer`
and FastAPI serialises it straight to JSON bytes (pydantic's serializer, no intermediate
dict); the status (202 durable, 200 ephemeral) is the route's own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Header, Request, Response
from pydantic import BaseModel

from flowpark.api.deps import EngineDep, StartToken
from flowpark.api.hygiene import TEXT_RULE, control_in
from flowpark.api.inputs import (
    _BODY_DOC,
    IDEMPOTENCY_KEY_DOC,
    INSTANCE_KEY_SCHEMA,
    MAX_KEY,
    JsonBodyRoute,
    _json_body,
    idempotency_header,
)
from flowpark.api.models import FlowError, StartAnswer
from flowpark.api.openapi import (
    DEFS_KEY,
    REQUIRED_HEADERS_KEY,
    operation_slug,
    problem_responses,
    request_schema,
)
from flowpark.api.signals import BODY_CODES, add_signal_routes, body_examples
from flowpark.api.views import API, awaiting
from flowpark.engine.records import InstanceRecord, InstanceState
from flowpark.errors import ErrorCode, InputInvalid, shown
from flowpark.flows.catalog import version_key
from flowpark.flows.hints import closest_name, json_names
from flowpark.flows.plan import Plan, Profile
from flowpark.redaction import redact

__all__ = ["body_fields", "build_trigger_router", "check_body_fields", "start_answer"]


def body_fields(model: type[BaseModel]) -> frozenset[str] | None:
    """The JSON names a start body may hold for ``model`` (its fields' aliases, every
    choice of an ``AliasChoices``, and ``instanceKey``), or None when the model decides
    itself: it takes unknown fields (``extra="allow"``) or refuses them in its own
    validation (``extra="forbid"``)."""
    if model.model_config.get("extra") in ("allow", "forbid"):
        return None
    return json_names(model) | {"instanceKey"}


def check_body_fields(plan: Plan, body: Any, known: frozenset[str] | None) -> None:
    """Refuse a start body that names a field its flow's input does not have (a misspelt
    ``instance_key`` would else be dropped without a word).

    Raises:
        InputInvalid: 422 ``input_invalid``, one error per unknown field, with the closest
            known name when there is one.
    """
    if known is None or not isinstance(body, dict):
        return
    errors = []
    for name in body:
        if name in known:
            continue
        close = closest_name(name, known)
        hint = f" (did you mean {close}?)" if close else ""
        errors.append({"loc": [name], "msg": f"unknown field{hint}", "type": "extra_forbidden"})
    if errors:
        listed = ", ".join(shown(e["loc"][0], 40) for e in errors[:5])
        raise InputInvalid(
            f"input of {plan.name} has unknown field(s): {listed}", errors=errors, flow=plan.name
        )


def start_answer(plan: Plan, inst: InstanceRecord, root: str = "") -> StartAnswer:
    """A start's answer: the instance as its first advance left it.

    Args:
        plan: the flow version started.
        inst: the instance as the start's first advance left it (or as stored, for an
            idempotent repeat).
        root: the path the API is served under (a host application's prefix; empty at the
            root), which the ``awaiting`` signals' ``href`` start with.

    Returns:
        :class:`~flowpark.api.models.StartAnswer`: for an ephemeral flow the ``result`` or
        ``error``; for a durable one the ``result`` once completed and the signals it
        ``awaiting`` now.
    """
    if plan.profile is Profile.EPHEMERAL:
        if inst.failure is None:
            return StartAnswer(instance_id=inst.id, status=inst.state, result=inst.result)
        error = FlowError(code=inst.failure.code, message=redact(inst.failure.message))
        return StartAnswer(instance_id=inst.id, status=inst.state, result=inst.result, error=error)
    fields: dict[str, Any] = {}
    if inst.state is InstanceState.COMPLETED:
        fields["result"] = inst.result
    waits = awaiting(plan, inst, root)
    if waits:
        fields["awaiting"] = waits
    return StartAnswer(instance_id=inst.id, status=inst.state, **fields)


def _start_handler(plan: Plan) -> Callable[..., Awaitable[StartAnswer]]:
    known = body_fields(plan.input_model)

    async def start(
        token: StartToken,
        engine: EngineDep,
        request: Request,
        response: Response,
        idempotency_key: str | None = Header(
            default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
        ),
    ) -> StartAnswer:
        key = idempotency_header(
            idempotency_key, required=bool(plan.trigger and plan.trigger.idempotent)
        )
        body = await _json_body(request)
        check_body_fields(plan, body, known)
        instance_key = None
        if isinstance(body, dict) and "instanceKey" in body:
            body = dict(body)
            instance_key = body.pop("instanceKey")
            if not isinstance(instance_key, str) or not 0 < len(instance_key) <= MAX_KEY:
                raise InputInvalid(
                    f"instanceKey must be a non-empty string of at most {MAX_KEY} characters"
                )
            found = control_in(instance_key)
            if found is not None:
                why = f"holds U+{ord(found):04X} (a control character)"
                raise InputInvalid(
                    f"instanceKey {why}: {TEXT_RULE}",
                    errors=[{"loc": ["body", "instanceKey"], "msg": why, "type": "value_error"}],
                )
        started = await engine.start(plan, body, idempotency_key=key, instance_key=instance_key)
        root = request.scope.get("root_path", "")  # a host application's prefix
        answer = start_answer(plan, started.instance, root)
        if plan.profile is not Profile.EPHEMERAL:  # 202, the route's status
            response.headers["Location"] = f"{root}{API}/instances/{answer.instance_id}"
        return answer

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
        + " The body is the flow's input (a field the input does not have is 422 "
        "`input_invalid`, naming it), plus an optional `instanceKey` (a business id "
        "unique among the flow's running instances: 409 `instance_key_in_use` when one holds "
        "it)." + _BODY_DOC
    )
    return start


def _start_links(plan: Plan) -> dict[str, Any]:
    """OpenAPI links from a start's answer to the reads and actions on its instance
    (schemathesis walks them: start -> read -> signal -> cancel)."""
    instance = {"instance_id": "$response.body#/instanceId"}
    links: dict[str, Any] = {
        "GetInstance": {"operationId": "get_instance", "parameters": instance},
        "CancelInstance": {"operationId": "cancel_instance", "parameters": instance},
        "ExtendBudget": {"operationId": "extend_instance_budget", "parameters": instance},
        "RetryCompensations": {
            "operationId": "retry_instance_compensations",
            "parameters": instance,
        },
    }
    for name in plan.signals:
        links[f"Signal_{operation_slug(name)}"] = {
            "operationId": f"signal_{operation_slug(plan.name)}_{operation_slug(name)}",
            "parameters": instance,
        }
    return links


def _start_operation(plan: Plan) -> dict[str, Any]:
    trigger = plan.trigger
    assert trigger is not None
    ephemeral = plan.profile is Profile.EPHEMERAL
    status = 200 if ephemeral else 202
    codes = [*BODY_CODES, ErrorCode.INSTANCE_KEY_IN_USE]
    if trigger.idempotent:
        codes.append(ErrorCode.IDEMPOTENCY_KEY_MISSING)
    schema, defs = request_schema(plan.input_model, {"instanceKey": INSTANCE_KEY_SCHEMA})
    if plan.input_model.model_config.get("extra") != "allow":  # unknown fields: 422
        schema["additionalProperties"] = False
    body: dict[str, Any] = {"schema": schema}
    examples = body_examples(plan.input_model)
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
        "responses": {status: answer, **problem_responses(*codes)},
        "openapi_extra": extra,
        "operation_id": f"start_{operation_slug(plan.name)}",
    }


def build_trigger_router(plans: list[Plan]) -> APIRouter:
    """One start route per flow with an HTTP trigger, plus its signal routes
    (:func:`flowpark.api.signals.add_signal_routes`). Where several versions of a flow declare
    the same route, it starts the newest (instances finish on their own version)."""
    router = APIRouter(route_class=JsonBodyRoute)
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
        router.add_api_route(
            trigger.route,
            _start_handler(plan),
            methods=[trigger.method.upper()],
            tags=["flows"],
            name=f"start {plan.name}@{plan.version}",
            **_start_operation(plan),
        )
        add_signal_routes(router, plan, trigger.route)
    return router
