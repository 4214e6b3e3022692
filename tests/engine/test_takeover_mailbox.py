"""A node that takes over a dead node's instance (its lease ran out) says so in its log, and a
poll it resumes asks the mailbox before it calls again: a signal that arrived while the dead
node's lease ran out ends the wait first, with no further call of the poll's body."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowpark.engine.ports import TryMark
from flowpark.engine.records import InstanceState, StepKind
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, poll_flow


async def test_a_takeover_takes_the_waiting_signal_before_calling_again(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    check = Scripted(Status(done=True))  # a call now would satisfy the poll
    subs = {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": Scripted(Status(done=False), Status(done=True)),
    }
    subs["t.check"] = check
    check.outcomes = [Status(done=False), Status(done=True)]
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        inst = (await h.start("t.poll", {"order_id": "o-1"})).instance
        assert check.calls == 1 and inst.wake_at is not None
        h.clock.set(inst.wake_at)
        # a node claims the due attempt, then dies before it calls
        dead = await h.store.runs.claim(
            inst.id, "dead-node", h.clock.now(), h.clock.now() + timedelta(seconds=30)
        )
        assert dead is not None
        mark = TryMark(2, 1, 1, h.clock.now())  # its call of attempt 1 is in flight
        lease = h.clock.now() + timedelta(seconds=30)
        await h.store.runs.start_try(inst.id, dead.fencing_token, mark, lease)
        h.clock.advance(timedelta(seconds=5))
        delivered = await h.engine.deliver(inst.id, "t.ready", {"job_id": "j"})
        assert (delivered.created, delivered.signal.taken_at) == (True, None)
        h.clock.advance(timedelta(seconds=30))  # its lease ran out
        caplog.set_level("INFO", logger="flowpark.engine")
        report = await h.sweep()
        assert report.claimed == 1
        final = await h.instance(inst.id)
        assert final.state is InstanceState.COMPLETED
        assert check.calls == 1  # the signal ended the wait: no call of t.check again
        rows = (await h.snapshot(inst.id)).steps
        assert [(r.step_id, r.kind) for r in rows if r.kind is StepKind.SIGNAL] == [
            (1, StepKind.SIGNAL)
        ]
        [signal] = await h.store.reads.list_signals(inst.id)
        assert signal.taken_at is not None and signal.discarded_at is None
        taken_over = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
        assert len(taken_over) == 1 and inst.id in taken_over[0], caplog.text
