"""The shop sample (``flowpark.samples.shop``) served by a real uvicorn, on SQLite and
PostgreSQL: an order and its payment's start in one transaction, paid by the provider's
signed webhook on flowpark's provider route; an order the shop's table refuses after the
start leaves no instance and no provider call; the shop's, the fake provider's and
flowpark's routes in one OpenAPI document; a webhook with a wrong signature stores
nothing."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from flowpark.samples.shop.app import TRIAL_SECRET, ShopSettings, create_app
from flowpark.samples.shop.payments import WEBHOOK_PATH
from flowpark.settings import Settings
from tests.support.eventually import eventually
from tests.support.server import TOKEN, LiveServer, live_server

pytestmark = pytest.mark.slow

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def shop_app(settings: Settings) -> FastAPI:
    return create_app(ShopSettings(base_url=settings.self_url, fake_payment_seconds=0.3), settings)


@pytest.fixture(scope="module")
def shop(module_store_url: str) -> Iterator[LiveServer]:
    with live_server(module_store_url, app_factory=shop_app) as server:
        yield server


async def paid(http: httpx.AsyncClient, order_id: str) -> dict[str, Any]:
    """The order once paid and its payment flow ended (the flow marks the order paid in its
    last step, then completes: both must be seen)."""
    order: dict[str, Any] = (await http.get(f"/orders/{order_id}")).json()
    assert order["status"] == "paid", order
    assert order["payment"]["state"] != "running", order
    return order


async def payments(http: httpx.AsyncClient) -> list[str]:
    listed = await http.get(
        "/flowpark/api/v1/instances", params={"flow": "payment.await"}, headers=AUTH
    )
    assert listed.status_code == 200, listed.text
    return [row["instanceId"] for row in listed.json()["instances"]]


async def test_an_order_is_paid_by_the_providers_webhook(shop: LiveServer) -> None:
    async with httpx.AsyncClient(base_url=shop.base_url, timeout=30) as http:
        placed = await http.post("/orders", json={"sku": "mug", "quantity": 3})
        assert placed.status_code == 201, placed.text
        order = placed.json()
        assert (order["status"], order["amount_cents"]) == ("awaiting_payment", 3600)
        instance_id = order["payment"]["instance_id"]

        done = await eventually(lambda: paid(http, order["id"]), timeout=30)
        assert done["payment"]["state"] == "completed"
        assert done["payment"]["instance_id"] == instance_id

        view = (await http.get(f"/flowpark/api/v1/instances/{instance_id}", headers=AUTH)).json()
        steps = [row["capabilityId"] for row in view["journal"] if row["kind"] != "deadline"]
        # the wait ends at the webhook, or at a status check that already reads the intent
        # paid (on a busy machine the check may run while the webhook is on its way)
        assert steps[0] == "payments.create_intent" and steps[-1] == "shop.record_payment"
        assert set(steps[1:-1]) <= {"payments.status", "payment.succeeded"}, steps
        assert steps.count("payment.succeeded") <= 1, steps
        intents = await http.get("/fake/payments/intents", params={"reference": order["id"]})
        assert [i["id"] for i in intents.json()] == [view["result"]["intent_id"]]
        assert view["input"] == {"order_id": order["id"], "amount_cents": 3600, "currency": "EUR"}


async def test_an_order_the_shop_refuses_after_the_start_leaves_nothing(
    shop: LiveServer,
) -> None:
    async with httpx.AsyncClient(base_url=shop.base_url, timeout=30) as http:
        before = await payments(http)
        refused = await http.post("/orders", json={"sku": "tea", "quantity": 11})
        assert refused.status_code == 422, refused.text
        order_id = refused.json()["detail"]["orderId"]

        assert await payments(http) == before
        assert (await http.get(f"/orders/{order_id}")).status_code == 404
        intents = await http.get("/fake/payments/intents", params={"reference": order_id})
        assert intents.json() == []
        unknown = await http.post("/orders", json={"sku": "cake", "quantity": 1})
        assert unknown.status_code == 422 and await payments(http) == before


async def test_one_openapi_document_and_a_wrong_signature_stores_nothing(
    shop: LiveServer,
) -> None:
    async with httpx.AsyncClient(base_url=shop.base_url, timeout=30) as http:
        paths = (await http.get("/openapi.json")).json()["paths"]
        assert {"/orders", "/orders/{order_id}", "/fake/payments/intents"} <= set(paths)
        webhook = paths[f"/flowpark{WEBHOOK_PATH}"]["post"]
        assert webhook["tags"][0].startswith("flowpark: ")

        body = json.dumps(
            {"id": "evt_x", "type": "payment_intent.succeeded", "data": {"object": {"id": "pi_x"}}}
        ).encode()
        stamp = str(int(time.time()))
        wrong = hmac.new(b"not the secret", f"{stamp}.".encode() + body, hashlib.sha256)
        signed = hmac.new(TRIAL_SECRET.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
        headers = {"Content-Type": "application/json"}
        answer = await http.post(
            f"/flowpark{WEBHOOK_PATH}",
            content=body,
            headers={**headers, "Stripe-Signature": f"t={stamp},v1={wrong.hexdigest()}"},
        )
        assert answer.status_code == 401 and answer.json()["code"] == "signature_invalid"
        # signed, but no live instance recorded that intent
        answer = await http.post(
            f"/flowpark{WEBHOOK_PATH}",
            content=body,
            headers={**headers, "Stripe-Signature": f"t={stamp},v1={signed.hexdigest()}"},
        )
        assert answer.status_code == 404 and answer.json()["code"] == "correlation_key_unknown"
