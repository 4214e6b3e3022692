"""Flows whose waits end by a provider's signed webhook (served with ``--flows`` by
``test_provider_webhooks``):

* ``ci.wait``: waits for GitHub's ``workflow_run`` event of its run (``X-Hub-Signature-256``
  with the ``github`` secret), mapped to ``BuildFinished``; a run of another id is stored
  unmatched, any other event (``ping``) is answered 204; started with the instance key
  ``run-<id>``, it also takes deliveries on the flow's keyed route (no instance id);
* ``payment.wait``: waits for Stripe's ``payment_intent.succeeded`` event of its payment
  (``Stripe-Signature`` with the ``stripe`` secret), mapped to ``PaymentSucceeded``; its
  keyed route finds it by the payment intent as instance key;
* ``hook.wait``: waits for a delivery signed by an HMAC header (``X-Signature``, base64
  SHA-512, ``X-Delivery`` as its id), the body being the payload itself;
* ``order.wait``: waits for ``order.paid``, a bearer-token signal with an instance key
  (``order-<id>``): its keyed route takes the typed payload with a token of the ``signal``
  scope; an empty ``order_id`` names no instance, and ``order_id`` ``"boom"`` makes the
  key function raise;
* ``ci.build``: a step starts a CI run and records its id with ``ctx.correlate("ci", ...)``,
  then waits for GitHub's ``workflow_run`` event (``ci.completed``), which the provider
  signal route ``/api/v1/providers/ci/signals/ci.completed`` routes by that id;
* ``ci.gated``: the same, with a bearer-token ``ci.gate`` wait between the run's start and
  the wait for its completion (a completion delivered before the wait is kept for it);
* ``parcel.track``: records a carrier's tracking number; the bearer-token provider signal
  ``parcel.delivered`` (route ``/api/v1/providers/carrier/signals/parcel.delivered``) ends
  its wait.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from flowpark import (
    Bag,
    Capability,
    Correlate,
    Flow,
    GitHubWebhook,
    HmacWebhook,
    HttpTrigger,
    Signal,
    StepContext,
    StripeWebhook,
    WebhookDelivery,
)


class BuildRun(BaseModel):
    run_id: int


class BuildFinished(BaseModel):
    run_id: int
    conclusion: str


def build_finished(delivery: WebhookDelivery) -> BuildFinished | None:
    """GitHub's ``workflow_run`` ``completed`` event as ``BuildFinished``; None for others."""
    if delivery.event != "workflow_run" or delivery.payload.get("action") != "completed":
        return None
    run: dict[str, Any] = delivery.payload["workflow_run"]
    return BuildFinished(run_id=run["id"], conclusion=run["conclusion"])


BUILD_FINISHED = Signal(
    "ci.finished",
    BuildFinished,
    verify=GitHubWebhook("github"),
    adapt=build_finished,
    instance_key=lambda payload: f"run-{payload.run_id}",  # a start's instanceKey
)


def same_run(bag: Bag, payload: BuildFinished) -> bool:
    return bool(payload.run_id == bag.input.run_id)


class Payment(BaseModel):
    payment_intent: str


class PaymentSucceeded(BaseModel):
    payment_intent: str
    amount: int


def payment_succeeded(delivery: WebhookDelivery) -> PaymentSucceeded | None:
    """Stripe's ``payment_intent.succeeded`` event as ``PaymentSucceeded``."""
    if delivery.event != "payment_intent.succeeded":
        return None
    intent: dict[str, Any] = delivery.payload["data"]["object"]
    return PaymentSucceeded(payment_intent=intent["id"], amount=intent["amount"])


PAYMENT_SUCCEEDED = Signal(
    "payment.succeeded",
    PaymentSucceeded,
    verify=StripeWebhook("stripe"),
    adapt=payment_succeeded,
    instance_key=lambda payload: payload.payment_intent,
)


class Hook(BaseModel):
    label: str = "x"


class HookCalled(BaseModel):
    note: str


