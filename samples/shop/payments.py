"""``payment.await``: ask the payment provider for a payment, wait until it succeeds, and
write the outcome into the shop's order.

1. ``payments.create_intent`` creates a payment intent at the provider over HTTP (the
   execution key is the provider's idempotency key, so a retried call creates one intent)
   and records the intent's id as the instance's correlation key.
2. The wait: the provider's webhook ``payment.succeeded`` ends it at once. The provider is
   configured with one URL for every payment, flowpark's provider signal route
   (``{prefix}/api/v1/providers/payments/signals/payment.succeeded``), which finds the
   instance by the intent id the webhook names; it is signed as Stripe signs its webhooks,
   with the secret ``payments`` of ``FLOWPARK_SIGNAL_SECRETS``. A status check every so
   often (parked between checks) is the fallback when a webhook is lost; after
   :attr:`Waits.BUDGET` the order is marked expired and the flow fails.
3. ``shop.record_payment`` writes ``paid`` (or ``payment_failed``) into the shop's
   ``shop_order`` row, through the shop's own engine: the shop's table then tells which
   orders are paid, with no call to flowpark.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from flowpark import (
    Backoff,
    Bag,
    Capability,
    CapabilityOptions,
    Correlate,
    Decision,
    Deps,
    Flow,
    Provider,
    RetryPolicy,
    Signal,
    StepContext,
    StripeWebhook,
    WebhookDelivery,
)

__all__ = [
    "PAYMENT_SUCCEEDED",
    "PROVIDER",
    "WEBHOOK_PATH",
    "Intent",
    "IntentStatus",
    "Orders",
    "PaymentRequest",
    "PaymentResult",
    "PaymentSucceeded",
    "PaymentsClient",
    "Waits",
    "payment_flow",
    "payment_flows",
]

#: The provider's name: its shared limit, its correlation keys, its webhook route, and the
#: name of its signing secret in ``FLOWPARK_SIGNAL_SECRETS``.
PROVIDER = "payments"
PAYMENTS = Provider(PROVIDER, rate_per_second=50)
#: The provider's webhook, below the prefix flowpark is included at.
WEBHOOK_PATH = f"/api/v1/providers/{PROVIDER}/signals/payment.succeeded"


class Waits:
    """The flow's durations."""

    CALL_TIMEOUT = timedelta(seconds=10)
    FIRST_CHECK = timedelta(seconds=10)
    LAST_CHECK = timedelta(minutes=5)
    BUDGET = timedelta(minutes=30)
    #: each call tried for up to 2 minutes (1 s, 2 s, 4 s ... 15 s apart)
    RETRY = RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=15),
        total_duration=timedelta(minutes=2),
    )


class PaymentRequest(BaseModel):
    """The flow's input: what to charge, for which order."""

    order_id: str
    amount_cents: int
    currency: str = "EUR"


class Intent(BaseModel):
    """Put by ``payments.create_intent``: the provider's id of the payment."""

    intent_id: str


class IntentStatus(BaseModel):
    """Put by each status check: ``processing``, ``succeeded`` or ``failed``."""

    status: str


class PaymentSucceeded(BaseModel):
    """The ``payment.succeeded`` signal: the provider's webhook, mapped."""

    intent_id: str


class PaymentResult(BaseModel):
    """The flow's result."""

    order_id: str
    intent_id: str


class Orders(Protocol):
    """What the flow needs of the shop: its order's status written."""

    async def set_status(self, order_id: str, status: str) -> None:
        """Set the order's status (idempotent)."""


class PaymentsClient:
    """The payment provider's HTTP API (each call with its own timeout).

    Args:
        http: the shared client (``deps.http``).
        base_url: the provider's API, e.g. ``http://127.0.0.1:8000/fake/payments``.
    """

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self.http, self.base = http, base_url.rstrip("/")

    async def create_intent(self, request: PaymentRequest, key: str) -> str:
        """Create a payment intent; a repeat of ``key`` answers the intent it created.

        Returns:
            The intent's id.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        answer = await self.http.post(
            f"{self.base}/intents",
            json={
                "amountCents": request.amount_cents,
                "currency": request.currency,
                "reference": request.order_id,
            },
            headers={"Idempotency-Key": key},
            timeout=Waits.CALL_TIMEOUT.total_seconds(),
        )
        answer.raise_for_status()
        return str(answer.json()["id"])

    async def status(self, intent_id: str) -> str:
        """The intent's status.

        Raises:
            httpx.HTTPError: the call failed or timed out (a failed try).
        """
        answer = await self.http.get(
            f"{self.base}/intents/{quote(intent_id, safe='')}",
            timeout=Waits.CALL_TIMEOUT.total_seconds(),
        )
        answer.raise_for_status()
        return str(answer.json()["status"])


def payment_succeeded(delivery: WebhookDelivery) -> PaymentSucceeded | None:
    """The provider's ``payment_intent.succeeded`` event; any other event is not it."""
    if delivery.event != "payment_intent.succeeded":
        return None
    return PaymentSucceeded(intent_id=delivery.payload["data"]["object"]["id"])


