"""Cancel racing completion: exactly one final state, and the answer agrees with it."""

from __future__ import annotations

import asyncio

from flowpark.engine.records import InstanceState, StepKind
from flowpark.errors import InstanceEnded
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, poll_flow
from tests.support.journal import wake_at


async def test_cancel_racing_completion_ends_in_one_state_the_answer_agrees_with(
    store_url: str | None,
) -> None:
    undo = Scripted(None)
    subs = {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": Scripted(Status(done=True)),
        "t.undo": undo,
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }
    flow = poll_flow()
    outcomes: list[tuple[str, InstanceState]] = []
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        # park each instance before its check by making attempt 0 "not yet"
        subs["t.check"].outcomes = [Status(done=False)]
        ids = [(await h.start("t.poll", {"order_id": f"o-{i}"})).instance.id for i in range(6)]
        subs["t.check"].outcomes = [Status(done=True)]
        h.clock.set(max([wake_at(await h.instance(i)) for i in ids]))
        canceller = h.with_engine(node_id="api-node")
        sweeper = h.with_engine(node_id="sweep-node")

        async def cancel(instance_id: str) -> None:
            try:
                answer = await canceller.cancel(instance_id)
                outcomes.append((instance_id, answer.state))
            except InstanceEnded:
                outcomes.append((instance_id, InstanceState.COMPLETED))

        await asyncio.gather(sweeper.sweep(), *(cancel(i) for i in ids))
        await h.sweep()  # a cancel flagged on a held instance is unwound by its holder
        undone = 0
        for instance_id, answered in outcomes:
            final = await h.instance(instance_id)
            assert final.state.ended
            if answered is InstanceState.COMPLETED:  # 409 instance_ended: completion won
                assert final.state is InstanceState.COMPLETED
            else:  # the cancel was accepted: it must win
                assert final.state is InstanceState.CANCELLED
                undone += 1
            comp = await h.calls(instance_id, "t.undo", StepKind.COMPENSATION)
            assert comp == (1 if final.state is InstanceState.CANCELLED else 0)
        assert undo.calls == undone
