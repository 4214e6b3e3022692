"""A host application for the embedding tests: a team's FastAPI service with its own
lifespan, state, tables, routes and exception handler, with flowpark included.

Its flow ``order.charge`` charges an order at a fake payment provider the host serves
itself (``POST /fake/charge``), reached over real HTTP with httpx; the provider records
every charge in the host's own table ``test_charge`` (so the calls are counted across
processes, and a process killed mid-way loses none of the record). Routes:

* ``GET /hello``: the host's lifespan state (``app.state`` and the yielded state).
* ``POST /orders/{order_id}``: an order row and the flow's start in one ``AsyncSession``
  transaction; ``?fail=1`` raises after the start (the transaction rolls back, 422);
  ``?die=1`` kills the process right after the commit (SIGKILL); ``?other=1`` starts in a
  session of another database (422 ``transaction_not_shared``).
* ``POST /sync-orders/{order_id}``: the same in a blocking ``Session`` (a ``def`` route).
* ``GET /charges/{order_id}``: how many charges the provider took for the order (calls
  under one idempotency key are one charge, as a real provider counts them).

``create_host(settings)`` builds it; ``create_host_from_env()`` (a uvicorn factory) reads
``FLOWPARK_*`` for the settings.
"""

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import httpx
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import (
    Column,
    DateTime,
    Integer,
    MetaData,
    String,
    Table,
    distinct,
    func,
    insert,
    select,
)
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session

from flowpark import Capability, Deps, Flow, StepContext
from flowpark.client.errors import InvalidRequest
from flowpark.embedding import Flowpark, LocalClient
from flowpark.settings import Settings
from flowpark.store.db import async_url, sync_url

__all__ = ["create_host", "create_host_from_env"]

host_metadata = MetaData()
ORDERS = Table(
    "test_order",
    host_metadata,
    Column("id", String, primary_key=True),
    Column("instance_id", String, nullable=True),
)
CHARGES = Table(
    "test_charge",
    host_metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("order_id", String, nullable=False),
    Column("key", String, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
)
# a team's own tables with the names flowpark's once had: they must not collide
OUTBOX = Table("outbox_event", host_metadata, Column("id", String, primary_key=True))


class Order(BaseModel):
    """The flow's input."""

    order_id: str


class Charge(Capability):
    """Charge the order at the fake provider, over HTTP, keyed by the execution key."""

    id = "payment.charge"
    idempotent = True

    def __init__(self, http: httpx.AsyncClient, base_url: str) -> None:
        self.http = http
        self.base_url = base_url

    async def execute(self, ctx: StepContext) -> None:
        """Ask the provider to charge the order (its idempotency key: the execution key)."""
        answer = await self.http.post(
            f"{self.base_url}/fake/charge",
            json={"orderId": ctx.input.order_id, "key": ctx.execution_key},
            timeout=10.0,
        )
        answer.raise_for_status()


class Slow(Capability):
    """A call that does not end within any shutdown grace (a shutdown cuts it off)."""

    id = "test.slow"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        """Wait for an event nobody sets."""
        await asyncio.Event().wait()


def flows(deps: Deps) -> list[Flow]:
    """The host's flows: ``order.charge`` and ``test.slow``."""
    base = deps.settings.self_url
    return [
        Flow("order.charge", "1.0.0", input=Order).step(Charge(deps.http, base)),
        Flow("test.slow", "1.0.0", input=Order).step(Slow()),
    ]


def create_host(settings: Settings) -> FastAPI:
    """The host application, with flowpark on ``settings`` included at ``/flowpark``."""
    fp = Flowpark(settings, flows=[flows])
    db = create_async_engine(async_url(settings.database_url))
    sync_db = create_sync_engine(sync_url(settings.database_url))
    sessions = async_sessionmaker(db, expire_on_commit=False)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with db.begin() as conn:
            await conn.run_sync(host_metadata.create_all)
        app.state.greeting = "from the host's app.state"
        yield {"lifespan_value": "from the host's lifespan"}
        await db.dispose()
        sync_db.dispose()

    app = FastAPI(title="a team's service", lifespan=lifespan)
    fp.include_in(app, prefix="/flowpark")
    app.state.flowpark = fp
    Client = Annotated[LocalClient, Depends(fp.get_client)]

    @app.exception_handler(ValueError)
    async def teapot(request: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"host": str(exc)}, status_code=418)

    @app.get("/hello")
    async def hello(request: Request) -> dict[str, Any]:
        return {"state": request.app.state.greeting, "lifespan": request.state.lifespan_value}

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError("the host's own handler")

    @app.post("/orders/{order_id}")
    async def order(
        order_id: str, client: Client, fail: bool = False, die: bool = False, other: bool = False
    ) -> JSONResponse:
        if other:
            elsewhere = create_async_engine("sqlite+aiosqlite:///:memory:")
            try:
                async with AsyncSession(elsewhere) as s, s.begin():
                    await client.start("order.charge", {"order_id": order_id}, session=s)
            except InvalidRequest as exc:
                return JSONResponse({"code": exc.code}, status_code=422)
            finally:
                await elsewhere.dispose()
        try:
            async with sessions() as s, s.begin():
                await s.execute(insert(ORDERS).values(id=order_id))
                started = await client.start(
                    "order.charge", {"order_id": order_id}, idempotency_key=order_id, session=s
                )
                if fail:
                    raise RuntimeError("the order could not be saved")
        except RuntimeError:
            return JSONResponse({"rolledBack": True}, status_code=422)
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        return JSONResponse({"instanceId": started.instance_id, "status": started.status})

    @app.post("/sync-orders/{order_id}")
    def sync_order(order_id: str, client: Client) -> dict[str, str]:
        with Session(sync_db) as s, s.begin():
            s.execute(insert(ORDERS).values(id=order_id))
            started = client.start_sync("order.charge", {"order_id": order_id}, session=s)
        return {"instanceId": started.instance_id}

    @app.post("/slow/{order_id}")
    async def slow(order_id: str, client: Client) -> dict[str, str]:
        started = await client.start("test.slow", {"order_id": order_id})
        return {"instanceId": started.instance_id, "status": started.status}

    @app.post("/fake/charge")
    async def fake_charge(body: dict[str, Any]) -> dict[str, bool]:
        async with db.begin() as conn:
            await conn.execute(
                insert(CHARGES).values(
                    order_id=body["orderId"], key=body["key"], at=datetime.now(UTC)
                )
            )
        return {"charged": True}

    @app.get("/charges/{order_id}")
    async def charges(order_id: str) -> dict[str, int]:
        async with db.connect() as conn:
            count = (
                await conn.execute(
                    select(func.count(distinct(CHARGES.c.key))).where(
                        CHARGES.c.order_id == order_id
                    )
                )
            ).scalar_one()
        return {"charges": int(count)}

    return app


def create_host_from_env() -> FastAPI:
    """:func:`create_host` on the settings ``FLOWPARK_*`` give (a uvicorn factory)."""
    return create_host(Settings())
