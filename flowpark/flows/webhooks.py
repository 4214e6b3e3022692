"""Webhook verifiers: how a provider's deliveries of a signal are authenticated instead of
by a bearer token.

A :class:`~flowpark.flows.capability.Signal` declared with ``verify=`` one of these takes its
deliveries on its flow route with no bearer token: the route verifies the raw body and the
headers with the secret named in ``FLOWPARK_SIGNAL_SECRETS`` before anything is read or
stored, refuses a bad or stale delivery with 401 ``signature_invalid``, and keys the
delivery's idempotency by the provider's delivery id, so a provider's retry stores nothing
new.

==================  ===========================================  ===========================
verifier            signature                                    idempotency key
==================  ===========================================  ===========================
``SignedWebhook``   Standard Webhooks (``webhook-signature``)    ``webhook-id``
``GitHubWebhook``   ``X-Hub-Signature-256: sha256=<hex>``        ``X-GitHub-Delivery``
``StripeWebhook``   ``Stripe-Signature: t=<unix>,v1=<hex>``      the event's ``id``
``HmacWebhook``     any header: HMAC of the body, hex or base64  ``id_header``, if named
==================  ===========================================  ===========================

Every comparison of signatures is constant-time (:func:`hmac.compare_digest`); no message
of a refusal holds the secret or the expected signature. A verifier is a frozen value with
the :class:`WebhookVerifier` shape, so a flow may declare its own for another format.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from standardwebhooks.webhooks import EmptyWebhookSecretError, Webhook

from flowpark.errors import SignatureInvalid

__all__ = [
    "GitHubWebhook",
    "HmacWebhook",
    "SignedWebhook",
    "StripeWebhook",
    "WebhookDelivery",
    "WebhookVerifier",
]


@dataclass(frozen=True)
class WebhookDelivery:
    """One verified delivery, as a signal's ``adapt`` function sees it.

    Attributes:
        payload: the body, parsed JSON (the provider's own shape).
        event: the provider's event type when it names one (GitHub's ``X-GitHub-Event``,
            e.g. ``workflow_run``; Stripe's ``type``, e.g. ``payment_intent.succeeded``),
            else None.
        delivery_id: the delivery's idempotency key (see each verifier), or None.
        headers: the request's headers, names in lower case.
    """

    payload: Any
    event: str | None = None
    delivery_id: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


class WebhookVerifier(Protocol):
    """What a signal's ``verify=`` value provides (every verifier of this module)."""

    @property
    def secret(self) -> str:
        """The name of the secret in ``FLOWPARK_SIGNAL_SECRETS``."""

    def verify(self, body: bytes, headers: Mapping[str, str], key: str, now: datetime) -> None:
        """Check one delivery before anything of it is read.

        Args:
            body: the raw request body, as received.
            headers: the request's headers, names in lower case.
            key: the secret's value.
            now: the node's clock (timezone-aware UTC), for timestamp tolerances.

        Raises:
            SignatureInvalid: ``signature_invalid``: a header is missing, stale or does
                not verify with ``key``.
        """
        ...

    def delivery(self, payload: Any, headers: Mapping[str, str]) -> WebhookDelivery:
        """The verified delivery: its parsed ``payload``, event type and delivery id."""
        ...

    def describe(self) -> str:
        """One sentence for the route's documentation (the headers it reads)."""
        ...


#: How far a Standard Webhooks ``webhook-timestamp`` may be from the node's clock.
STANDARD_WEBHOOKS_TOLERANCE = timedelta(minutes=5)


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name.lower())
    if not value:
        raise SignatureInvalid(f"the {name} header is missing")
    return value


