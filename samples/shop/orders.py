"""The shop's own table, ``shop_order``, and the shop's own engine on it.

The table is the shop's, not flowpark's: it lives on a ``MetaData`` of the shop's own (a
SQLModel ``registry`` of its own), so the shop's ``create_all`` (or its Alembic
autogenerate) never sees flowpark's tables, and flowpark's migrations never see the shop's.
It is in the same database as flowpark's tables (``FLOWPARK_DATABASE_URL``): that is what
lets a route write an order and start its payment in one transaction.
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, update
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel, col

__all__ = ["Order", "OrderBook", "ShopTable", "async_driver_url"]


class ShopTable(SQLModel, registry=registry()):
    """The base of the shop's tables: their own ``MetaData`` (``ShopTable.metadata``)."""


class Order(ShopTable, table=True):
    """An order. ``status``: ``awaiting_payment``, then ``paid``, ``payment_failed`` or
    ``payment_expired`` (written by the payment flow's last step)."""

    __tablename__ = "shop_order"
    # the shop's own rule, checked by its database: 1 to 10 of an item per order
    __table_args__ = (CheckConstraint("quantity BETWEEN 1 AND 10", name="shop_order_quantity"),)

    id: str = Field(primary_key=True)
    sku: str
    quantity: int
    amount_cents: int
    status: str = "awaiting_payment"
    payment_instance_id: str | None = None


def async_driver_url(url: str) -> str:
    """``url`` (``sqlite:///shop.db``, ``postgresql://...``) with an asyncio driver
    (aiosqlite, psycopg 3), as the shop's engine needs it.

    Raises:
        ValueError: neither SQLite nor PostgreSQL.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    raise ValueError(f"the shop runs on SQLite or PostgreSQL, not {backend!r}")


class OrderBook:
    """The shop's access to its orders, through an engine of its own (opened by the shop's
    lifespan, closed after flowpark stopped).

    Args:
        database_url: the shared database (flowpark's ``database_url``).
    """

    def __init__(self, database_url: str) -> None:
        self.url = async_driver_url(database_url)
        self._engine: AsyncEngine | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The shop's engine.

        Raises:
            RuntimeError: the shop has not started (its lifespan opens it).
        """
        if self._engine is None:
            raise RuntimeError("the order book is not open: the shop's lifespan opens it")
        return self._engine

    async def open(self) -> None:
        """Open the engine and create the shop's table if it is missing."""
        self._engine = create_async_engine(self.url)
        async with self._engine.begin() as conn:
            await conn.run_sync(ShopTable.metadata.create_all)

    async def close(self) -> None:
        """Close the engine's connections."""
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    def session(self) -> AsyncSession:
        """A new session on the shop's engine (the caller begins and ends its transaction)."""
        return AsyncSession(self.engine, expire_on_commit=False)

    async def get(self, order_id: str) -> Order | None:
        """The order ``order_id``, or None."""
        async with self.session() as session:
            return await session.get(Order, order_id)

    async def set_status(self, order_id: str, status: str) -> None:
        """Set an order's status (the same write twice changes nothing: a retried step may
        call it again)."""
        async with self.engine.begin() as conn:
            await conn.execute(update(Order).where(col(Order.id) == order_id).values(status=status))
