"""A signal still waiting untaken when its instance ends is marked discarded, with the
reason, in the same write that ends the instance (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from flowpark.engine.records import InstanceState
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Status, poll_flow
from tests.postgres.nodes import Held
from tests.support.harness import sql_of


async def test_a_signal_waiting_when_the_instance_fails_is_discarded(sql_store_url: str) -> None:
    held = Held(RuntimeError("provider down"))
    subs = {
        "t.start": Scripted(held),
        "t.undo": Scripted(None),
        "t.check": Scripted(Status(done=False)),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }
    async with FlowHarness.open(
        [poll_flow()], database_url=sql_store_url, migrate=False, substitutes=subs
    ) as h:
        start = asyncio.create_task(h.start("t.poll", {"order_id": "o-1"}))
        await asyncio.wait_for(held.entered.wait(), 10)
        async with sql_of(h).engine.connect() as conn:
            (instance_id,) = (await conn.execute(text("SELECT id FROM flow_instance"))).scalars()
        # the signal arrives while the first step runs: stored, waiting for the poll
        delivery = await h.engine.deliver(str(instance_id), "t.ready", {"job_id": "j"})
        assert delivery.created and delivery.signal.taken_at is None
        held.release.set()
        answer = await asyncio.wait_for(start, 10)
        assert answer.instance.state is InstanceState.FAILED  # the poll was never reached

        (signal,) = await h.store.reads.list_signals(answer.instance.id)
        assert signal.taken_at is None
        assert signal.discarded_reason == "instance_failed"
        assert signal.discarded_at == (await h.instance(answer.instance.id)).updated_at