@dataclass(frozen=True)
class SignedWebhook:
    """Standard Webhooks: headers ``webhook-id``, ``webhook-timestamp`` (at most 5 minutes
    off) and ``webhook-signature`` (``v1,<base64 HMAC-SHA256>``), verified with the
    ``standardwebhooks`` library.

    Attributes:
        secret: the name of the secret in ``FLOWPARK_SIGNAL_SECRETS`` (its value is
            ``whsec_<base64>``; the secret itself never appears in a flow definition).
    """

    secret: str

    def verify(self, body: bytes, headers: Mapping[str, str], key: str, now: datetime) -> None:
        """Verify ``webhook-signature`` (any of its ``v1,`` signatures, made by
        ``standardwebhooks``' signer) and ``webhook-timestamp``: at most 5 minutes off
        ``now``, the node's clock (the engine's, as every verifier's; the library's own
        check would read the machine's wall clock).

        Raises:
            SignatureInvalid: ``signature_invalid``: missing, stale or wrong.
        """
        msg_id = _header(headers, "webhook-id")
        stamp = _header(headers, "webhook-timestamp").strip()
        signatures = _header(headers, "webhook-signature").split(" ")
        if not stamp.isdigit():
            raise SignatureInvalid("the webhook-timestamp header is not a Unix time")
        sent_at = datetime.fromtimestamp(int(stamp), UTC)
        if abs(now - sent_at) > STANDARD_WEBHOOKS_TOLERANCE:
            raise SignatureInvalid("the webhook-timestamp is more than 300 s off")
        try:
            expected = Webhook(key).sign(msg_id, sent_at, body).encode()
        except (ValueError, binascii.Error, EmptyWebhookSecretError, RuntimeError):
            # a secret that is not whsec_<base64>, or an empty one
            raise SignatureInvalid("the Standard Webhooks secret is not usable") from None
        if not any(hmac.compare_digest(expected, sig.encode()) for sig in signatures):
            raise SignatureInvalid("the Standard Webhooks signature does not verify")

    def delivery(self, payload: Any, headers: Mapping[str, str]) -> WebhookDelivery:
        """The ``webhook-id`` is the delivery id; no event type."""
        return WebhookDelivery(payload, None, headers.get("webhook-id"), headers)

    def describe(self) -> str:
        """The route's sentence."""
        return (
            "signed per Standard Webhooks: headers `webhook-id` (the idempotency key), "
            "`webhook-timestamp` (at most 5 minutes off) and `webhook-signature`, made with "
            f"the secret `{self.secret}` of `FLOWPARK_SIGNAL_SECRETS`"
        )


_ALGORITHMS = ("sha1", "sha256", "sha384", "sha512")


def _digest(key: str, message: bytes, algorithm: str) -> bytes:
    return hmac.new(key.encode("utf-8"), message, algorithm).digest()


@dataclass(frozen=True)
class HmacWebhook:
    """A signature header holding an HMAC of the raw body: the form most providers use
    when they follow no standard.

    Attributes:
        secret: the name of the secret in ``FLOWPARK_SIGNAL_SECRETS`` (its UTF-8 bytes
            are the HMAC key).
        header: the header carrying the signature, e.g. ``X-Signature``.
        algorithm: ``sha256`` (default), ``sha1``, ``sha384`` or ``sha512``.
        encoding: ``hex`` (default; either case) or ``base64`` (standard alphabet).
        prefix: text before the signature in the header, e.g. ``sha256=``; default none.
        id_header: the header carrying the delivery's id, used as its idempotency key
            (a delivery without it is refused); None (default): no idempotency key.
    """

    secret: str
    header: str
    algorithm: str = "sha256"
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = ""
    id_header: str | None = None

    def __post_init__(self) -> None:
        if self.algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(_ALGORITHMS)}")
        if self.encoding not in ("hex", "base64"):
            raise ValueError("encoding must be 'hex' or 'base64'")
        if not self.header:
            raise ValueError("header must name the signature header")

    def verify(self, body: bytes, headers: Mapping[str, str], key: str, now: datetime) -> None:
        """Compare the header's signature with the HMAC of ``body`` (constant time).

        Raises:
            SignatureInvalid: ``signature_invalid``: the header (or ``id_header``) is
                missing, lacks the prefix, is not of the encoding, or does not match.
        """
        value = _header(headers, self.header).strip()
        if self.id_header is not None:
            _header(headers, self.id_header)
        if not value.startswith(self.prefix):
            raise SignatureInvalid(f"the {self.header} header does not start with {self.prefix}")
        given = value[len(self.prefix) :]
        try:
            sent = bytes.fromhex(given) if self.encoding == "hex" else _b64(given)
        except ValueError:
            raise SignatureInvalid(f"the {self.header} header is not {self.encoding}") from None
        if not hmac.compare_digest(sent, _digest(key, body, self.algorithm)):
            raise SignatureInvalid(f"the {self.header} signature does not verify")

    def delivery(self, payload: Any, headers: Mapping[str, str]) -> WebhookDelivery:
        """The ``id_header``'s value is the delivery id; no event type."""
        delivery_id = headers.get(self.id_header.lower()) if self.id_header else None
        return WebhookDelivery(payload, None, delivery_id, headers)

    def describe(self) -> str:
        """The route's sentence."""
        key = f"; `{self.id_header}` is the idempotency key" if self.id_header else ""
        return (
            f"signed by an HMAC-{self.algorithm.upper()} of the raw body in the "
            f"`{self.header}` header ({self.encoding}"
            + (f", after `{self.prefix}`" if self.prefix else "")
            + f"), made with the secret `{self.secret}` of `FLOWPARK_SIGNAL_SECRETS`{key}"
        )


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise ValueError(str(exc)) from None


