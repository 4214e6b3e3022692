"""The webhook verifiers on their own: each provider's format, verified from known values
and refused when a byte, the secret or the time is off; no refusal holds the secret."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from flowpark import GitHubWebhook, HmacWebhook, StripeWebhook
from flowpark.errors import SignatureInvalid

NOW = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)

# GitHub's documented example ("Validating webhook deliveries")
GITHUB_SECRET = "It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def github(signature: str = GITHUB_SIGNATURE, delivery: str | None = "d-1") -> dict[str, str]:
    headers = {"x-hub-signature-256": signature, "x-github-event": "push"}
    return headers | ({"x-github-delivery": delivery} if delivery else {})


def test_github_verifies_its_documented_example_and_names_the_delivery() -> None:
    verifier = GitHubWebhook("gh")
    verifier.verify(GITHUB_BODY, github(), GITHUB_SECRET, NOW)
    verifier.verify(
        GITHUB_BODY,
        github(GITHUB_SIGNATURE.upper().replace("SHA256", "sha256")),
        GITHUB_SECRET,
        NOW,
    )
    delivery = verifier.delivery({"a": 1}, github())
    assert (delivery.event, delivery.delivery_id, delivery.payload) == ("push", "d-1", {"a": 1})


@pytest.mark.parametrize(
    ("body", "headers", "secret", "says"),
    [
        (b"Hello, World?", github(), GITHUB_SECRET, "does not verify"),
        (GITHUB_BODY, github(), "another secret", "does not verify"),
        (GITHUB_BODY, github(GITHUB_SIGNATURE[7:]), GITHUB_SECRET, "does not start with"),
        (GITHUB_BODY, github("sha256=zz"), GITHUB_SECRET, "is not hex"),
        (GITHUB_BODY, {"x-github-delivery": "d"}, GITHUB_SECRET, "X-Hub-Signature-256 header"),
        (GITHUB_BODY, github(delivery=None), GITHUB_SECRET, "X-GitHub-Delivery header"),
    ],
)
def test_github_refuses_a_changed_body_secret_or_header(
    body: bytes, headers: dict[str, str], secret: str, says: str
) -> None:
    with pytest.raises(SignatureInvalid, match=says) as caught:
        GitHubWebhook("gh").verify(body, headers, secret, NOW)
    assert secret not in caught.value.message
    assert GITHUB_SIGNATURE[7:] not in caught.value.message or "start with" in says


def stripe_header(body: bytes, secret: str, at: datetime, *extra: str) -> dict[str, str]:
    stamp = str(int(at.timestamp()))
    digest = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return {"stripe-signature": ",".join([f"t={stamp}", *extra, f"v1={digest}"])}


def test_stripe_verifies_any_v1_within_the_tolerance_either_way() -> None:
    verifier, body, secret = StripeWebhook("s"), b'{"id": "evt_1"}', "whsec_abc"
    verifier.verify(body, stripe_header(body, secret, NOW, "v1=" + "0" * 64), secret, NOW)
    verifier.verify(body, stripe_header(body, secret, NOW - timedelta(seconds=299)), secret, NOW)
    verifier.verify(body, stripe_header(body, secret, NOW + timedelta(seconds=299)), secret, NOW)
    delivery = verifier.delivery({"id": "evt_1", "type": "charge.succeeded"}, {})
    assert (delivery.delivery_id, delivery.event) == ("evt_1", "charge.succeeded")
    assert verifier.delivery([1], {}).delivery_id is None


@pytest.mark.parametrize(
    ("at", "secret", "says"),
    [
        (NOW - timedelta(seconds=301), "whsec_abc", "more than 300 s off"),
        (NOW + timedelta(minutes=10), "whsec_abc", "more than 300 s off"),
        (NOW, "whsec_other", "no v1 signature"),
    ],
)
def test_stripe_refuses_a_stale_timestamp_or_another_secret(
    at: datetime, secret: str, says: str
) -> None:
    body = b'{"id": "evt_1"}'
    headers = stripe_header(body, secret, at)
    with pytest.raises(SignatureInvalid, match=says):
        StripeWebhook("s").verify(body, headers, "whsec_abc", NOW)


@pytest.mark.parametrize("header", ["", "t=1,t=2,v1=aa", "t=abc,v1=aa", "v1=aa", "t=1"])
def test_stripe_refuses_a_malformed_header(header: str) -> None:
    with pytest.raises(SignatureInvalid):
        StripeWebhook("s", tolerance=timedelta(days=100_000)).verify(
            b"{}", {"stripe-signature": header} if header else {}, "whsec_abc", NOW
        )


def test_a_generic_hmac_header_in_base64_with_a_prefix_and_an_id() -> None:
    verifier = HmacWebhook(
        "p", "X-Sig", algorithm="sha1", encoding="base64", prefix="v1=", id_header="X-Id"
    )
    digest = base64.b64encode(hmac.new(b"k", b"body", hashlib.sha1).digest()).decode()
    verifier.verify(b"body", {"x-sig": f"v1={digest}", "x-id": "7"}, "k", NOW)
    assert verifier.delivery({}, {"x-id": "7"}).delivery_id == "7"
    for headers in ({"x-sig": f"v1={digest}"}, {"x-sig": "v1=!!", "x-id": "7"}):
        with pytest.raises(SignatureInvalid):
            verifier.verify(b"body", headers, "k", NOW)


@pytest.mark.parametrize("kwargs", [{"algorithm": "md5"}, {"encoding": "base32"}, {"header": ""}])
def test_a_generic_hmac_verifier_refuses_an_unknown_algorithm_or_encoding(
    kwargs: dict[str, str],
) -> None:
    with pytest.raises(ValueError):
        HmacWebhook(**{"secret": "p", "header": "X-Sig", **kwargs})  # type: ignore[arg-type]


def test_a_stripe_tolerance_must_be_positive() -> None:
    with pytest.raises(ValueError):
        StripeWebhook("s", tolerance=timedelta(0))


def test_an_instance_key_function_takes_a_verifier_or_a_bearer_token() -> None:
    from pydantic import BaseModel

    from flowpark import Signal

    class Done(BaseModel):
        run: str

    bearer = Signal("ci.done", Done, instance_key=lambda p: p.run)  # its keyed route: a token
    assert bearer.verify is None and bearer.instance_key is not None
    assert bearer.instance_key(Done(run="r-1")) == "r-1"
    assert Signal("ci.done", Done, verify=GitHubWebhook("gh"), instance_key=lambda p: p.run)


def test_the_clients_pages_github_example_is_a_clean_flow() -> None:
    import re
    from pathlib import Path

    from flowpark import WebhookDelivery, check_flow

    page = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    (example,) = [b for b in blocks if "GitHubWebhook(" in b]
    namespace: dict[str, object] = {"__name__": "clients_example"}
    exec(compile(example, "docs/clients.md", "exec"), namespace)
    assert check_flow(namespace["ci_wait"]) == []  # type: ignore[arg-type]
    adapt = namespace["build_finished"]
    run = {"action": "completed", "workflow_run": {"id": 7, "conclusion": "success"}}
    assert adapt(WebhookDelivery(run, "workflow_run")).run_id == 7  # type: ignore[operator]
    assert adapt(WebhookDelivery({"zen": "..."}, "ping")) is None  # type: ignore[operator]


def test_the_clients_pages_bearer_keyed_example_names_its_instance_key() -> None:
    import re
    from pathlib import Path

    page = Path(__file__).resolve().parents[2] / "docs" / "clients.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
    (example,) = [b for b in blocks if "ORDER_PAID" in b]
    namespace: dict[str, Any] = {"__name__": "clients_example"}
    exec(compile(example, "docs/clients.md", "exec"), namespace)
    signal = namespace["ORDER_PAID"]
    assert signal.verify is None
    assert signal.instance_key(namespace["OrderPaid"](order_id="1234", amount=1)) == "order-1234"


# Standard Webhooks: a secret and a signature made by the standardwebhooks library's signer
STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-webhooks-test-secret-24").decode()


def standard(at: datetime, body: bytes = b'{"a": 1}', msg_id: str = "msg_1") -> dict[str, str]:
    from standardwebhooks.webhooks import Webhook

    signature = Webhook(STANDARD_SECRET).sign(msg_id, at, body)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": f"v1,bm90LXRoaXMtb25l {signature}",  # a rolled secret's first
    }


def test_standard_webhooks_are_judged_by_the_nodes_clock_not_the_machines() -> None:
    from flowpark import SignedWebhook

    verifier = SignedWebhook("hooks")
    # ten months from the machine's now: the engine's clock (a virtual one in the harness)
    # is what a signature's age is judged by, as Stripe's is
    at = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    verifier.verify(b'{"a": 1}', standard(at), STANDARD_SECRET, at + timedelta(minutes=4))
    verifier.verify(b'{"a": 1}', standard(at), STANDARD_SECRET, at - timedelta(minutes=4))
    refusals = [
        (b'{"a": 1}', standard(at), STANDARD_SECRET, at + timedelta(minutes=6)),  # stale
        (b'{"a": 1}', standard(at), STANDARD_SECRET, at - timedelta(minutes=6)),  # too new
        (b'{"a": 2}', standard(at), STANDARD_SECRET, at),  # another body
        (b'{"a": 1}', standard(at), "whsec_" + base64.b64encode(b"x" * 24).decode(), at),
        (b'{"a": 1}', standard(at), "", at),  # no secret: refused, never a 500
        (b'{"a": 1}', standard(at) | {"webhook-timestamp": "soon"}, STANDARD_SECRET, at),
    ]
    for body, headers, secret, now in refusals:
        with pytest.raises(SignatureInvalid) as refused:
            verifier.verify(body, headers, secret, now)
        assert STANDARD_SECRET not in refused.value.message
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        missing = {k: v for k, v in standard(at).items() if k != name}
        with pytest.raises(SignatureInvalid, match=name):
            verifier.verify(b'{"a": 1}', missing, STANDARD_SECRET, at)
