"""``EngineConfig.start_wait``: a start answers ``running`` once it passed (engine clock)
without a park or an end; the run goes on and parks."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from flowpark.engine.node.engine import EngineConfig
from flowpark.engine.records import InstanceState
from flowpark.testing import FlowHarness
from tests.engine.flows import Status
from tests.postgres.nodes import Held, slow_flow, slow_subs


async def test_a_start_answers_running_after_start_wait_and_the_run_goes_on(
    store_url: str | None,
) -> None:
    held = Held(Status(done=False))
    async with FlowHarness.open(
        [slow_flow()],
        database_url=store_url,
        migrate=False,
        substitutes=slow_subs(held),
        config=EngineConfig(node_id="n1", start_wait=timedelta(seconds=2)),
    ) as h:
        start = asyncio.create_task(h.start("t.slow", {"order_id": "o-1"}))
        await asyncio.wait_for(held.entered.wait(), 10)
        h.clock.advance(timedelta(seconds=1))
        await asyncio.sleep(0)
        assert not start.done()  # 1 s: still waiting for a park
        h.clock.advance(timedelta(seconds=1))
        answer = await asyncio.wait_for(start, 10)
        assert answer.created
        assert answer.instance.state is InstanceState.RUNNING
        assert not held.cancelled

        held.release.set()
        await h.engine.drain()
        inst = await h.instance(answer.instance.id)
        assert inst.state is InstanceState.SUSPENDED  # attempt 0 committed, parked
        assert await h.calls(inst.id, "t.slow") == 1
