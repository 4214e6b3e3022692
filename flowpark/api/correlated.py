"""Provider signal routes: ``POST /api/v1/providers/{provider}/signals/{name}``, one fixed
URL per signal declared with ``correlate=Correlate(provider, key)``, shared by every flow
(and version) that declares it.

A delivery is verified by the signal's verifier (or, for a signal with none, a bearer token
of the ``signal`` scope), mapped by each declaring version's ``adapt``, its correlation key
read by the signal's ``key`` function, and delivered to the one live instance holding that
key (:class:`~flowpark.engine.ports.Correlations`). A key no live instance holds is 404
``correlation_key_unknown`` and stores nothing; a replayed delivery id answers the first
delivery (even once its instance has ended and released the key), unless the key it names
is held now by another live instance than the one the id reached: a provider that reuses
its ids (after a restart) is refused with 409 ``delivery_id_reused``, logged and counted
(``flowpark_webhook_delivery_ids_reused_total``), rather than answered a quiet success.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Header, Request, Response
from fastapi import Path as FastApiPath
from pydantic import SecretStr

from flowpark.api.deps import DeliveryIds, DeliveryIdsDep, EngineDep, SettingsDep, SignalToken
from flowpark.api.inputs import (
    _BODY_DOC,
    IDEMPOTENCY_KEY_DOC,
    JsonBodyRoute,
    idempotency_header,
    json_body,
)
from flowpark.api.models import SignalAnswer
from flowpark.api.openapi import DEFS_KEY, operation_slug, problem_responses, request_schema
from flowpark.api.signals import deliver_payload
from flowpark.api.views import API
from flowpark.api.webhooks import (
    adapted,
    claim_delivery_id,
    read_webhook,
    signed_route_extra,
    typed_payload,
    unreadable,
)
from flowpark.engine.node.engine import Engine
from flowpark.errors import (
    CorrelationKeyAmbiguous,
    CorrelationKeyUnknown,
    DeliveryIdReused,
    ErrorCode,
    FlowparkError,
    SignalNotDeclared,
    shown,
)
from flowpark.flows.capability import Signal
from flowpark.flows.correlation import check_correlation_key
from flowpark.flows.plan import Plan
from flowpark.flows.webhooks import WebhookDelivery

__all__ = ["build_provider_signals_router", "deliver_provider_signal", "provider_signal_groups"]

log = logging.getLogger("flowpark.api")

#: What a provider signal route may answer besides its authentication's codes.
_CODES = (
    ErrorCode.INPUT_INVALID,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.IDEMPOTENCY_KEY_INVALID,
    ErrorCode.IDEMPOTENCY_KEY_REUSED,
    ErrorCode.CORRELATION_KEY_UNKNOWN,
    ErrorCode.CORRELATION_KEY_AMBIGUOUS,
    ErrorCode.DELIVERY_ID_REUSED,
    ErrorCode.INSTANCE_ENDED,
    ErrorCode.SIGNAL_DELIVERY_REPLAYED,
    ErrorCode.SIGNAL_PAYLOAD_INVALID,
)


@dataclass(frozen=True)
class _Read:
    """One declaring version's reading of a delivery: the key and the payload (JSON)."""

    plan: Plan
    key: str
    body: Any


def _reads(
    plans: list[Plan], name: str, delivery: WebhookDelivery | None, body: Any
) -> list[_Read]:
    """Each declaring version's reading of the delivery (``delivery`` for a verified signal,
    else the typed payload's JSON ``body``); a version whose ``adapt`` or ``key`` says
    "not this signal" (None) reads nothing.

    Raises:
        InputInvalid, SignalPayloadInvalid: 422: no version could read it (the first
            version's refusal).
    """
    reads: list[_Read] = []
    refused: list[FlowparkError] = []
    for plan in plans:
        signal = plan.signals[name]
        try:
            payload_json = body if delivery is None else _payload(signal, delivery, plan)
            if payload_json is None and delivery is not None:
                continue  # the flow's adapt: not this signal (a bearer's null is no payload)
            key = _key(signal, plan, typed_payload(signal, payload_json))
        except FlowparkError as exc:
            refused.append(exc)
            continue
        if key is not None:
            reads.append(_Read(plan, key, payload_json))
    if not reads and refused:
        raise refused[0]
    return reads


def _payload(signal: Signal, delivery: WebhookDelivery, plan: Plan) -> Any:
    return delivery.payload if signal.adapt is None else adapted(signal, delivery, plan.name)


