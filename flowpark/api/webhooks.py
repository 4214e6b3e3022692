"""The route hook of verified signals: a provider's delivery, checked by the signal's
webhook verifier before anything of it is read or stored, then mapped to the signal's
payload by its ``adapt`` function; and the instance a keyed delivery names by instance key
(the keyed routes are :mod:`flowpark.api.keyed`'s).

Secrets are read from ``FLOWPARK_SIGNAL_SECRETS`` at each delivery and never logged or put
in an answer: a refusal says which header failed, never what was expected.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from fastapi import Request
from pydantic import BaseModel, SecretStr, ValidationError

from flowpark.api.deps import DeliveryIds
from flowpark.api.inputs import (
    MAX_KEY,
    idempotency_header,
    json_body,
)
from flowpark.api.models import SignalAnswer
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.operator import InstanceFilter, OperatorReads
from flowpark.engine.records import InstanceState
from flowpark.errors import (
    IdempotencyKeyInvalid,
    InstanceNotFound,
    SignalDeliveryReplayed,
    SignalPayloadInvalid,
    SignatureInvalid,
)
from flowpark.flows.capability import Signal
from flowpark.flows.hints import invalid_signal_payload
from flowpark.flows.plan import Plan
from flowpark.flows.webhooks import WebhookDelivery
from flowpark.redaction import redact
from flowpark.settings import Settings

__all__ = [
    "Deliver",
    "VerifiedDelivery",
    "adapted",
    "claim_delivery_id",
    "keyed_instance",
    "keyed_target",
    "read_webhook",
    "signed_route_extra",
    "typed_payload",
    "unreadable",
    "verified_delivery",
    "verified_webhook",
]

log = logging.getLogger("flowpark.api")


def signed_route_extra() -> dict[str, Any]:
    """The OpenAPI additions of a route a provider calls with a signed delivery: no bearer
    token (``security: []``) and a JSON object body, the provider's own payload."""
    return {
        "security": [],
        "requestBody": {
            "content": {
                "application/json": {
                    "schema": {"type": "object", "description": "the provider's payload"}
                }
            }
        },
    }


@dataclass(frozen=True)
class VerifiedDelivery:
    """A delivery that verified.

    Attributes:
        idempotency_key: the provider's delivery id (None when its format has none).
        body: the signal's payload as JSON, or None when ``adapt`` said the delivery is
            not this signal (nothing is to be stored).
    """

    idempotency_key: str | None
    body: Any


async def verified_delivery(
    request: Request, engine: Engine, settings: Settings, flow: str, signal: Signal
) -> VerifiedDelivery:
    """Verify the request as a delivery of ``signal``, then read and map its body.

    Args:
        request: the signal route's request.
        engine: the node's engine (its clock judges a signature's age).
        settings: the node's settings (``signal_secrets``).
        flow: the flow's name (for the log line of a missing secret).
        signal: the declared signal; its ``verify`` is not None.

    Returns:
        The delivery's idempotency key and the payload to deliver.

    Raises:
        SignatureInvalid, InputInvalid, UnsupportedMediaType, IdempotencyKeyInvalid: as
            :func:`verified_webhook`.
        SignalPayloadInvalid: 422 ``signal_payload_invalid``: ``adapt`` raised on it (what
            it raised is logged, not answered).
    """
    delivery = await verified_webhook(request, engine, settings, flow, signal)
    body = delivery.payload if signal.adapt is None else adapted(signal, delivery, flow)
    return VerifiedDelivery(delivery.delivery_id, body)


