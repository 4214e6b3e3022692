"""The shop: a team's own FastAPI service with flowpark embedded in it.

Its routes, table, lifespan and settings are the shop's; flowpark is included at
``/flowpark`` (its API, and the provider webhook its payment flow waits for), and the shop's
handlers call it in-process. ``POST /orders`` writes the order and starts its payment in
**one transaction**: an order the shop refuses leaves no payment behind, and a payment
exists only for a saved order.

Run it on a migrated database (``flowpark db upgrade`` on ``FLOWPARK_DATABASE_URL``; the
shop creates its own table)::

    uvicorn flowpark.samples.shop.app:app          # or --factory ...shop.app:create_app

or ``flowpark demo --embedded``. Routes: ``POST /orders`` ``{"sku", "quantity"}``,
``GET /orders/{id}``, the fake payment provider under ``/fake/payments``, flowpark under
``/flowpark`` (``/docs`` lists them all).
"""

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.exc import IntegrityError

from flowpark.embedding import Flowpark, LocalClient
from flowpark.samples.shop.fake_provider import FakePaymentProvider
from flowpark.samples.shop.orders import Order, OrderBook
from flowpark.samples.shop.payments import PROVIDER, WEBHOOK_PATH, PaymentRequest, payment_flows
from flowpark.settings import Settings

__all__ = ["PRICES", "OrderView", "PaymentView", "ShopSettings", "app", "create_app"]

#: The shop's price list, in cents (put on ``app.state`` by its lifespan).
PRICES = {"tea": 450, "coffee": 700, "mug": 1200}
#: The provider's signing secret when ``FLOWPARK_SIGNAL_SECRETS`` names none (a trial).
TRIAL_SECRET = "whsec_shop-trial-secret"


class ShopSettings(BaseSettings):
    """The shop's own settings, from ``SHOP_*`` (flowpark's, the database's URL among
    them, from ``FLOWPARK_*``)."""

    model_config = SettingsConfigDict(env_prefix="SHOP_", extra="ignore")

    base_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Where the shop is reached (the provider's webhook goes to it).",
    )
    payments_url: str | None = Field(
        default=None,
        description="The payment provider's API; default: the fake one the shop serves.",
    )
    fake_payment_seconds: float = Field(
        default=2.0, ge=0, description="Seconds the fake provider takes to take a payment."
    )


class NewOrder(BaseModel):
    """``POST /orders``' body."""

    sku: str
    quantity: int


class PaymentView(BaseModel):
    """An order's payment, as flowpark tells it (the in-process client's ``get``)."""

    instance_id: str
    state: str
    awaiting: list[str] = []  # the signals that would end its wait now
    next_check_at: datetime | None = None  # its next status check, while it waits
    error: str | None = None


class OrderView(BaseModel):
    """An order, with its payment."""

    id: str
    sku: str
    quantity: int
    amount_cents: int
    status: str
    payment: PaymentView | None = None


def _view(order: Order, payment: PaymentView | None) -> OrderView:
    return OrderView(**order.model_dump(exclude={"payment_instance_id"}), payment=payment)


def with_payments_secret(settings: Settings) -> Settings:
    """``settings`` with a signing secret for the provider's webhook: its own
    (``FLOWPARK_SIGNAL_SECRETS='{"payments": "whsec_..."}'``), else the trial one."""
    if PROVIDER in settings.signal_secrets:
        return settings
    secrets = {**settings.signal_secrets, PROVIDER: SecretStr(TRIAL_SECRET)}
    return settings.model_copy(update={"signal_secrets": secrets})


def create_app(
    settings: ShopSettings | None = None, flowpark_settings: Settings | None = None
) -> FastAPI:
    """The shop application.

    Args:
        settings: the shop's settings (default: from ``SHOP_*``).
        flowpark_settings: flowpark's (default: from ``FLOWPARK_*``); its
            ``database_url`` is the shop's database too.

    Returns:
        The FastAPI app, flowpark included at ``/flowpark``.
    """
    shop = settings or ShopSettings()
    fp_settings = with_payments_secret(flowpark_settings or Settings())
    orders = OrderBook(fp_settings.database_url)
    provider = FakePaymentProvider(
        webhook_url=f"{shop.base_url}/flowpark{WEBHOOK_PATH}",
        secret=fp_settings.signal_secrets[PROVIDER].get_secret_value(),
        succeed_after=shop.fake_payment_seconds,
    )
    payments_url = shop.payments_url or f"{shop.base_url}/fake/payments"
    fp = Flowpark(fp_settings, flows=[payment_flows(orders, payments_url)])

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await orders.open()  # the shop's engine, and its table
        app.state.prices = dict(PRICES)
        try:
            async with provider.running():
                yield  # flowpark runs inside this: started after, stopped before
        finally:
            await orders.close()

    app = FastAPI(title="shop", lifespan=lifespan)
    app.include_router(provider.router, prefix="/fake/payments", tags=["fake payment provider"])
    fp.include_in(app, prefix="/flowpark")
    Client = Annotated[LocalClient, Depends(fp.get_client)]

    @app.post("/orders", status_code=201, tags=["orders"])
    async def create_order(new: NewOrder, request: Request, client: Client) -> OrderView:
        """Save an order and start its payment, in one transaction: both or neither. An
        order the shop's table refuses (more than 10 of an item) is 422, and no payment
        was started for it."""
        price = request.app.state.prices.get(new.sku)
        if price is None:
            raise HTTPException(422, f"no item {new.sku!r}; items: {', '.join(PRICES)}")
        order = Order(
            id=f"o-{uuid.uuid4().hex[:12]}",
            sku=new.sku,
            quantity=new.quantity,
            amount_cents=price * new.quantity,
        )
        payment = PaymentRequest(order_id=order.id, amount_cents=order.amount_cents)
        try:
            async with orders.session() as session, session.begin():
                started = await client.start(
                    "payment.await", payment, idempotency_key=order.id, session=session
                )
                order.payment_instance_id = started.instance_id
                session.add(order)
                await session.flush()  # the table's own rules (its CHECK) are checked here
        except IntegrityError:  # rolled back: the order and its payment's start
            detail = {"orderId": order.id, "problem": "1 to 10 of an item", "saved": False}
            raise HTTPException(422, detail) from None
        return _view(order, PaymentView(instance_id=started.instance_id, state=started.status))

    @app.get("/orders/{order_id}", tags=["orders"])
    async def read_order(order_id: str, client: Client) -> OrderView:
        """The order, from the shop's table, and its payment's state, from flowpark."""
        order = await orders.get(order_id)
        if order is None:
            raise HTTPException(404, f"no order {order_id}")
        if order.payment_instance_id is None:
            return _view(order, None)
        seen = await client.get(order.payment_instance_id)
        payment = PaymentView(
            instance_id=seen.instance_id,
            state=seen.state,
            awaiting=[waited.signal for waited in seen.awaiting or []],
            next_check_at=seen.wake_at,
            error=seen.error.code if seen.error else None,
        )
        return _view(order, payment)

    return app


app = create_app()
