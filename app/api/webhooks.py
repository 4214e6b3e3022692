"""The route hook of verified signals: a provider's delivery, checked by the signal's
webhook verifier before anything of it is read or stored, then mapped to the signal's
payload by its ``adapt`` function.

Secrets are read from ``FLOWPARK_SIGNAL_SECRETS`` at each delivery and never logged or put
in an answer: a refusal says which header failed, never what was expected.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from pydantic import BaseModel

from app.api.inputs import _json_body
from app.errors import InputInvalid, SignatureInvalid
from app.flows.capability import Signal
from app.flows.webhooks import WebhookDelivery

__all__ = ["VerifiedDelivery", "verified_delivery"]

log = logging.getLogger("flowpark.api")


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


async def verified_delivery(request: Request, flow: str, signal: Signal) -> VerifiedDelivery:
    """Verify the request as a delivery of ``signal``, then read and map its body.

    Args:
        request: the signal route's request.
        flow: the flow's name (for the log line of a missing secret).
        signal: the declared signal; its ``verify`` is not None.

    Returns:
        The delivery's idempotency key and the payload to deliver.

    Raises:
        SignatureInvalid: 401 ``signature_invalid``: the node holds no such secret, or the
            verifier refused the delivery.
        InputInvalid: 422 ``input_invalid``: the body is not JSON a store can keep, or
            ``adapt`` refused it.
        UnsupportedMediaType: 415 ``unsupported_media_type``: the body is not JSON.
    """
    verifier = signal.verify
    assert verifier is not None
    secret = request.app.state.settings.signal_secrets.get(verifier.secret)
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
    raw = await request.body()
    headers = {name.lower(): value for name, value in request.headers.items()}
    now = request.app.state.engine.clock.now()
    try:
        verifier.verify(raw, headers, secret.get_secret_value(), now)
    except SignatureInvalid as exc:
        raise SignatureInvalid(f"signal {signal.name}: {exc.message}", signal=signal.name) from None
    delivery = verifier.delivery(await _json_body(request), headers)
    body = delivery.payload if signal.adapt is None else _adapted(signal, delivery)
    return VerifiedDelivery(delivery.delivery_id, body)


def _adapted(signal: Signal, delivery: WebhookDelivery) -> Any:
    """The signal's payload that ``adapt`` makes of ``delivery`` (as JSON), or None."""
    assert signal.adapt is not None
    try:
        value = signal.adapt(delivery)
    except (ValueError, TypeError, KeyError, LookupError) as exc:
        # a pydantic ValidationError is a ValueError
        raise InputInvalid(
            f"the delivery is not a {signal.name} signal: {type(exc).__name__}: {exc}",
            signal=signal.name,
        ) from None
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return value