HOOK_CALLED = Signal(
    "hook.called",
    HookCalled,
    verify=HmacWebhook(
        "plain", "X-Signature", algorithm="sha512", encoding="base64", id_header="X-Delivery"
    ),
)

ci_wait = (
    Flow("ci.wait", "1.0.0", input=BuildRun, trigger=HttpTrigger("POST", "/api/v1/ci-runs"))
    .await_signal(BUILD_FINISHED, match=same_run)
    .returns(lambda bag: bag.get(BuildFinished))
)

payment_wait = (
    Flow("payment.wait", "1.0.0", input=Payment, trigger=HttpTrigger("POST", "/api/v1/payments"))
    .await_signal(
        PAYMENT_SUCCEEDED,
        match=lambda bag, p: bool(p.payment_intent == bag.input.payment_intent),
    )
    .returns(lambda bag: bag.get(PaymentSucceeded))
)

hook_wait = (
    Flow("hook.wait", "1.0.0", input=Hook, trigger=HttpTrigger("POST", "/api/v1/hooks"))
    .await_signal(HOOK_CALLED)
    .returns(lambda bag: bag.get(HookCalled))
)


class Order(BaseModel):
    order_id: str


class OrderPaid(BaseModel):
    order_id: str
    amount: int


def order_key(paid: OrderPaid) -> str | None:
    """The instance key of the order ``paid`` is for; None for an empty id."""
    if paid.order_id == "boom":
        raise RuntimeError(f"no order {paid.order_id} in the ledger")
    return f"order-{paid.order_id}" if paid.order_id else None


ORDER_PAID = Signal("order.paid", OrderPaid, instance_key=order_key)

order_wait = (
    Flow("order.wait", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/orders"))
    .await_signal(ORDER_PAID, match=lambda bag, p: bool(p.order_id == bag.input.order_id))
    .returns(lambda bag: bag.get(OrderPaid))
)


# -- correlation keys: a provider's id recorded mid-flow finds the instance ---------------


class CiRun(BaseModel):
    run_id: int


class Gate(BaseModel):
    note: str = ""


BUILD_COMPLETED = Signal(
    "ci.completed",
    BuildFinished,
    verify=GitHubWebhook("github"),
    adapt=build_finished,
    correlate=Correlate("ci", key=lambda payload: payload.run_id),
)
GATE = Signal("ci.gate", Gate)


class StartCiRun(Capability):
    """Starts a CI run; the CI "mints" the run id the input names (the test knows it)."""

    id = "ci.start"
    puts = (CiRun,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.correlate("ci", str(ctx.input.run_id))
        ctx.put(CiRun(run_id=ctx.input.run_id))


ci_build = (
    Flow("ci.build", "1.0.0", input=BuildRun, trigger=HttpTrigger("POST", "/api/v1/builds"))
    .step(StartCiRun())
    .await_signal(BUILD_COMPLETED)
    .returns(lambda bag: bag.get(BuildFinished))
)

ci_gated = (
    Flow("ci.gated", "1.0.0", input=BuildRun, trigger=HttpTrigger("POST", "/api/v1/gated"))
    .step(StartCiRun())
    .await_signal(GATE)
    .await_signal(BUILD_COMPLETED)
    .returns(lambda bag: bag.get(BuildFinished))
)


class Parcel(BaseModel):
    tracking: str


class ParcelDelivered(BaseModel):
    tracking: str
    signed_by: str


class ShipParcel(Capability):
    id = "parcel.ship"

    async def execute(self, ctx: StepContext) -> None:
        ctx.correlate("carrier", ctx.input.tracking)


PARCEL_DELIVERED = Signal(
    "parcel.delivered",
    ParcelDelivered,
    correlate=Correlate("carrier", key=lambda payload: payload.tracking or None),
)

parcel_track = (
    Flow("parcel.track", "1.0.0", input=Parcel, trigger=HttpTrigger("POST", "/api/v1/parcels"))
    .step(ShipParcel())
    .await_signal(PARCEL_DELIVERED)
    .returns(lambda bag: bag.get(ParcelDelivered))
)