@dataclass(frozen=True)
class GitHubWebhook:
    """GitHub's webhooks: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``.

    Configure the GitHub webhook with content type ``application/json`` and the secret
    that ``FLOWPARK_SIGNAL_SECRETS`` holds under :attr:`secret`. GitHub's deliveries carry
    no timestamp: a replay is answered by the delivery id, ``X-GitHub-Delivery``, which is
    the idempotency key (a repeat stores nothing new).

    Attributes:
        secret: the name of the secret in ``FLOWPARK_SIGNAL_SECRETS``.
    """

    secret: str

    def verify(self, body: bytes, headers: Mapping[str, str], key: str, now: datetime) -> None:
        """Verify ``X-Hub-Signature-256`` (and require ``X-GitHub-Delivery``).

        Raises:
            SignatureInvalid: ``signature_invalid``: a header is missing or the signature
                does not verify.
        """
        _GITHUB.verify(body, headers, key, now)

    def delivery(self, payload: Any, headers: Mapping[str, str]) -> WebhookDelivery:
        """``X-GitHub-Delivery`` is the delivery id, ``X-GitHub-Event`` the event type."""
        return WebhookDelivery(
            payload, headers.get("x-github-event"), headers.get("x-github-delivery"), headers
        )

    def describe(self) -> str:
        """The route's sentence."""
        return (
            "signed by GitHub: `X-Hub-Signature-256` (`sha256=` and the hex HMAC-SHA256 of "
            f"the body) made with the secret `{self.secret}` of `FLOWPARK_SIGNAL_SECRETS`; "
            "`X-GitHub-Delivery` is the idempotency key"
        )


_GITHUB = HmacWebhook("", "X-Hub-Signature-256", prefix="sha256=", id_header="X-GitHub-Delivery")


@dataclass(frozen=True)
class StripeWebhook:
    """Stripe's webhooks: ``Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=...]``, each
    ``v1`` an HMAC-SHA256 of ``"<t>.<body>"`` with the endpoint's signing secret
    (``whsec_...``, used as it is).

    Attributes:
        secret: the name of the secret in ``FLOWPARK_SIGNAL_SECRETS``.
        tolerance: how far ``t`` may be from the node's clock, either way; default 5
            minutes (Stripe's own default). A delivery outside it is refused as stale.
    """

    secret: str
    tolerance: timedelta = timedelta(minutes=5)

    def __post_init__(self) -> None:
        if self.tolerance <= timedelta(0):
            raise ValueError("tolerance must be positive")

    def verify(self, body: bytes, headers: Mapping[str, str], key: str, now: datetime) -> None:
        """Verify ``Stripe-Signature``: any of its ``v1`` signatures (several while a
        secret is rolled), and its ``t`` within :attr:`tolerance` of ``now``.

        Raises:
            SignatureInvalid: ``signature_invalid``: the header is missing or malformed,
                ``t`` is stale, or no ``v1`` verifies.
        """
        pairs = [part.partition("=") for part in _header(headers, "Stripe-Signature").split(",")]
        stamps = [v.strip() for k, _, v in pairs if k.strip() == "t"]
        signatures = [v.strip() for k, _, v in pairs if k.strip() == "v1"]
        if len(stamps) != 1 or not stamps[0].isdigit() or not signatures:
            raise SignatureInvalid("the Stripe-Signature header has no t= and v1= values")
        sent_at = datetime.fromtimestamp(int(stamps[0]), UTC)
        if abs(now - sent_at) > self.tolerance:
            raise SignatureInvalid(
                f"the Stripe-Signature timestamp is more than "
                f"{self.tolerance.total_seconds():g} s off"
            )
        expected = _digest(key, stamps[0].encode("ascii") + b"." + body, "sha256")
        if not any(_same_hex(sig, expected) for sig in signatures):
            raise SignatureInvalid("no v1 signature of Stripe-Signature verifies")

    def delivery(self, payload: Any, headers: Mapping[str, str]) -> WebhookDelivery:
        """The event's ``id`` (``evt_...``) is the delivery id, its ``type`` the event."""
        event = payload if isinstance(payload, dict) else {}
        delivery_id = event.get("id") if isinstance(event.get("id"), str) else None
        kind = event.get("type") if isinstance(event.get("type"), str) else None
        return WebhookDelivery(payload, kind, delivery_id, headers)

    def describe(self) -> str:
        """The route's sentence."""
        return (
            "signed by Stripe: `Stripe-Signature` (`t=` and `v1=`, the hex HMAC-SHA256 of "
            f"`t.body`) made with the secret `{self.secret}` of `FLOWPARK_SIGNAL_SECRETS`, "
            f"`t` at most {self.tolerance.total_seconds():g} s off; the event's `id` is the "
            "idempotency key"
        )


def _same_hex(text: str, expected: bytes) -> bool:
    try:
        sent = bytes.fromhex(text)
    except ValueError:
        return False
    return hmac.compare_digest(sent, expected)
