"""Where the console puts a timed-out instance: the flow graph counts it at the step its page
names (the on_timeout block's fail step, not the escalation before it), on every store; and
the Waiting panel says what happens when a parked poll's budget runs out."""

from __future__ import annotations

from datetime import timedelta

from flowpark.api.views import failed_step
from flowpark.engine.records import InstanceState
from flowpark.flows.plan import FailStep
from flowpark.testing import FlowHarness, Scripted
from flowpark.ui.instances import budget_outcome
from tests.engine.flows import Job, Status, poll_flow

SUBS = {
    "t.start": Scripted(Job(job_id="j")),
    "t.check": Scripted(Status(done=False)),
    "t.undo": Scripted(None),
    "t.escalate": Scripted(None),
    "t.after": Scripted(None),
}


async def test_the_graph_counts_a_timed_out_instance_at_its_fail_step(store_url: str) -> None:
    flow = poll_flow(on_timeout="fail")  # escalate, then fail t.not_done
    async with FlowHarness.open(
        [flow], database_url=store_url, migrate=False, substitutes=SUBS
    ) as h:
        inst = (await h.start("t.poll", {}, version="1.0.0")).instance
        plan = h.engine.catalog.find("t.poll", "1.0.0")
        assert plan is not None
        parked = await h.instance(inst.id)
        said = budget_outcome(plan, parked)
        assert said is not None
        assert "on_timeout block runs (t.escalate)" in said and "fails with t.not_done" in said
        since = h.clock.now()
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert budget_outcome(plan, final) is None
        page = failed_step(plan, final, (await h.snapshot(inst.id)).steps)
        assert page is not None and isinstance(plan.steps[page.step_id], FailStep)
        activity = await h.store.overview.step_activity(
            "t.poll", "1.0.0", since - timedelta(seconds=1)
        )
        assert activity.failed == {page.step_id: 1}  # the 2.0.0 instance is another version
