"""Keyed signal routes: ``POST {route}/signals/{name}`` under a flow's trigger route, a
signal delivered to the instance its payload names by instance key (the signal's
``instance_key``), for a provider's webhook that knows no instance id.
"""

from __future__ import annotations

from fastapi import APIRouter, Header, Request, Response
from fastapi import Path as FastApiPath

from flowpark.api.deps import DeliveryIdsDep, EngineDep, SettingsDep, SignalToken
from flowpark.api.inputs import _BODY_DOC, IDEMPOTENCY_KEY_DOC, _json_body, idempotency_header
from flowpark.api.models import SignalAnswer
from flowpark.api.openapi import DEFS_KEY, operation_slug, problem_responses, request_schema
from flowpark.api.webhooks import (
    Deliver,
    claim_delivery_id,
    keyed_target,
    signed_route_extra,
    verified_delivery,
)
from flowpark.errors import ErrorCode, SignalNotDeclared, shown
from flowpark.flows.capability import Signal
from flowpark.flows.plan import Plan

__all__ = ["add_keyed_signal_routes"]


#: What a keyed route may answer besides its body's codes.
_KEYED_CODES = (
    ErrorCode.INPUT_INVALID,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
    ErrorCode.IDEMPOTENCY_KEY_REUSED,
    ErrorCode.INSTANCE_NOT_FOUND,
    ErrorCode.INSTANCE_ENDED,
    ErrorCode.SIGNAL_DELIVERY_REPLAYED,
    ErrorCode.SIGNAL_PAYLOAD_INVALID,
)


def add_keyed_signal_routes(router: APIRouter, plan: Plan, base: str, deliver: Deliver) -> None:
    """The flow's keyed routes, ``POST {base}/signals/{name}``: one per signal with an
    ``instance_key`` (:func:`add_keyed_signal_route`), then, when there is one, the answer
    to any other name (:func:`add_unknown_keyed_signal_route`).

    Args:
        router: the router the flow's routes are added to.
        plan: the flow version the trigger route starts.
        base: the flow's trigger route.
        deliver: the signal routes' delivery (:func:`flowpark.api.signals.deliver`).
    """
    keyed = [signal for signal in plan.signals.values() if signal.instance_key is not None]
    for signal in keyed:
        add_keyed_signal_route(router, plan, base, signal, deliver)
    if keyed:
        add_unknown_keyed_signal_route(router, plan, base)


def add_keyed_signal_route(
    router: APIRouter, plan: Plan, base: str, signal: Signal, deliver: Deliver
) -> None:
    """``POST {base}/signals/{name}``: a signal delivered to the instance its payload names
    by instance key (the signal's ``instance_key``). A verified signal's route takes the
    provider's signed delivery (mapped by ``adapt``); any other's, a bearer token of the
    ``signal`` scope, the typed payload and an optional ``Idempotency-Key``."""
    if signal.verify is None:
        _add_bearer_keyed_route(router, plan, base, signal, deliver)
        return
    verifier = signal.verify

    async def deliver_keyed(
        engine: EngineDep, settings: SettingsDep, delivery_ids: DeliveryIdsDep, request: Request
    ) -> SignalAnswer | Response:
        delivery = await verified_delivery(request, engine, settings, plan.name, signal)
        if delivery.body is None:  # adapt: not this signal
            return Response(status_code=204)
        instance_id = await keyed_target(engine, plan, signal, delivery.body)
        if instance_id is None:  # the payload names no instance: nothing to store
            return Response(status_code=204)
        if delivery.idempotency_key is not None:
            await claim_delivery_id(
                delivery_ids, engine, plan.name, signal.name, delivery.idempotency_key, instance_id
            )
        return await deliver(
            engine, request, instance_id, signal.name, delivery.idempotency_key, delivery.body
        )

    deliver_keyed.__doc__ = (
        f"Deliver the `{signal.name}` signal to the instance of `{plan.name}` whose "
        "instance key the payload names (one URL for the provider's webhook, for every "
        "instance): its running instance holding the key, else the newest that held it "
        "(a repeat of a taken delivery is answered as one); none: 404 "
        f"`instance_not_found`. The delivery is {verifier.describe()}, instead of a "
        "bearer token; a missing, stale or wrong signature is 401 `signature_invalid` "
        "(nothing stored). A delivery that is not this signal, or names no instance, is "
        "answered 204 and stores nothing; one the flow's `adapt` or `instance_key` cannot "
        "read is 422 `signal_payload_invalid`." + _BODY_DOC
    )
    router.add_api_route(
        f"{base}/signals/{signal.name}",
        deliver_keyed,
        methods=["POST"],
        tags=["signals"],
        status_code=202,
        name=f"signal {signal.name} by instance key ({plan.name}@{plan.version})",
        operation_id=f"signal_{operation_slug(plan.name)}_{operation_slug(signal.name)}_by_key",
        response_model=SignalAnswer,
        responses={
            204: {"description": "Not this signal, or no instance named: nothing stored"},
            **problem_responses(*_KEYED_CODES, ErrorCode.SIGNATURE_INVALID, auth=False),
        },
        openapi_extra=signed_route_extra(),
    )


