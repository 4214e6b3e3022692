"""Signal routes: the generic ``POST /api/v1/instances/{instance_id}/signals/{name}``, and
each flow's own signal routes under its trigger's route (bearer token, or verified by the
signal's webhook verifier, by instance id or by the instance key the payload names).

A signal is stored before anything else happens; a repeat of its ``Idempotency-Key``
answers the first signal (``created: false``) when it is the same signal, and 422
``idempotency_key_reused`` otherwise.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Header, Path, Request, Response
from pydantic import ValidationError

from flowpark.api.deps import DeliveryIdsDep, EngineDep, SettingsDep, SignalToken
from flowpark.api.inputs import (
    _BODY_DOC,
    IDEMPOTENCY_KEY_DOC,
    JsonBodyRoute,
    _json_body,
    _same_json,
    check_instance_id,
    idempotency_header,
)
from flowpark.api.keyed import add_keyed_signal_routes
from flowpark.api.models import SignalAnswer
from flowpark.api.openapi import DEFS_KEY, operation_slug, problem_responses, request_schema
from flowpark.api.views import API, signal_answer
from flowpark.api.webhooks import claim_delivery_id, verified_delivery
from flowpark.engine.node.engine import Engine
from flowpark.engine.records import SignalRecord
from flowpark.errors import ErrorCode, IdempotencyKeyReused
from flowpark.flows.capability import Signal
from flowpark.flows.plan import Plan

__all__ = [
    "BODY_CODES",
    "SIGNAL_CODES",
    "add_signal_routes",
    "body_examples",
    "build_signals_router",
    "deliver",
    "deliver_payload",
]

#: ``deliver``'s default body: the request's JSON body.
_READ: Any = object()
_INSTANCE_ID = Path(description="the instance's id (a lowercase, dashed UUID)")


async def deliver(
    engine: Engine,
    request: Request | None,
    instance_id: str,
    name: str,
    key: str | None,
    body: Any = _READ,
) -> SignalAnswer:
    """Deliver signal ``name`` to an instance, as every signal route does.

    Args:
        engine: the node's engine.
        request: the route's request (its JSON body is the payload unless ``body`` is
            given); None with ``body`` (an in-process delivery).
        instance_id: the instance's id, as the path names it.
        name: the signal's name.
        key: the ``Idempotency-Key`` header's value (None: none sent).
        body: the payload (default: the request's JSON body).

    Returns:
        The signal as the run it started left it (``takenAt`` once the instance took it),
        with ``created`` (false: a repeat of its ``Idempotency-Key``) and the state after.

    Raises:
        InstanceNotFound, SignalNotDeclared: 404. InstanceEnded: 409. InputInvalid: 422.
        IdempotencyKeyReused: 422, the key was used with another signal (another name, or
            another payload once validated). IdempotencyKeyInvalid: 400.
    """
    if body is _READ:
        if request is None:
            raise TypeError("deliver() needs the request or the body")
        check_instance_id(instance_id)
        idempotency_header(key, required=False)
        body = await _json_body(request)
    return await deliver_payload(engine, instance_id, name, key, body)


async def deliver_payload(
    engine: Engine, instance_id: str, name: str, key: str | None, body: Any
) -> SignalAnswer:
    """Deliver signal ``name`` with payload ``body`` (JSON) to an instance: what every
    signal route does once it has the payload (the harness delivers through it too).

    Args:
        engine: the node's engine.
        instance_id: the instance's id, as the path names it.
        name: the signal's name.
        key: the ``Idempotency-Key`` (or the delivery's id); None: none.
        body: the payload, JSON.

    Returns:
        The answer :func:`deliver` describes.

    Raises:
        As :func:`deliver`.
    """
    check_instance_id(instance_id)
    idempotency_key = idempotency_header(key, required=False)
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
    return signal_answer(record, instance_id, delivery.created, delivery.state)


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
BODY_CODES = (
    ErrorCode.INPUT_INVALID,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
    ErrorCode.IDEMPOTENCY_KEY_REUSED,
)


SIGNAL_CODES = (
    *BODY_CODES,
    ErrorCode.INSTANCE_NOT_FOUND,
    ErrorCode.SIGNAL_NOT_DECLARED,
    ErrorCode.INSTANCE_ENDED,
)
_SIGNED_CODES = (ErrorCode.SIGNATURE_INVALID, ErrorCode.SIGNAL_DELIVERY_REPLAYED)
_SIGNED_CODES = (ErrorCode.SIGNATURE_INVALID, ErrorCode.SIGNAL_DELIVERY_REPLAYED)


def body_examples(model: type[Any]) -> list[Any]:
    """The examples a body model declares (``json_schema_extra``), for the OpenAPI."""
    config = getattr(model, "model_config", {})
    extra = config.get("json_schema_extra")
    examples = extra.get("examples") if isinstance(extra, dict) else None
    return list(examples) if isinstance(examples, list) else []


def add_signal_routes(router: APIRouter, plan: Plan, base: str) -> None:
    """The routes of ``plan``'s signals under ``base`` (its trigger's route):
    ``{base}/{instance_id}/signals/{name}`` per signal (a bearer token with the ``signal``
    scope, or verified by the signal's webhook verifier), and ``{base}/signals/{name}`` for
    a verified signal that names its instance by instance key."""
    for signal in plan.signals.values():
        if signal.verify is not None:
            _add_signed_signal_route(router, plan, base, signal)
            continue

        def make(sig_name: str, flow_name: str):  # type: ignore[no-untyped-def]
            async def deliver_signal(
                token: SignalToken,
                engine: EngineDep,
                request: Request,
                instance_id: str = Path(description="the instance's id"),
                idempotency_key: str | None = Header(
                    default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
                ),
            ) -> SignalAnswer:
                return await deliver(engine, request, instance_id, sig_name, idempotency_key)

            deliver_signal.__doc__ = (
                f"Deliver the `{sig_name}` signal to an instance of "
                f"`{flow_name}`. Stored before anything else happens; "
                "idempotent by `Idempotency-Key` (the same key with "
                "another payload: 422 `idempotency_key_reused`). The "
                "answer shows the signal as stored after delivery "
                "(`takenAt` once the instance took it)." + _BODY_DOC
            )
            return deliver_signal

        schema, defs = request_schema(signal.model)
        body: dict[str, Any] = {"schema": schema}
        examples = body_examples(signal.model)
        if examples:
            body["example"] = examples[0]
        router.add_api_route(
            f"{base}/{{instance_id}}/signals/{signal.name}",
            make(signal.name, plan.name),
            methods=["POST"],
            tags=["signals"],
            status_code=202,
            name=f"signal {signal.name} ({plan.name}@{plan.version})",
            operation_id=f"signal_{operation_slug(plan.name)}_{operation_slug(signal.name)}",
            responses=problem_responses(*SIGNAL_CODES),
            openapi_extra={
                # required when the payload has required fields (none: `{}` or nothing)
                "requestBody": {
                    "required": bool(schema.get("required")),
                    "content": {"application/json": body},
                },
                DEFS_KEY: defs,
            },
        )
    add_keyed_signal_routes(router, plan, base, deliver)


def _add_signed_signal_route(router: APIRouter, plan: Plan, base: str, signal: Signal) -> None:
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
    ) -> SignalAnswer | Response:
        delivery = await verified_delivery(request, engine, settings, plan.name, signal)
        if delivery.body is None:  # adapt: not this signal (e.g. a provider's ping)
            return Response(status_code=204)
        if delivery.idempotency_key is not None:
            check_instance_id(instance_id)
            await claim_delivery_id(
                delivery_ids, engine, plan.name, sig_name, delivery.idempotency_key, instance_id
            )
        # the delivery's id is its idempotency key: a replay stores nothing new
        return await deliver(
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
    examples = body_examples(signal.model) if signal.adapt is None else []
    if examples:
        body["example"] = examples[0]
    router.add_api_route(
        f"{base}/{{instance_id}}/signals/{sig_name}",
        deliver_signed,
        methods=["POST"],
        tags=["signals"],
        status_code=202,
        name=f"signal {sig_name} ({plan.name}@{plan.version})",
        operation_id=f"signal_{operation_slug(plan.name)}_{operation_slug(sig_name)}",
        response_model=SignalAnswer,
        responses={
            **({204: {"description": "Not this signal: nothing stored"}} if signal.adapt else {}),
            **problem_responses(*SIGNAL_CODES, *_SIGNED_CODES, *adapt_codes, auth=False),
        },
        openapi_extra={
            "security": [],
            "requestBody": {"content": {"application/json": body}},
            DEFS_KEY: defs,
        },
    )


def build_signals_router() -> APIRouter:
    """``POST /api/v1/instances/{instance_id}/signals/{name}``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)

    @router.post(
        "/instances/{instance_id}/signals/{name}",
        tags=["signals"],
        status_code=202,
        operation_id="signal_instance",
        responses=problem_responses(*SIGNAL_CODES),
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
    ) -> SignalAnswer:
        """Deliver signal ``name``: 404 ``instance_not_found`` / ``signal_not_declared``,
        409 ``instance_ended`` (nothing stored), 422 ``input_invalid``, 422
        ``idempotency_key_reused`` (the same ``Idempotency-Key`` with another payload).

        The payload's schema is the signal's in the instance's flow (stated by the flow's own
        signal route): one it does not take is 422 ``input_invalid`` naming the ``signal``.

        The body is JSON: ``Content-Type: application/json`` (or ``application/*+json``);
        no ``Content-Type``, or any other, is 415 ``unsupported_media_type``; at most
        ``max_body_bytes``, else 413 ``body_too_large``; no string with U+0000, else 422."""
        return await deliver(engine, request, instance_id, name, idempotency_key)

    return router