def _key(signal: Signal, plan: Plan, payload: Any) -> str | None:
    """The correlation key ``payload`` names (a non-string id as its ``str``), or None.

    Raises:
        SignalPayloadInvalid: the signal's ``key`` function raised (logged).
    """
    assert signal.correlate is not None
    try:
        key = signal.correlate.key(payload)
    except Exception as exc:  # noqa: BLE001 - the flow's code on a delivery's payload
        raise unreadable(signal, plan.name, "correlate key", exc) from None
    return None if key is None else str(key)


def provider_signal_groups(plans: list[Plan]) -> dict[tuple[str, str], list[Plan]]:
    """The provider signals ``plans`` declare (``correlate=``), by ``(provider, name)``:
    the plans declaring each, newest version first (its route's verifier is the first's)."""
    groups: dict[tuple[str, str], list[Plan]] = defaultdict(list)
    for plan in sorted(plans, key=lambda p: (p.name, p.version), reverse=True):
        for signal in plan.signals.values():
            if signal.correlate is not None:
                groups[(signal.correlate.provider, signal.name)].append(plan)
    return dict(sorted(groups.items()))


async def deliver_provider_signal(
    engine: Engine,
    secrets: Mapping[str, SecretStr],
    delivery_ids: DeliveryIds,
    plans: list[Plan],
    provider: str,
    name: str,
    raw: bytes,
    headers: Mapping[str, str],
) -> SignalAnswer | None:
    """What ``POST /api/v1/providers/{provider}/signals/{name}`` does with a delivery, from
    its bytes and headers (its bearer token, for a signal with no verifier, checked by the
    route before): verified by the signal's verifier (else the typed payload and an optional
    ``Idempotency-Key``), read by each declaring version's ``adapt``, model and key
    function, and delivered to the one live instance holding the key. The route answers
    this; the harness delivers a provider's webhook through it.

    Args:
        engine: the node's engine (its clock judges a signature's age).
        secrets: ``FLOWPARK_SIGNAL_SECRETS``.
        delivery_ids: the first instance each delivery id reached.
        plans: the plans declaring the signal (:func:`provider_signal_groups`).
        provider: the provider's name.
        name: the signal's name.
        raw: the body, as received.
        headers: the headers, names in lower case.

    Returns:
        The delivered signal's answer, or None when the delivery is not this signal or
        names no key (the route's 204; nothing stored).

    Raises:
        SignatureInvalid: 401. CorrelationKeyUnknown: 404. CorrelationKeyAmbiguous,
            InstanceEnded, DeliveryIdReused: 409. InputInvalid, SignalPayloadInvalid,
            IdempotencyKeyReused: 422. IdempotencyKeyInvalid: 400. UnsupportedMediaType:
            415 (see the route's table in docs/correlation.md).
    """
    signal = plans[0].signals[name]
    if signal.verify is not None:
        where = f"provider {provider}"
        delivery = read_webhook(raw, headers, engine.clock.now(), secrets, where, signal)
        reads = _reads(plans, name, delivery, None)
        delivery_id = delivery.delivery_id
    else:
        delivery_id = idempotency_header(headers.get("idempotency-key"), required=False)
        reads = _reads(plans, name, None, json_body(raw, headers.get("content-type")))
    return await _route(engine, delivery_ids, provider, name, reads, delivery_id)


async def _route(
    engine: Engine,
    delivery_ids: DeliveryIds,
    provider: str,
    name: str,
    reads: list[_Read],
    delivery_id: str | None,
) -> SignalAnswer | None:
    """Deliver what ``reads`` name to the one live instance holding the key (None: not
    this signal, or no key named)."""
    if not reads:  # not this signal, or no key named: nothing to store
        return None
    if delivery_id is not None:
        repeat = await _repeat(engine, delivery_ids, name, reads, delivery_id)
        if repeat is not None:
            instance_id, body = repeat
            await _not_reused(engine, provider, name, reads, delivery_id, instance_id)
            return await deliver_payload(engine, instance_id, name, delivery_id, body)
    found = await _holders(engine, provider, reads)
    keys = sorted({shown(read.key) for read in reads})
    if not found:
        raise CorrelationKeyUnknown(
            f"no live instance holds the {provider} correlation key "
            f"{', '.join(map(repr, keys))}; nothing was stored",
            provider=provider,
            signal=name,
            key=keys[0],
        )
    if len(found) > 1:
        raise CorrelationKeyAmbiguous(
            f"live instances of {len(found)} flows hold the {provider} correlation key "
            f"{keys[0]!r}; nothing was stored",
            provider=provider,
            signal=name,
            key=keys[0],
            flows=sorted(flow for flow, _ in found.values()),
        )
    ((instance_id, (flow, body)),) = found.items()
    if delivery_id is not None:
        await claim_delivery_id(delivery_ids, engine, flow, name, delivery_id, instance_id)
    return await deliver_payload(engine, instance_id, name, delivery_id, body)


