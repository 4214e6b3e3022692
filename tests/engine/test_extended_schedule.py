"""After a budget extension, the schedule shown (each attempt's scheduled instant and
lateness in the instance view, the overview's wake lateness) is capped by the end in force
when each park was asked for, not by the original end: on the virtual clock every attempt
starts exactly when it was scheduled, so every lateness is 0, past the original end too."""

from __future__ import annotations

from datetime import timedelta

from flowpark.api.explain import attempts_view
from flowpark.engine.node.operator import extend_budget
from flowpark.testing import FlowHarness, Scripted
from flowpark.ui.overview import lateness
from tests.engine.flows import Job, Status, poll_flow


async def test_attempts_past_the_original_end_are_on_time(store_url: str) -> None:
    subs = {"t.start": Scripted(Job(job_id="j")), "t.check": Scripted(Status(done=False))}
    flow = poll_flow(on_timeout="none", signal=False)  # every minute, 10 min budget
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=subs
    ) as h:
        inst = (await h.start("t.poll", {})).instance
        entered = h.clock.now()
        for _ in range(4):
            await h.advance_to_next_wake(inst.id)
        await extend_budget(h.engine, inst.id, timedelta(minutes=10))
        await h.wait_until(lambda i: i.state.ended, inst.id)
        assert h.clock.now() == entered + timedelta(minutes=20)

        snap = await h.snapshot(inst.id)
        attempts = attempts_view(
            h.engine.catalog.find("t.poll", "1.0.0"), snap.instance, snap.steps
        )
        assert len(attempts) == 20
        late = {a.attempt: a.lateness_seconds for a in attempts}
        assert set(late.values()) == {0.0}, late  # attempts 10-19 too
        assert attempts[15].scheduled_at == entered + timedelta(minutes=15)

        starts = await h.store.overview.attempt_starts(entered)
        assert len(starts) == 19
        overall, _ = lateness(h.engine.catalog, starts)
        assert (overall.samples, overall.p99) == (19, 0.0)
