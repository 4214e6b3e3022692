"""Signing a provider's webhook in a test, as the provider would: the headers each built-in
verifier of :mod:`flowpark.flows.webhooks` checks, made from a body, a secret and an instant.

:meth:`flowpark.testing.FlowHarness.provider_signal` signs with these when it is given no
headers; a test that wants a delivery to be refused (another secret, a stale instant, a
changed byte) makes its own with :func:`webhook_headers` and passes them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import datetime
from typing import Any

from standardwebhooks.webhooks import Webhook

from flowpark.flows.webhooks import GitHubWebhook, HmacWebhook, SignedWebhook, StripeWebhook

__all__ = ["webhook_body", "webhook_headers"]


def webhook_body(payload: Any) -> bytes:
    """``payload`` as a provider sends it: JSON, UTF-8."""
    return json.dumps(payload).encode("utf-8")


def webhook_headers(
    verifier: object,
    secret: str,
    body: bytes,
    *,
    at: datetime,
    delivery_id: str | None = None,
    event: str | None = None,
) -> dict[str, str]:
    """The headers a provider sends with ``body``, signed for ``verifier`` with ``secret``.

    Args:
        verifier: the signal's ``verify=`` value (:class:`SignedWebhook`,
            :class:`GitHubWebhook`, :class:`StripeWebhook` or :class:`HmacWebhook`).
        secret: the secret's value (what ``FLOWPARK_SIGNAL_SECRETS`` holds for it).
        body: the raw body (:func:`webhook_body` of a payload).
        at: when it is sent (the signature's timestamp, where the format has one): the
            harness's clock.
        delivery_id: the delivery's id (``webhook-id``, ``X-GitHub-Delivery``, an
            ``HmacWebhook``'s ``id_header``; a Stripe event's id is in its body); None for
            none.
        event: GitHub's ``X-GitHub-Event`` (e.g. ``workflow_run``); ignored by the others.

    Returns:
        The headers, ``Content-Type: application/json`` among them.

    Raises:
        TypeError: a verifier of another kind (a flow's own): sign its deliveries yourself.
    """
    headers = {"content-type": "application/json"}
    stamp = str(int(at.timestamp()))
    if isinstance(verifier, SignedWebhook):
        msg_id = delivery_id or "msg_unnamed"
        return headers | {
            "webhook-id": msg_id,
            "webhook-timestamp": stamp,
            "webhook-signature": Webhook(secret).sign(msg_id, at, body),
        }
    if isinstance(verifier, GitHubWebhook):
        digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
        headers["x-hub-signature-256"] = f"sha256={digest}"
        if delivery_id is not None:
            headers["x-github-delivery"] = delivery_id
        if event is not None:
            headers["x-github-event"] = event
        return headers
    if isinstance(verifier, StripeWebhook):
        mac = hmac.new(secret.encode("utf-8"), f"{stamp}.".encode() + body, "sha256")
        return headers | {"stripe-signature": f"t={stamp},v1={mac.hexdigest()}"}
    if isinstance(verifier, HmacWebhook):
        raw = hmac.new(secret.encode("utf-8"), body, verifier.algorithm).digest()
        text = raw.hex() if verifier.encoding == "hex" else base64.b64encode(raw).decode()
        headers[verifier.header.lower()] = verifier.prefix + text
        if verifier.id_header is not None and delivery_id is not None:
            headers[verifier.id_header.lower()] = delivery_id
        return headers
    raise TypeError(
        f"cannot sign for a {type(verifier).__name__}: pass the delivery's headers yourself"
    )
