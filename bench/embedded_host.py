"""``python -m bench.embedded_host --port P``: the shop-like host of ``python -m bench
embedded``, under uvicorn (flowpark's bounded protocol) on a socket bound with
``IPPROTO_TCP`` (see :mod:`bench.serve`); flowpark's settings from ``FLOWPARK_*``.

A team's FastAPI app with its own table (``bench_order``) and flowpark included at
``/flowpark``, serving ``bench.order`` (it parks at once on a signal, so a start costs its
write and its park, and calls nothing). Routes:

* ``POST /flowpark/api/v1/orders``: flowpark's HTTP start (bearer token, ``Idempotency-Key``);
* ``POST /local/{key}``: the host's route starting in-process (``client.start``);
* ``POST /tx/{key}``: the host's route writing its order row and the start in one
  transaction (``session=``);
* ``POST /order-only/{key}``: the same transaction without the start (the host's own cost);
* ``POST /bare``: a route that does nothing (the HTTP layer's cost);
* ``GET /bench/statements`` (``POST`` resets): the statements run on the host's own engine,
  by phase of its transactions (see :class:`StatementCount`).
"""

import argparse
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import uvicorn
from fastapi import Depends, FastAPI
from pydantic import BaseModel
from sqlalchemy import Column, MetaData, String, Table, event, insert
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine

from bench.serve import bound_socket
from flowpark import Flow, HttpTrigger, Signal
from flowpark.embedding import Flowpark, LocalClient
from flowpark.runtime.protocol import BoundedHttpToolsProtocol
from flowpark.settings import Settings
from flowpark.store.db import async_url

__all__ = ["FLOW", "StatementCount", "create_host"]

FLOW = "bench.order"
ORDERS = Table(
    "bench_order",
    MetaData(),
    Column("id", String, primary_key=True),
    Column("instance_id", String, nullable=True),
)
#: A statement on one of flowpark's tables (the host's is bench_order).
_FLOWPARK_TABLE = re.compile(r"\bflow_\w+")


class Order(BaseModel):
    order_id: str


class Paid(BaseModel):
    ok: bool = True


@dataclass
class StatementCount:
    """Statements on the host's engine, by where they ran: inside a transaction (and of
    those, flowpark's), after a transaction's commit on its connection before the next
    begin, or outside any; and the transactions begun and committed. ``flowpark_per_tx``
    holds each committed transaction's count of flowpark's statements."""

    in_tx: int = 0
    flowpark_in_tx: int = 0
    after_commit: int = 0
    flowpark_after_commit: int = 0
    outside: int = 0
    begun: int = 0
    committed: int = 0
    flowpark_per_tx: list[int] = field(default_factory=list)

    def watch(self, engine: AsyncEngine) -> None:
        sync = engine.sync_engine

        @event.listens_for(sync, "begin")
        def begin(conn: Connection) -> None:
            conn.info["bench.phase"] = "tx"
            conn.info["bench.flowpark"] = 0
            self.begun += 1

        @event.listens_for(sync, "before_cursor_execute")
        def statement(conn: Connection, cursor: Any, sql: str, *_: Any) -> None:
            phase = conn.info.get("bench.phase")
            ours = bool(_FLOWPARK_TABLE.search(sql))
            if phase == "tx":
                self.in_tx += 1
                if ours:
                    self.flowpark_in_tx += 1
                    conn.info["bench.flowpark"] += 1
            elif phase == "committed":
                self.after_commit += 1
                self.flowpark_after_commit += ours
            else:
                self.outside += 1

        @event.listens_for(sync, "commit")
        def commit(conn: Connection) -> None:
            conn.info["bench.phase"] = "committed"
            self.committed += 1
            self.flowpark_per_tx.append(conn.info.get("bench.flowpark", 0))

        @event.listens_for(sync, "rollback")
        def rollback(conn: Connection) -> None:
            conn.info["bench.phase"] = None

    def summary(self) -> dict[str, Any]:
        counts = asdict(self)
        per_tx = counts.pop("flowpark_per_tx")
        counts["flowpark_per_tx_max"] = max(per_tx, default=0)
        counts["flowpark_per_tx_min"] = min(per_tx, default=0)
        return counts


def create_host(settings: Settings) -> FastAPI:
    fp = Flowpark(
        settings,
        flows=[
            lambda deps: [
                Flow(FLOW, "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/orders"))
                .await_signal(Signal("paid", Paid), timeout="PT1H")
                .returns(lambda bag: {"orderId": bag.input.order_id})
            ]
        ],
    )
    db = create_async_engine(async_url(settings.database_url), pool_size=20, max_overflow=0)
    sessions = async_sessionmaker(db, expire_on_commit=False)
    counts = StatementCount()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with db.begin() as conn:
            await conn.run_sync(ORDERS.metadata.create_all)
        counts.watch(db)  # after the host's own set-up
        yield
        await db.dispose()

    app = FastAPI(title="bench host", lifespan=lifespan)
    fp.include_in(app, prefix="/flowpark")
    Client = Annotated[LocalClient, Depends(fp.get_client)]

    @app.post("/bare")
    async def bare() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/local/{key}")
    async def local(key: str, client: Client) -> dict[str, str]:
        started = await client.start(FLOW, {"order_id": key}, idempotency_key=key)
        return {"instanceId": started.instance_id, "status": started.status}

    @app.post("/tx/{key}")
    async def in_tx(key: str, client: Client) -> dict[str, str]:
        async with sessions() as session, session.begin():
            started = await client.start(
                FLOW, {"order_id": key}, idempotency_key=key, session=session
            )
            await session.execute(insert(ORDERS).values(id=key, instance_id=started.instance_id))
        return {"instanceId": started.instance_id, "status": started.status}

    @app.post("/order-only/{key}")
    async def order_only(key: str) -> dict[str, str]:
        async with sessions() as session, session.begin():
            await session.execute(insert(ORDERS).values(id=key))
        return {"order": key}

    @app.get("/bench/statements")
    async def statements() -> dict[str, Any]:
        return counts.summary()

    @app.post("/bench/statements")
    async def reset() -> dict[str, Any]:
        counts.__dict__.update(StatementCount().__dict__)  # the listeners keep this object
        return counts.summary()

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    os.environ.setdefault("FLOWPARK_GC_FREEZE", "true")  # as flowpark serve runs
    settings = Settings()
    config = uvicorn.Config(
        create_host(settings),
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=BoundedHttpToolsProtocol,
        timeout_keep_alive=settings.keep_alive_seconds,
    )
    uvicorn.Server(config).run(sockets=[bound_socket(args.port)])


if __name__ == "__main__":
    main()