async def _holders(engine: Engine, provider: str, reads: list[_Read]) -> dict[str, tuple[str, Any]]:
    """The live instances holding the keys ``reads`` name: instance id -> (its flow, the
    payload as its version reads it)."""
    found: dict[str, tuple[str, Any]] = {}
    for read in reads:
        try:
            check_correlation_key(read.key)
        except ValueError:
            continue  # no step records such a key
        holder = await engine.store.correlations.holder(read.plan.name, provider, read.key)
        if holder is None:
            continue
        if holder.instance_id not in found or read.plan.version == holder.flow_version:
            found[holder.instance_id] = (holder.flow_name, read.body)
    return found


async def _not_reused(
    engine: Engine,
    provider: str,
    name: str,
    reads: list[_Read],
    delivery_id: str,
    first: str,
) -> None:
    """A delivery id seen before answers its first signal (a provider's retry) unless the
    key this delivery names is held now by another live instance than ``first``, the one
    the id reached: then the provider reused its id for another event (after a restart),
    which would else go, quietly, nowhere.

    Raises:
        DeliveryIdReused: 409 ``delivery_id_reused`` (logged and counted).
    """
    others = sorted(i for i in await _holders(engine, provider, reads) if i != first)
    if not others:
        return
    engine.observer.delivery_id_reused(provider, name)
    log.warning(
        "provider %s signal %s: delivery id %r reached instance %s first, but this delivery "
        "names a key live instance %s holds: refused as a reused delivery id (409 "
        "delivery_id_reused); the provider must send it with a new id",
        provider,
        name,
        shown(delivery_id),
        first,
        others[0],
    )
    raise DeliveryIdReused(
        f"delivery id {shown(delivery_id)!r} of the {provider} signal {name} was delivered "
        "before, about another instance than the one holding the key this delivery names "
        "now: the provider reuses its delivery ids; send it with a new one (nothing was "
        "stored)",
        provider=provider,
        signal=name,
        delivery_id=shown(delivery_id),
    )


async def _repeat(
    engine: Engine, delivery_ids: DeliveryIds, name: str, reads: list[_Read], delivery_id: str
) -> tuple[str, Any] | None:
    """The instance a delivery id reached already, with the payload to deliver again (its
    repeat answers the first delivery, stores nothing), or None."""
    for flow in sorted({read.plan.name for read in reads}):
        owner = await delivery_ids.owner(flow, name, delivery_id)
        if owner is None:
            continue
        version = (await engine.store.reads.get_instance(owner)).flow_version
        same = [r for r in reads if r.plan.name == flow and r.plan.version == version]
        return owner, (same or [r for r in reads if r.plan.name == flow])[0].body
    return None


def build_provider_signals_router(plans: list[Plan]) -> APIRouter:
    """``POST /api/v1/providers/{provider}/signals/{name}`` for each provider signal the
    ``plans`` declare (newest version first), then the answer to any other name (404
    ``signal_not_declared`` listing the node's provider signals; not in the OpenAPI)."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute)
    groups = provider_signal_groups(plans)
    for (provider, name), declaring in groups.items():
        signal = declaring[0].signals[name]
        if signal.verify is None:
            _add_bearer_route(router, provider, name, declaring)
        else:
            _add_signed_route(router, provider, name, declaring)
    _add_unknown_route(router, sorted(groups))
    return router


def _headers(request: Request) -> dict[str, str]:
    """The request's headers, names in lower case."""
    return {name.lower(): value for name, value in request.headers.items()}


def _path(provider: str, name: str) -> str:
    return f"/providers/{provider}/signals/{name}"


def _flows(plans: list[Plan]) -> str:
    return ", ".join(sorted({f"`{p.name}`" for p in plans}))


def _add_signed_route(router: APIRouter, provider: str, name: str, plans: list[Plan]) -> None:
    """The route of a verified provider signal: the provider's signature, no token."""
    signal = plans[0].signals[name]
    assert signal.verify is not None

    async def deliver_by_correlation(
        engine: EngineDep, settings: SettingsDep, delivery_ids: DeliveryIdsDep, request: Request
    ) -> SignalAnswer | Response:
        answer = await deliver_provider_signal(
            engine,
            settings.signal_secrets,
            delivery_ids,
            plans,
            provider,
            name,
            await request.body(),
            _headers(request),
        )
        return Response(status_code=204) if answer is None else answer

    deliver_by_correlation.__doc__ = (
        f"Deliver the `{name}` signal to the live instance (of {_flows(plans)}) holding the "
        f"`{provider}` correlation key the delivery names - the id a step recorded with "
        f'`ctx.correlate("{provider}", key)`. One URL for the provider\'s webhook, for '
        f"every instance. The delivery is {signal.verify.describe()}, instead of a bearer "
        "token; a missing, stale or wrong signature is 401 `signature_invalid` (nothing "
        "stored). A key no live instance holds is 404 `correlation_key_unknown` (nothing "
        "stored: the provider may retry once the key is recorded). A replay of a delivery "
        "id answers the first signal (`created: false`), unless the key it names is held "
        "now by another live instance than the one the id reached: 409 "
        "`delivery_id_reused` (a provider reusing its ids; nothing stored). A delivery "
        "that is not this "
        "signal, or names no key, is 204; one the flow's `adapt` or key function cannot "
        "read is 422 `signal_payload_invalid`." + _BODY_DOC
    )
    _register(
        router,
        provider,
        name,
        deliver_by_correlation,
        nothing="Not this signal, or no key named: nothing stored",
        problems=problem_responses(*_CODES, ErrorCode.SIGNATURE_INVALID, auth=False),
        extra=signed_route_extra(),
    )