PAYMENT_SUCCEEDED = Signal(
    "payment.succeeded",
    PaymentSucceeded,
    verify=StripeWebhook(PROVIDER),
    adapt=payment_succeeded,
    correlate=Correlate(PROVIDER, key=lambda paid: paid.intent_id),
)


class CreateIntent(Capability):
    """``payments.create_intent``: ask the provider for the payment."""

    id = "payments.create_intent"
    provider = PAYMENTS
    puts = (Intent,)
    options = CapabilityOptions(retry=Waits.RETRY)

    def __init__(self, payments: PaymentsClient) -> None:
        self.payments = payments

    async def execute(self, ctx: StepContext) -> None:
        """Create the intent, keyed by the execution key; record its id (the webhook's)."""
        intent_id = await self.payments.create_intent(ctx.input, key=ctx.execution_key)
        ctx.correlate(PROVIDER, intent_id)
        ctx.put(Intent(intent_id=intent_id))


class CheckIntent(Capability):
    """``payments.status``: one status check (``processing`` is an answer, not an error)."""

    id = "payments.status"
    provider = PAYMENTS
    idempotent = True
    reads = (Intent,)
    puts = (IntentStatus,)
    options = CapabilityOptions(retry=Waits.RETRY)

    def __init__(self, payments: PaymentsClient) -> None:
        self.payments = payments

    async def execute(self, ctx: StepContext) -> None:
        """Read the intent's status."""
        ctx.put(IntentStatus(status=await self.payments.status(ctx.get(Intent).intent_id)))


class RecordPayment(Capability):
    """``shop.record_payment``: write the outcome into the shop's order."""

    id = "shop.record_payment"
    idempotent = True

    def __init__(self, orders: Orders) -> None:
        self.orders = orders

    async def execute(self, ctx: StepContext) -> Decision | None:
        """``paid`` when the webhook or the last check said so; else ``payment_failed``,
        and the flow fails."""
        paid = ctx.find(PaymentSucceeded) is not None
        status = "succeeded" if paid else ctx.get(IntentStatus).status
        if status != "succeeded":
            await self.orders.set_status(ctx.input.order_id, "payment_failed")
            return ctx.fail("payment.failed", f"the provider ended the payment as {status}")
        await self.orders.set_status(ctx.input.order_id, "paid")
        return None


class ExpireOrder(Capability):
    """``shop.expire_order``: no payment within the budget: the order is marked expired."""

    id = "shop.expire_order"
    idempotent = True

    def __init__(self, orders: Orders) -> None:
        self.orders = orders

    async def execute(self, ctx: StepContext) -> None:
        """Mark the order ``payment_expired``."""
        await self.orders.set_status(ctx.input.order_id, "payment_expired")


def settled(bag: Bag) -> bool:
    """The poll's end: the provider's status is final."""
    return bag.get(IntentStatus).status in ("succeeded", "failed")


def for_our_intent(bag: Bag, paid: PaymentSucceeded) -> bool:
    """The wait takes a webhook about the intent this instance created, and no other."""
    return paid.intent_id == bag.get(Intent).intent_id


def payment_flow(payments: PaymentsClient, orders: Orders) -> Flow:
    """``payment.await`` 1.0.0, bound to the provider's client and the shop's orders."""
    return (
        Flow(
            "payment.await",
            "1.0.0",
            input=PaymentRequest,
            output=PaymentResult,
            display_key="order_id",
        )
        .step(CreateIntent(payments))
        .poll_until(
            CheckIntent(payments),
            until=settled,
            interval=Backoff.exponential_jitter(Waits.FIRST_CHECK, Waits.LAST_CHECK),
            timeout=Waits.BUDGET,
            reads=(IntentStatus,),
        )
        .or_signal(PAYMENT_SUCCEEDED, match=for_our_intent)
        .on_timeout(
            lambda b: b.step(ExpireOrder(orders)).fail(
                "payment.expired", f"no payment within {Waits.BUDGET}"
            )
        )
        .step(RecordPayment(orders))
        .returns(
            lambda bag: PaymentResult(
                order_id=bag.input.order_id, intent_id=bag.get(Intent).intent_id
            ),
            reads=(Intent,),
        )
    )


def payment_flows(orders: Orders, payments_url: str) -> Callable[[Deps], list[Flow]]:
    """The shop's flows source (``Flowpark(flows=[...])``): ``payment.await`` on the
    node's shared HTTP client, calling the provider at ``payments_url``."""

    def flows(deps: Deps) -> list[Flow]:
        return [payment_flow(PaymentsClient(deps.http, payments_url), orders)]

    return flows