async def verified_webhook(
    request: Request, engine: Engine, settings: Settings, flow: str, signal: Signal
) -> WebhookDelivery:
    """Verify the request as a delivery of ``signal`` and read it (not yet mapped by
    ``adapt``).

    Args:
        request: the signal route's request.
        engine: the node's engine (its clock judges a signature's age).
        settings: the node's settings (``signal_secrets``).
        flow: the flow's name, or what the log line of a missing secret names.
        signal: the declared signal; its ``verify`` is not None.

    Returns:
        The verified delivery: the provider's JSON, its event type, its delivery id (checked
        as an ``Idempotency-Key`` is) and its headers.

    Raises:
        SignatureInvalid: 401 ``signature_invalid``: the node holds no such secret, or the
            verifier refused the delivery.
        InputInvalid: 422 ``input_invalid``: the body is not JSON a store can keep.
        UnsupportedMediaType: 415 ``unsupported_media_type``: the body is not JSON.
        IdempotencyKeyInvalid: 400 ``idempotency_key_invalid``: the delivery's id (e.g.
            ``X-GitHub-Delivery``) is over 200 characters or not visible ASCII.
    """
    headers = {name.lower(): value for name, value in request.headers.items()}
    raw = await request.body()
    return read_webhook(raw, headers, engine.clock.now(), settings.signal_secrets, flow, signal)


def read_webhook(
    raw: bytes,
    headers: Mapping[str, str],
    now: datetime,
    secrets: Mapping[str, SecretStr],
    flow: str,
    signal: Signal,
) -> WebhookDelivery:
    """Verify a delivery of ``signal`` from its bytes and headers, then read it (not yet
    mapped by ``adapt``): :func:`verified_webhook` without the request, for a caller that
    holds them (the harness delivers a provider's webhook through it).

    Args:
        raw: the body, as received.
        headers: the headers, names in lower case.
        now: the engine clock's now (a signature's age is judged by it).
        secrets: ``FLOWPARK_SIGNAL_SECRETS`` (a secret's name -> its value).
        flow: the flow's name, or what the log line of a missing secret names.
        signal: the declared signal; its ``verify`` is not None.

    Returns:
        The verified delivery, as :func:`verified_webhook`.

    Raises:
        SignatureInvalid, InputInvalid, UnsupportedMediaType, IdempotencyKeyInvalid: as
            :func:`verified_webhook`.
    """
    verifier = signal.verify
    assert verifier is not None
    secret = secrets.get(verifier.secret)
    if secret is None:
        log.error(
            "signal %s of %s is signed with the secret %r, which FLOWPARK_SIGNAL_SECRETS "
            "does not hold: every delivery is refused",
            signal.name,
            flow,
            verifier.secret,
        )
        raise SignatureInvalid(
            f"signal {signal.name} cannot be verified on this node", signal=signal.name
        )
    try:
        verifier.verify(raw, headers, secret.get_secret_value(), now)
    except SignatureInvalid as exc:
        raise SignatureInvalid(f"signal {signal.name}: {exc.message}", signal=signal.name) from None
    delivery = verifier.delivery(json_body(raw, headers.get("content-type")), headers)
    key = delivery.delivery_id
    if key is not None:  # it keys the delivery as an Idempotency-Key would, by its rules
        try:
            key = idempotency_header(key, required=False)
        except IdempotencyKeyInvalid as exc:
            why = exc.message.removeprefix("Idempotency-Key ")
            raise IdempotencyKeyInvalid(
                f"signal {signal.name}: the delivery's id {why}", signal=signal.name
            ) from None
    return replace(delivery, delivery_id=key)


def adapted(signal: Signal, delivery: WebhookDelivery, flow: str) -> Any:
    """The signal's payload that ``adapt`` makes of ``delivery`` (as JSON), or None.

    Raises:
        SignalPayloadInvalid: 422 ``signal_payload_invalid``: ``adapt`` raised; what it
            raised is logged (secrets masked), never answered.
    """
    assert signal.adapt is not None
    try:
        value = signal.adapt(delivery)
    except Exception as exc:  # noqa: BLE001 - the flow's code on a provider's JSON
        raise unreadable(signal, flow, "adapt", exc) from None
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value


#: How much of what a flow's function raised the log line keeps (characters).
_LOGGED = 500


def unreadable(signal: Signal, flow: str, function: str, exc: Exception) -> SignalPayloadInvalid:
    """Log what the flow's ``function`` (``adapt``, ``instance_key``) raised on a delivery
    of ``signal`` (one line, secrets masked) and return the generic problem to raise."""
    log.warning(
        "signal %s of %s: its %s raised on a delivery: %s",
        signal.name,
        flow,
        function,
        redact(" ".join(f"{type(exc).__name__}: {exc}".split()))[:_LOGGED],
    )
    return SignalPayloadInvalid(
        f"the delivery cannot be read as a {signal.name} signal of {flow} (the node's log "
        "says why); nothing was stored",
        signal=signal.name,
    )