def _add_bearer_route(router: APIRouter, provider: str, name: str, plans: list[Plan]) -> None:
    """The route of a provider signal with no verifier: a bearer token of the ``signal``
    scope, the typed payload, an optional ``Idempotency-Key``."""
    signal = plans[0].signals[name]

    async def deliver_by_correlation(
        token: SignalToken,
        engine: EngineDep,
        delivery_ids: DeliveryIdsDep,
        request: Request,
        idempotency_key: str | None = Header(
            default=None, alias="Idempotency-Key", description=IDEMPOTENCY_KEY_DOC
        ),
    ) -> SignalAnswer | Response:
        idempotency_header(idempotency_key, required=False)  # declared for the OpenAPI
        answer = await deliver_provider_signal(
            engine, {}, delivery_ids, plans, provider, name, await request.body(), _headers(request)
        )
        return Response(status_code=204) if answer is None else answer

    deliver_by_correlation.__doc__ = (
        f"Deliver the `{name}` signal to the live instance (of {_flows(plans)}) holding the "
        f"`{provider}` correlation key the payload names - the id a step recorded with "
        f'`ctx.correlate("{provider}", key)`. A bearer token of the `signal` scope; the '
        "body is the signal's payload. A key no live instance holds is 404 "
        "`correlation_key_unknown` (nothing stored). Idempotent by `Idempotency-Key`: a "
        "repeat answers the first signal (`created: false`); one whose key is held now by "
        "another live instance is 409 `delivery_id_reused`. A payload that names no key "
        "is 204; one the key function cannot read is 422 `signal_payload_invalid`." + _BODY_DOC
    )
    schema, defs = request_schema(signal.model)
    _register(
        router,
        provider,
        name,
        deliver_by_correlation,
        nothing="No key named: nothing stored",
        problems=problem_responses(*_CODES),
        extra={
            "requestBody": {
                "required": bool(schema.get("required")),
                "content": {"application/json": {"schema": schema}},
            },
            DEFS_KEY: defs,
        },
    )


def _register(
    router: APIRouter,
    provider: str,
    name: str,
    endpoint: Any,
    *,
    nothing: str,
    problems: dict[int | str, Any],
    extra: dict[str, Any],
) -> None:
    """Add a correlated signal route: ``POST`` at its path, 202 with the signal, 204 with
    ``nothing`` (what a delivery that stores nothing means), the ``problems`` answers."""
    router.add_api_route(
        _path(provider, name),
        endpoint,
        methods=["POST"],
        tags=["signals"],
        status_code=202,
        name=f"provider signal {provider}/{name}",
        operation_id=f"signal_{operation_slug(provider)}_{operation_slug(name)}_by_correlation",
        response_model=SignalAnswer,
        responses={204: {"description": nothing}, **problems},
        openapi_extra=extra,
    )


def _add_unknown_route(router: APIRouter, declared: list[tuple[str, str]]) -> None:
    """Any other provider signal: 404 ``signal_not_declared`` naming the node's."""
    known = [f"{provider}/{name}" for provider, name in declared]

    async def unknown_provider_signal(
        provider: str = FastApiPath(description="the provider's name"),
        name: str = FastApiPath(description="the signal's name"),
    ) -> Response:
        raise SignalNotDeclared(
            f"no flow on this node declares the provider signal "
            f"{shown(provider)}/{shown(name)} (Signal(correlate=Correlate(provider, ...))); "
            f"its provider signals: {', '.join(known) or 'none'}",
            provider=shown(provider),
            signal=shown(name),
            provider_signals=known,
        )

    router.add_api_route(
        "/providers/{provider}/signals/{name}",
        unknown_provider_signal,
        methods=["POST"],
        include_in_schema=False,
        name="unknown provider signal",
    )
