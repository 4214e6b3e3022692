"""Providers' signed webhooks against a real ``flowpark serve`` process, on both stores:
GitHub (``X-Hub-Signature-256``), Stripe (``Stripe-Signature``) and a generic HMAC header
each end a waiting instance with no bearer token; a wrong secret, a stale Stripe timestamp,
a missing signature and a bearer token alone are 401 ``signature_invalid``, and a replayed
delivery id answers the first signal: each leaves the instance as it was. A delivery the
flow's ``adapt`` cannot read is a generic 422 ``signal_payload_invalid`` (the exception goes
to the log, masked); an unknown name on a keyed route is 404 ``signal_not_declared`` with the
flow's signals; a bearer-token signal with an instance key has a keyed route too. At the
one fixed URL of a provider signal (``/api/v1/providers/ci/signals/ci.completed``), a GitHub
delivery finds the instance by the CI run id a step recorded (``ctx.correlate``): a wrong
signature is 401, an unknown run id 404 ``correlation_key_unknown`` (nothing kept for a later
holder), a completion before the wait is kept for it, and a replayed delivery id is
delivered once.

The deliveries are made the providers' way, by hand (``hmac`` over the raw body), and sent
as raw bytes over HTTP: the node sees what a provider sends.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.eventually import eventually_sync
from tests.support.server import TOKEN, SubprocessServer, serve_subprocess
from tests.support.stores import module_store

pytestmark = pytest.mark.slow

FLOWS = Path(__file__).with_name("provider_flows.py")
GITHUB_SECRET = "gh-webhook-secret-for-tests"
STRIPE_SECRET = "whsec_stripe_endpoint_secret_for_tests"
PLAIN_SECRET = "plain-hmac-secret"


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def node(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("providers")
    secrets = {"github": GITHUB_SECRET, "stripe": STRIPE_SECRET, "plain": PLAIN_SECRET}
    with (
        module_store(request, folder) as url,
        serve_subprocess(
            url,
            folder / "serve.log",
            flows=str(FLOWS),
            signal_secrets=json.dumps(secrets),
        ) as server,
    ):

        def up() -> None:
            try:
                status = httpx.get(f"{server.base_url}/healthz", timeout=2).status_code
            except httpx.HTTPError as exc:
                raise AssertionError(f"not up yet: {exc}\n{server.output()}") from None
            assert status == 200

        eventually_sync(up, timeout=30, what="flowpark serve answers")
        yield server


def api(node: SubprocessServer) -> httpx.Client:
    return httpx.Client(
        base_url=node.base_url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def start(
    node: SubprocessServer, route: str, body: dict[str, Any], instance_key: str | None = None
) -> str:
    if instance_key is not None:
        body = {**body, "instanceKey": instance_key}
    with api(node) as client:
        resp = client.post(route, json=body, headers={"Idempotency-Key": uuid.uuid4().hex})
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "suspended", resp.text
    return str(resp.json()["instanceId"])


def instance(node: SubprocessServer, instance_id: str) -> dict[str, Any]:
    with api(node) as client:
        resp = client.get(f"/api/v1/instances/{instance_id}")
    assert resp.status_code == 200, resp.text
    return resp.json()  # type: ignore[no-any-return]


def post(node: SubprocessServer, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    """POST raw bytes with no bearer token (a provider's delivery)."""
    with httpx.Client(base_url=node.base_url, timeout=30) as hook:
        return hook.post(
            path, content=body, headers={"Content-Type": "application/json", **headers}
        )


def ended(node: SubprocessServer, instance_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        view = instance(node, instance_id)
        assert view["state"] == "completed", view["state"]
        return view

    return eventually_sync(check, timeout=20, what=f"{instance_id} completes")


# -- GitHub ------------------------------------------------------------------------------


def workflow_run(run_id: int, action: str = "completed") -> bytes:
    event = {
        "action": action,
        "workflow_run": {"id": run_id, "status": "completed", "conclusion": "success"},
        "repository": {"full_name": "shop/api"},
    }
    return json.dumps(event).encode()


def github_headers(
    body: bytes, *, secret: str = GITHUB_SECRET, event: str = "workflow_run", delivery: str = ""
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "X-Hub-Signature-256": f"sha256={digest}",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
    }


def ci_path(instance_id: str) -> str:
    return f"/api/v1/ci-runs/{instance_id}/signals/ci.finished"


def test_a_github_signed_workflow_run_ends_the_wait_of_its_run(node: SubprocessServer) -> None:
    run_id = uuid.uuid4().int % 10**9
    instance_id = start(node, "/api/v1/ci-runs", {"run_id": run_id})

    ping = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
    resp = post(node, ci_path(instance_id), ping, github_headers(ping, event="ping"))
    assert resp.status_code == 204, resp.text  # not this signal: nothing stored
    other = workflow_run(run_id + 1)
    resp = post(node, ci_path(instance_id), other, github_headers(other))
    assert resp.status_code == 202, resp.text
    assert resp.json()["matched"] is False  # another run's: stored, ends nothing
    assert instance(node, instance_id)["state"] == "suspended"

    body = workflow_run(run_id)
    headers = github_headers(body)
    resp = post(node, ci_path(instance_id), body, headers)
    assert resp.status_code == 202, resp.text
    assert resp.json()["created"] is True
    assert resp.json()["payload"] == {"run_id": run_id, "conclusion": "success"}

    view = ended(node, instance_id)
    assert view["result"] == {"run_id": run_id, "conclusion": "success"}
    assert [s["matched"] for s in view["signals"]] == [False, True]

    # GitHub's redelivery of the same delivery id: the first signal, nothing new stored
    again = post(node, ci_path(instance_id), body, headers)
    assert again.status_code == 202, again.text
    assert again.json()["created"] is False
    assert again.json()["signalId"] == resp.json()["signalId"]
    assert len(instance(node, instance_id)["signals"]) == 2


# -- Stripe ------------------------------------------------------------------------------


def payment_event(intent: str, amount: int = 4200, event_id: str = "") -> bytes:
    event = {
        "id": event_id or f"evt_{uuid.uuid4().hex[:24]}",
        "object": "event",
        "type": "payment_intent.succeeded",
        "data": {"object": {"id": intent, "object": "payment_intent", "amount": amount}},
    }
    return json.dumps(event).encode()


def stripe_headers(
    body: bytes, *, secret: str = STRIPE_SECRET, at: int | None = None
) -> dict[str, str]:
    stamp = str(int(time.time()) if at is None else at)
    digest = hmac.new(secret.encode(), stamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"Stripe-Signature": f"t={stamp},v1={digest},v0=0123456789abcdef"}


def pay_path(instance_id: str) -> str:
    return f"/api/v1/payments/{instance_id}/signals/payment.succeeded"


def test_a_stripe_signed_event_ends_the_wait_of_its_payment(node: SubprocessServer) -> None:
    intent = f"pi_{uuid.uuid4().hex[:20]}"
    instance_id = start(node, "/api/v1/payments", {"payment_intent": intent})
    body = payment_event(intent)

    resp = post(node, pay_path(instance_id), body, stripe_headers(body))

    assert resp.status_code == 202, resp.text
    assert resp.json()["created"] is True
    view = ended(node, instance_id)
    assert view["result"] == {"payment_intent": intent, "amount": 4200}
    # Stripe's retry: the same event, signed again later; the event id is the key
    again = post(node, pay_path(instance_id), body, stripe_headers(body, at=int(time.time()) + 1))
    assert again.status_code == 202, again.text
    assert again.json()["created"] is False
    assert len(instance(node, instance_id)["signals"]) == 1


# -- refusals ----------------------------------------------------------------------------


def _refusal(
    case: str, ci_id: str, pay_id: str, run_id: int, intent: str
) -> tuple[str, bytes, dict[str, str]]:
    run, pay = workflow_run(run_id), payment_event(intent)
    stale = int(time.time()) - 10 * 60
    return {
        "github wrong secret": (ci_path(ci_id), run, github_headers(run, secret="guessed")),
        "github tampered body": (
            ci_path(ci_id),
            run.replace(b"success", b"failure"),
            github_headers(run),
        ),
        "github no signature": (ci_path(ci_id), run, {"X-GitHub-Event": "workflow_run"}),
        "github bearer only": (ci_path(ci_id), run, {"Authorization": f"Bearer {TOKEN}"}),
        "stripe wrong secret": (pay_path(pay_id), pay, stripe_headers(pay, secret="whsec_x")),
        "stripe stale timestamp": (pay_path(pay_id), pay, stripe_headers(pay, at=stale)),
        "stripe malformed header": (pay_path(pay_id), pay, {"Stripe-Signature": "v1=abc"}),
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "github wrong secret",
        "github tampered body",
        "github no signature",
        "github bearer only",
        "stripe wrong secret",
        "stripe stale timestamp",
        "stripe malformed header",
    ],
)
def test_a_bad_or_stale_delivery_is_401_and_leaves_the_instance_as_it_was(
    node: SubprocessServer, case: str
) -> None:
    run_id, intent = uuid.uuid4().int % 10**9, f"pi_{uuid.uuid4().hex[:20]}"
    ci_id = start(node, "/api/v1/ci-runs", {"run_id": run_id})
    pay_id = start(node, "/api/v1/payments", {"payment_intent": intent})
    before = {i: instance(node, i) for i in (ci_id, pay_id)}
    path, body, headers = _refusal(case, ci_id, pay_id, run_id, intent)

    resp = post(node, path, body, headers)

    assert resp.status_code == 401, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["code"] == "signature_invalid"
    for secret in (GITHUB_SECRET, STRIPE_SECRET):
        assert secret not in resp.text
        assert secret not in node.output()  # nor in the node's log
    for i in (ci_id, pay_id):
        view = instance(node, i)
        assert view["state"] == "suspended"
        assert view["signals"] == []
        assert view["journal"] == before[i]["journal"]


def test_a_replayed_delivery_id_stores_nothing_new_while_the_instance_waits(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    instance_id = start(node, "/api/v1/ci-runs", {"run_id": run_id})
    other = workflow_run(run_id + 7)
    headers = github_headers(other)
    first = post(node, ci_path(instance_id), other, headers)
    assert first.status_code == 202, first.text
    before = instance(node, instance_id)

    replay = post(node, ci_path(instance_id), other, headers)

    assert replay.status_code == 202, replay.text
    assert replay.json()["created"] is False
    assert replay.json()["signalId"] == first.json()["signalId"]
    after = instance(node, instance_id)
    assert after["state"] == "suspended"
    assert after["signals"] == before["signals"]
    assert after["journal"] == before["journal"]


# -- keyed routes: one webhook URL for every instance ----------------------------------


def test_a_github_delivery_on_the_keyed_route_finds_its_instance_by_key(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    mine = start(node, "/api/v1/ci-runs", {"run_id": run_id}, instance_key=f"run-{run_id}")
    other = start(node, "/api/v1/ci-runs", {"run_id": run_id + 1}, instance_key=f"run-{run_id + 1}")
    keyed = "/api/v1/ci-runs/signals/ci.finished"
    body = workflow_run(run_id)
    headers = github_headers(body)
    assert post(node, keyed, body, github_headers(body, secret="guessed")).status_code == 401

    resp = post(node, keyed, body, headers)

    assert resp.status_code == 202, resp.text
    assert resp.json()["instanceId"] == mine
    assert ended(node, mine)["result"] == {"run_id": run_id, "conclusion": "success"}
    assert instance(node, other)["signals"] == []  # the other run waits on
    again = post(node, keyed, body, headers)  # a redelivery once the instance ended
    assert again.status_code == 202, again.text
    assert again.json()["created"] is False and again.json()["instanceId"] == mine
    unknown = workflow_run(run_id + 99)
    missing = post(node, keyed, unknown, github_headers(unknown))
    assert missing.status_code == 404, missing.text
    assert missing.json()["code"] == "instance_not_found"
    assert instance(node, other)["state"] == "suspended"


@pytest.mark.parametrize("delivery", ["tab\tinside", "d" * 201])
def test_a_delivery_id_no_key_can_be_is_refused_in_its_own_words(
    node: SubprocessServer, delivery: str
) -> None:
    run_id = uuid.uuid4().int % 10**9
    mine = start(node, "/api/v1/ci-runs", {"run_id": run_id}, instance_key=f"run-{run_id}")
    body = workflow_run(run_id)

    resp = post(
        node, "/api/v1/ci-runs/signals/ci.finished", body, github_headers(body, delivery=delivery)
    )

    assert resp.status_code == 400, resp.text
    assert resp.json()["code"] == "idempotency_key_invalid"
    assert "the delivery's id" in resp.json()["detail"]
    assert "Idempotency-Key" not in resp.json()["detail"]  # the provider sent none
    assert instance(node, mine)["signals"] == []


def test_a_key_longer_than_any_instance_key_is_not_found_and_not_echoed(
    node: SubprocessServer,
) -> None:
    huge = json.loads(workflow_run(1))
    huge["workflow_run"]["id"] = int("7" * 4000)  # the flow's key: f"run-{run_id}"
    raw = json.dumps(huge).encode()

    resp = post(node, "/api/v1/ci-runs/signals/ci.finished", raw, github_headers(raw))

    assert resp.status_code == 404, resp.text[:300]
    assert resp.json()["code"] == "instance_not_found"
    assert len(resp.content) < 1000  # the 4000-digit key is not sent back


def test_a_stripe_event_on_the_keyed_route_ends_the_wait_of_its_payment(
    node: SubprocessServer,
) -> None:
    intent = f"pi_{uuid.uuid4().hex[:20]}"
    instance_id = start(node, "/api/v1/payments", {"payment_intent": intent}, instance_key=intent)
    body = payment_event(intent, amount=99)
    stale = stripe_headers(body, at=int(time.time()) - 3600)
    assert post(node, "/api/v1/payments/signals/payment.succeeded", body, stale).status_code == 401
    assert instance(node, instance_id)["signals"] == []

    resp = post(node, "/api/v1/payments/signals/payment.succeeded", body, stripe_headers(body))

    assert resp.status_code == 202, resp.text
    assert ended(node, instance_id)["result"] == {"payment_intent": intent, "amount": 99}


# -- a generic HMAC header ---------------------------------------------------------------


def test_a_generic_hmac_signed_delivery_ends_the_wait(node: SubprocessServer) -> None:
    instance_id = start(node, "/api/v1/hooks", {})
    path = f"/api/v1/hooks/{instance_id}/signals/hook.called"
    body = b'{"note": "done"}'
    digest = base64.b64encode(hmac.new(PLAIN_SECRET.encode(), body, hashlib.sha512).digest())
    headers = {"X-Signature": digest.decode(), "X-Delivery": "d-1"}

    wrong = post(node, path, body, {**headers, "X-Signature": base64.b64encode(b"x" * 64).decode()})
    assert wrong.status_code == 401, wrong.text
    no_id = post(node, path, body, {"X-Signature": digest.decode()})
    assert no_id.status_code == 401, no_id.text
    assert instance(node, instance_id)["signals"] == []

    resp = post(node, path, body, headers)

    assert resp.status_code == 202, resp.text
    assert ended(node, instance_id)["result"] == {"note": "done"}
    assert post(node, path, body, headers).json()["created"] is False


# -- what the flow's functions cannot read -----------------------------------------------


def _run_event(run: dict[str, Any]) -> bytes:
    event = json.loads(workflow_run(1))
    event["workflow_run"] = run
    return json.dumps(event).encode()


@pytest.mark.parametrize("route", ["instance", "keyed"])
def test_a_delivery_adapt_cannot_read_is_a_generic_422_and_its_cause_is_logged(
    node: SubprocessServer, route: str
) -> None:
    run_id = uuid.uuid4().int % 10**9
    mine = start(node, "/api/v1/ci-runs", {"run_id": run_id}, instance_key=f"run-{run_id}")
    path = ci_path(mine) if route == "instance" else "/api/v1/ci-runs/signals/ci.finished"
    missing = _run_event({"id": run_id, "status": "completed"})  # adapt reads "conclusion"
    wrong_type = _run_event({"id": TOKEN, "conclusion": "success"})  # run_id is an int

    for body in (missing, wrong_type):  # a KeyError; a ValidationError echoing its input
        resp = post(node, path, body, github_headers(body))
        assert resp.status_code == 422, resp.text
        problem = resp.json()
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert problem["code"] == "signal_payload_invalid"
        assert problem["signal"] == "ci.finished"
        assert problem["detail"] == (
            "the delivery cannot be read as a ci.finished signal of ci.wait (the node's log "
            "says why); nothing was stored"
        )
        assert "errors" not in problem
        for leak in ("KeyError", "conclusion", "ValidationError", TOKEN, "Traceback"):
            assert leak not in resp.text

    def logged() -> list[str]:
        lines = [
            line
            for line in node.output().splitlines()
            if "signal ci.finished of ci.wait: its adapt raised" in line
        ]
        assert any("KeyError: 'conclusion'" in line for line in lines), lines
        assert any("ValidationError" in line for line in lines), lines
        return lines

    lines = eventually_sync(logged, timeout=10, what="the adapt's errors in the log")
    assert not any(TOKEN in line for line in lines)  # a token in the input is masked
    assert instance(node, mine)["signals"] == []


def test_an_unknown_signal_on_a_keyed_route_names_it_and_lists_the_flows_signals(
    node: SubprocessServer,
) -> None:
    body = workflow_run(1)

    resp = post(node, "/api/v1/ci-runs/signals/ci.started", body, github_headers(body))

    assert resp.status_code == 404, resp.text
    problem = resp.json()
    assert problem["code"] == "signal_not_declared"
    assert problem["signal"] == "ci.started" and problem["flow"] == "ci.wait"
    assert problem["keyedSignals"] == ["ci.finished"]
    assert problem["declaredSignals"] == ["ci.finished"]
    assert "'ci.started'" in problem["detail"] and "ci.finished" in problem["detail"]
    with api(node) as client:  # a bearer flow's keyed routes too
        other = client.post("/api/v1/orders/signals/order.refunded", json={})
    assert other.status_code == 404 and other.json()["keyedSignals"] == ["order.paid"]


# -- a bearer-token signal's keyed route ---------------------------------------------------

ORDERS = "/api/v1/orders/signals/order.paid"


def test_a_bearer_signal_on_the_keyed_route_finds_its_instance_by_key(
    node: SubprocessServer,
) -> None:
    order = uuid.uuid4().hex[:12]
    mine = start(node, "/api/v1/orders", {"order_id": order}, instance_key=f"order-{order}")
    other = start(node, "/api/v1/orders", {"order_id": f"{order}-2"}, f"order-{order}-2")
    paid = {"order_id": order, "amount": 1200}
    key = {"Idempotency-Key": f"paid-{order}"}
    with httpx.Client(base_url=node.base_url, timeout=30) as anonymous:
        refused = anonymous.post(ORDERS, json=paid)
    assert refused.status_code == 401 and refused.json()["code"] == "unauthorized"

    with api(node) as client:
        resp = client.post(ORDERS, json=paid, headers=key)
        assert resp.status_code == 202, resp.text
        assert resp.json()["instanceId"] == mine and resp.json()["created"] is True
        assert ended(node, mine)["result"] == paid
        again = client.post(ORDERS, json=paid, headers=key)  # a retry, once it ended
        assert again.status_code == 202, again.text
        assert again.json()["created"] is False
        assert again.json()["signalId"] == resp.json()["signalId"]
        reused = client.post(ORDERS, json={**paid, "amount": 1}, headers=key)
        assert reused.status_code == 422 and reused.json()["code"] == "idempotency_key_reused"

        unknown = client.post(ORDERS, json={"order_id": "nobody", "amount": 1})
        assert unknown.status_code == 404 and unknown.json()["code"] == "instance_not_found"
        invalid = client.post(ORDERS, json={"order_id": order})
        assert invalid.status_code == 422 and invalid.json()["code"] == "input_invalid"
        assert client.post(ORDERS, json={"order_id": "", "amount": 1}).status_code == 204
        boom = client.post(ORDERS, json={"order_id": "boom", "amount": 1})
        assert boom.status_code == 422, boom.text
        assert boom.json()["code"] == "signal_payload_invalid"
        assert "ledger" not in boom.text and "RuntimeError" not in boom.text
        # the key reached this instance first: sent for another, it is refused
        replayed = client.post(ORDERS, json={"order_id": f"{order}-2", "amount": 1200}, headers=key)
        assert replayed.status_code == 409, replayed.text
        assert replayed.json()["code"] == "signal_delivery_replayed"
        schema = client.get("/openapi.json").json()
    assert instance(node, other)["signals"] == []
    operation = schema["paths"][ORDERS]["post"]
    assert operation["operationId"] == "signal_order_wait_order_paid_by_key"
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"order_id", "amount"}
    assert "422" in operation["responses"] and "404" in operation["responses"]


# -- correlation keys: one fixed URL, the CI run id recorded mid-flow ----------------------

CI_COMPLETED = "/api/v1/providers/ci/signals/ci.completed"


def suspended_without_signals(node: SubprocessServer, instance_id: str) -> None:
    view = instance(node, instance_id)
    assert view["state"] == "suspended", view["state"]
    assert view["signals"] == []


def test_a_webhook_at_the_fixed_url_finds_the_run_recorded_mid_flow(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    bystander = start(node, "/api/v1/builds", {"run_id": run_id + 1})
    instance_id = start(node, "/api/v1/builds", {"run_id": run_id})
    body = workflow_run(run_id)
    resp = post(node, CI_COMPLETED, body, github_headers(body))
    assert resp.status_code == 202, resp.text
    assert (resp.json()["instanceId"], resp.json()["created"]) == (instance_id, True)
    view = ended(node, instance_id)
    assert view["result"] == {"run_id": run_id, "conclusion": "success"}
    suspended_without_signals(node, bystander)


def test_a_wrong_signature_at_the_fixed_url_is_401_and_stores_nothing(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    instance_id = start(node, "/api/v1/builds", {"run_id": run_id})
    body = workflow_run(run_id)
    for headers in (github_headers(body, secret="not-the-secret"), {}):
        resp = post(node, CI_COMPLETED, body, headers)
        assert resp.status_code == 401, resp.text
        assert resp.headers["content-type"].startswith("application/problem+json")
        assert resp.json()["code"] == "signature_invalid"
        assert GITHUB_SECRET not in resp.text
    suspended_without_signals(node, instance_id)


def test_an_unknown_run_id_is_404_and_nothing_waits_for_a_later_holder(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    waiting = start(node, "/api/v1/builds", {"run_id": run_id + 1})
    body = workflow_run(run_id)
    resp = post(node, CI_COMPLETED, body, github_headers(body))
    assert resp.status_code == 404, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.json()["code"] == "correlation_key_unknown"
    suspended_without_signals(node, waiting)
    # an instance that records that run id afterwards finds nothing of the refused delivery
    later = start(node, "/api/v1/builds", {"run_id": run_id})
    suspended_without_signals(node, later)


def test_a_completion_before_the_wait_is_kept_and_taken_when_reached(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    instance_id = start(node, "/api/v1/gated", {"run_id": run_id})  # waits on ci.gate
    body = workflow_run(run_id)
    resp = post(node, CI_COMPLETED, body, github_headers(body))
    assert resp.status_code == 202, resp.text
    assert resp.json()["takenAt"] is None  # kept in the mailbox
    view = instance(node, instance_id)
    assert view["state"] == "suspended"
    assert [s["name"] for s in view["signals"]] == ["ci.completed"]
    with api(node) as client:
        gate = client.post(f"/api/v1/gated/{instance_id}/signals/ci.gate", json={"note": "go"})
    assert gate.status_code == 202, gate.text
    view = ended(node, instance_id)
    assert view["result"] == {"run_id": run_id, "conclusion": "success"}
    assert all(s["takenAt"] is not None for s in view["signals"])


def test_a_replayed_delivery_id_at_the_fixed_url_is_delivered_once(
    node: SubprocessServer,
) -> None:
    run_id = uuid.uuid4().int % 10**9
    instance_id = start(node, "/api/v1/gated", {"run_id": run_id})
    body = workflow_run(run_id)
    headers = github_headers(body)
    first = post(node, CI_COMPLETED, body, headers)
    again = post(node, CI_COMPLETED, body, headers)
    assert (first.status_code, again.status_code) == (202, 202), again.text
    assert (first.json()["created"], again.json()["created"]) == (True, False)
    assert again.json()["signalId"] == first.json()["signalId"]
    assert len(instance(node, instance_id)["signals"]) == 1
    with api(node) as client:
        client.post(f"/api/v1/gated/{instance_id}/signals/ci.gate", json={})
    ended(node, instance_id)
    # GitHub's redelivery after the run ended (the key released): the first signal still
    late = post(node, CI_COMPLETED, body, headers)
    assert late.status_code == 202, late.text
    assert (late.json()["created"], late.json()["signalId"]) == (False, first.json()["signalId"])
    names = [s["name"] for s in instance(node, instance_id)["signals"]]
    assert names == ["ci.completed", "ci.gate"]
