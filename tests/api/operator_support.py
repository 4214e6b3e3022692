"""A flowpark server over a harness's store and virtual clock, for the operator API tests.

The harness (production engine, real store, virtual clock) puts instances in every
situation an operator looks for; the server (a real uvicorn on loopback, sweeper off)
serves the API over the same database and reads the same clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from fastapi import FastAPI

from flowpark.engine.records import NewInstance
from flowpark.flows import Flow
from flowpark.runtime.app import create_app
from flowpark.settings import Settings
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, await_flow, poll_flow
from tests.support.server import LiveServer, live_server

__all__ = ["FAILING", "Operated", "flows", "operated", "provider"]

#: an order id starting with this makes the first try of each t.check attempt fail
FAILING = "fail-"


def _check(ctx: Any) -> Any:
    if ctx.input.order_id.startswith(FAILING) and ctx.try_number == 1:
        raise RuntimeError("provider answered 503")
    return Status(done=False)


def provider() -> dict[str, Scripted]:
    """Stand-ins for the test flows' capabilities: t.check is never done (its first try
    fails for orders whose id starts with :data:`FAILING`)."""
    return {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": Scripted(_check),
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }


def flows() -> list[Flow]:
    """t.poll 1.0.0 (minute interval, 10 min budget, retrying check), t.poll 2.0.0 (a
    30 s deadline: it parks until the deadline), t.poll 3.0.0 (a 12 min deadline), t.await
    1.0.0."""
    return [
        poll_flow(retry=True),
        poll_flow(retry=True, version="2.0.0", deadline=timedelta(seconds=30)),
        poll_flow(retry=True, version="3.0.0", deadline=timedelta(minutes=12)),
        await_flow(),
    ]


@dataclass
class Operated:
    """The harness and the server on one store."""

    h: FlowHarness
    server: LiveServer

    def client(self, token: str | None = None) -> httpx.AsyncClient:
        return self.server.client(token=token or self.server.token)

    async def stuck(self, flow: str = "t.poll", version: str = "1.0.0") -> str:
        """An instance left running by a node that died: its lease expired a second ago."""
        now = self.h.clock.now()
        new = NewInstance(
            id=self.h.engine.new_id(),
            flow_name=flow,
            flow_version=version,
            input={"order_id": "o-stuck"},
            created_at=now,
            deadline_at=None,
            lease_owner="dead-node",
            lease_expires_at=now - timedelta(seconds=1),
        )
        record, _ = await self.h.store.intake.create_instance(new)
        return record.id


@asynccontextmanager
async def operated(
    store_url: str,
    flow_list: Iterable[Flow] | None = None,
    substitutes: dict[str, Scripted] | None = None,
    **settings: Any,
) -> AsyncIterator[Operated]:
    """A harness on ``store_url`` (migrated) and a server over it sharing its clock
    (``substitutes``: stand-ins over :func:`provider`'s)."""
    chosen = list(flow_list) if flow_list is not None else flows()
    subs = {**provider(), **(substitutes or {})}
    async with FlowHarness.open(
        chosen, database_url=store_url, migrate=False, substitutes=subs
    ) as h:

        def factory(s: Settings) -> FastAPI:
            return create_app(s, clock=h.clock, flows=[lambda _deps: chosen])

        with live_server(store_url, app_factory=factory, run_sweeper=False, **settings) as srv:
            yield Operated(h, srv)