def _add_bearer_keyed_route(
    router: APIRouter, plan: Plan, base: str, signal: Signal, deliver: Deliver
) -> None:
    """The keyed route of a signal with no verifier: a bearer token of the ``signal``
    scope, the typed payload, an optional ``Idempotency-Key`` (keyed across the flow's
    instances, as a signed delivery's id is)."""

    async def deliver_keyed(
        token: SignalToken,
        engine: EngineDep,
        delivery_ids: DeliveryIdsDep,
        request: Request,
        idempotency_key: str | None = Header(
            default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
        ),
    ) -> SignalAnswer | Response:
        key = idempotency_header(idempotency_key, required=False)
        body = await _json_body(request)
        instance_id = await keyed_target(engine, plan, signal, body)
        if instance_id is None:  # the payload names no instance: nothing to store
            return Response(status_code=204)
        if key is not None:
            await claim_delivery_id(delivery_ids, engine, plan.name, signal.name, key, instance_id)
        return await deliver(engine, request, instance_id, signal.name, key, body)

    deliver_keyed.__doc__ = (
        f"Deliver the `{signal.name}` signal to the instance of `{plan.name}` whose "
        "instance key the payload names (no instance id: the caller knows the business "
        "key the instance was started with): its running instance holding the key, else "
        "the newest that held it (a repeat of a taken delivery is answered as one); none: "
        "404 `instance_not_found`. A bearer token of the `signal` scope; the body is the "
        "signal's payload, as on its instance route. Idempotent by `Idempotency-Key` "
        "across the flow's instances: a repeat answers the first signal (`created: "
        "false`); the same key sent for another instance is 409 "
        "`signal_delivery_replayed`. A payload that names no instance is answered 204 and "
        "stores nothing; one its `instance_key` cannot read is 422 "
        "`signal_payload_invalid`." + _BODY_DOC
    )
    schema, defs = request_schema(signal.model)
    router.add_api_route(
        f"{base}/signals/{signal.name}",
        deliver_keyed,
        methods=["POST"],
        tags=["signals"],
        status_code=202,
        name=f"signal {signal.name} by instance key ({plan.name}@{plan.version})",
        operation_id=f"signal_{operation_slug(plan.name)}_{operation_slug(signal.name)}_by_key",
        response_model=SignalAnswer,
        responses={
            204: {"description": "No instance named: nothing stored"},
            **problem_responses(*_KEYED_CODES),
        },
        openapi_extra={
            "requestBody": {
                "required": bool(schema.get("required")),
                "content": {"application/json": {"schema": schema}},
            },
            DEFS_KEY: defs,
        },
    )


def add_unknown_keyed_signal_route(router: APIRouter, plan: Plan, base: str) -> None:
    """``POST {base}/signals/{name}`` for any other name, added after the flow's keyed
    routes: 404 ``signal_not_declared`` naming the signal and listing the flow's keyed
    signals (``keyedSignals``) and declared signals (``declaredSignals``), where a route
    that is not there would answer a bare ``not_found``. Not in the OpenAPI document."""
    keyed = sorted(n for n, s in plan.signals.items() if s.instance_key is not None)
    declared = sorted(plan.signals)

    async def unknown_keyed_signal(
        name: str = FastApiPath(description="the signal's name"),
    ) -> Response:
        if name in plan.signals:
            detail = (
                f"signal {name!r} of {plan.name}@{plan.version} has no keyed route (it "
                f"declares no instance_key=): deliver it on {base}/{{instanceId}}/signals/"
                f"{name}; the keyed routes take {', '.join(keyed)}"
            )
        else:
            detail = (
                f"flow {plan.name}@{plan.version} declares no signal {shown(name)!r}; its "
                f"keyed routes take {', '.join(keyed)}"
            )
        raise SignalNotDeclared(
            detail,
            flow=plan.name,
            signal=shown(name),
            keyed_signals=keyed,
            declared_signals=declared,
        )

    router.add_api_route(
        f"{base}/signals/{{name}}",
        unknown_keyed_signal,
        methods=["POST"],
        include_in_schema=False,
        name=f"unknown keyed signal ({plan.name}@{plan.version})",
    )
