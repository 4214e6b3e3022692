"""A fake payment provider, served by the shop itself for trials (``/fake/payments``).

It behaves as a card processor's API does, over real HTTP:

* ``POST /intents`` ``{"amountCents", "currency", "reference"}`` with an
  ``Idempotency-Key`` header -> 201 ``{"id": "pi_...", "status": "processing", ...}``; a
  repeat of the key answers the same intent (200) and creates none.
* ``GET /intents/{id}`` -> the intent (``processing`` until it succeeds); 404 when unknown.
* ``GET /intents?reference=...`` -> the intents made for that reference (what a test or
  the demo counts).

An intent succeeds ``succeed_after`` seconds after its creation; the provider then POSTs
the event ``payment_intent.succeeded`` to its one configured webhook URL, signed as Stripe
signs (``Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "t.body">``), and tries
again a few times while the answer is not a 2xx. Intents live in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from fastapi import APIRouter, Header, HTTPException, Response
from pydantic import BaseModel, Field

__all__ = ["FakePaymentProvider", "NewIntent"]

#: The webhook's tries, and the pause between two.
WEBHOOK_TRIES = 5
WEBHOOK_PAUSE_SECONDS = 1.0


class NewIntent(BaseModel):
    """``POST /intents``' body (the provider's own JSON names)."""

    amount_cents: int = Field(alias="amountCents")
    currency: str
    reference: str


class FakePaymentProvider:
    """The fake provider's state and routes (:attr:`router`).

    Args:
        webhook_url: where it sends its events (configured once, as at a real provider).
        secret: the webhook signing secret (flowpark's ``FLOWPARK_SIGNAL_SECRETS``
            entry ``payments`` holds the same).
        succeed_after: seconds from an intent's creation to its success.
    """

    def __init__(self, *, webhook_url: str, secret: str, succeed_after: float = 2.0) -> None:
        self.webhook_url = webhook_url
        self.secret = secret
        self.succeed_after = succeed_after
        self.intents: dict[str, dict[str, Any]] = {}
        self._by_key: dict[str, str] = {}
        self._http: httpx.AsyncClient | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.router = self._routes()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Send webhooks while the block runs (the host's lifespan); pending ones are
        dropped when it ends."""
        async with httpx.AsyncClient(timeout=5.0) as http:
            self._http = http
            try:
                yield
            finally:
                for task in list(self._tasks):
                    task.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                self._http = None

    def _routes(self) -> APIRouter:
        router = APIRouter()

        @router.post("/intents", status_code=201)
        async def create_intent(
            new: NewIntent, response: Response, idempotency_key: str = Header()
        ) -> dict[str, Any]:
            """Create a payment intent (a repeated ``Idempotency-Key`` answers the first)."""
            if idempotency_key in self._by_key:
                response.status_code = 200
                return self._view(self._by_key[idempotency_key])
            intent_id = f"pi_{uuid.uuid4().hex[:16]}"
            self.intents[intent_id] = {
                "id": intent_id,
                "amountCents": new.amount_cents,
                "currency": new.currency,
                "reference": new.reference,
                "createdAt": time.time(),
            }
            self._by_key[idempotency_key] = intent_id
            task = asyncio.ensure_future(self._succeed_later(intent_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return self._view(intent_id)

        @router.get("/intents")
        async def list_intents(reference: str | None = None) -> list[dict[str, Any]]:
            """The intents, or those made for ``reference``."""
            return [
                self._view(i)
                for i, intent in self.intents.items()
                if reference is None or intent["reference"] == reference
            ]

        @router.get("/intents/{intent_id}")
        async def read_intent(intent_id: str) -> dict[str, Any]:
            """One intent."""
            if intent_id not in self.intents:
                raise HTTPException(404, f"no intent {intent_id}")
            return self._view(intent_id)

        return router

    def _view(self, intent_id: str) -> dict[str, Any]:
        intent = self.intents[intent_id]
        done = time.time() >= intent["createdAt"] + self.succeed_after
        return {
            **{k: v for k, v in intent.items() if k != "createdAt"},
            "status": "succeeded" if done else "processing",
        }

    async def _succeed_later(self, intent_id: str) -> None:
        await asyncio.sleep(self.succeed_after)
        event = {
            "id": f"evt_{uuid.uuid4().hex[:16]}",
            "type": "payment_intent.succeeded",
            "data": {"object": self._view(intent_id)},
        }
        body = json.dumps(event).encode()
        for _ in range(WEBHOOK_TRIES):
            if self._http is None:
                return
            stamp = str(int(time.time()))
            mac = hmac.new(self.secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256)
            headers = {
                "Content-Type": "application/json",
                "Stripe-Signature": f"t={stamp},v1={mac.hexdigest()}",
            }
            try:
                answer = await self._http.post(self.webhook_url, content=body, headers=headers)
                if answer.is_success:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(WEBHOOK_PAUSE_SECONDS)