#: ``deliver`` of the signal routes: (engine, request, instance id, name, key, body) -> answer
Deliver = Callable[[Engine, Request, str, str, str | None, Any], Awaitable[SignalAnswer]]


async def keyed_instance(engine: Engine, plan: Plan, key: str) -> str:
    """The id of the flow's running (or suspended) instance holding instance key ``key``,
    else of the newest instance of the flow that held it.

    Raises:
        InstanceNotFound: 404 ``instance_not_found``: no instance of the flow ever held it.
    """
    if len(key) > MAX_KEY:  # no start takes such a key; the answer does not echo it whole
        raise InstanceNotFound(
            f"no instance of {plan.name} holds the instance key the payload names: it is "
            f"longer than {MAX_KEY} characters, which no instance key is",
            flow=plan.name,
        )
    reads: OperatorReads = engine.store.operator
    for states in ((InstanceState.RUNNING, InstanceState.SUSPENDED), ()):
        where = InstanceFilter(flow=plan.name, states=states, instance_key=key)
        page = await reads.list_instances(where, limit=1, after=None)
        if page.rows:
            return page.rows[0].id
    raise InstanceNotFound(
        f"no instance of {plan.name} holds the instance key {key!r}",
        flow=plan.name,
        instance_key=key,
    )


async def keyed_target(engine: Engine, plan: Plan, signal: Signal, body: Any) -> str | None:
    """The instance a keyed delivery of ``signal`` with payload ``body`` (JSON) is for:
    the payload validated by the signal's model, its ``instance_key`` asked; None when
    that names no instance (nothing is to be stored).

    Raises:
        InputInvalid: 422 ``input_invalid``: the payload does not validate.
        SignalPayloadInvalid: 422 ``signal_payload_invalid``: ``instance_key`` raised, or
            named no string (logged).
        InstanceNotFound: 404 ``instance_not_found``: no instance of the flow holds the key.
    """
    key_of = signal.instance_key
    assert key_of is not None
    payload = typed_payload(signal, body)
    try:
        key = key_of(payload)
        if key is not None and not isinstance(key, str):
            raise TypeError(f"instance_key returned a {type(key).__name__}, not a str")
    except Exception as exc:  # noqa: BLE001 - the flow's code on a delivery's payload
        raise unreadable(signal, plan.name, "instance_key", exc) from None
    if key is None:
        return None
    return await keyed_instance(engine, plan, key)


def typed_payload(signal: Signal, body: Any) -> Any:
    """``body`` (JSON) validated by ``signal``'s model, as the engine validates it.

    Raises:
        InputInvalid: 422 ``input_invalid``: the payload does not validate.
    """
    try:
        return signal.model.model_validate_json(json.dumps(body), by_alias=True, by_name=False)
    except ValidationError as exc:
        raise invalid_signal_payload(signal.model, signal.name, body, exc) from None


async def claim_delivery_id(
    delivery_ids: DeliveryIds,
    engine: Engine,
    flow: str,
    signal: str,
    delivery_id: str,
    instance_id: str,
) -> None:
    """Record the instance a signed delivery id reaches first (a flow's signal's
    delivery ids are unique across instances).

    Args:
        delivery_ids: the store of the ids' first instances.
        engine: the node's engine (its clock stamps the claim).
        flow: the flow's name.
        signal: the signal's name.
        delivery_id: the verified delivery's id.
        instance_id: the instance the route names (a well-formed id).

    Raises:
        SignalDeliveryReplayed: 409 ``signal_delivery_replayed``: it reached another first.
    """
    owner = await delivery_ids.claim(flow, signal, delivery_id, instance_id, engine.clock.now())
    if owner is not None and owner != instance_id:
        raise SignalDeliveryReplayed(
            f"delivery {delivery_id!r} of signal {signal} was delivered to another instance",
            signal=signal,
            instance_id=instance_id,
        )
