"""The poll contract (DESIGN.md "Poll semantics"), on the virtual clock, through the
production engine and a real store: every test runs on SQLite and PostgreSQL (``store_url``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flowpark.engine.records import InstanceState, Outcome, StepKind
from flowpark.flows import Backoff
from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import BUDGET, INTERVAL, Job, Status, poll_flow

ORDER = {"order_id": "o-1"}


def subs(check: Scripted, **more: Scripted) -> dict[str, Scripted]:
    base = {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }
    base.update({k.replace("_", "."): v for k, v in more.items()})
    return base


def not_yet() -> Status:
    return Status(done=False)


async def test_budget_runs_from_attempt_zero_and_the_timeout_path_makes_no_call(
    store_url: str | None,
) -> None:
    check = Scripted(not_yet())
    s = subs(check)
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        t0 = (await h.snapshot(inst.id)).steps[1].started_at
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "t.not_done"
        # attempts at t0, t0+1min, ..., t0+9min; the wake at t0+10min is the budget's end
        assert check.calls == 10
        assert h.clock.now() == t0 + BUDGET
        assert s["t.escalate"].calls == 1
        assert s["t.undo"].calls == 1
        assert s["t.after"].calls == 0
        snap = await h.snapshot(inst.id)
        scopes = [r.scope for r in snap.steps if r.capability_id == "t.check"]
        assert scopes == list(range(10))


async def test_an_on_timeout_block_without_fail_rejoins_the_flow(store_url: str | None) -> None:
    s = subs(Scripted(not_yet()))
    async with FlowHarness.open(
        [poll_flow(on_timeout="rejoin")], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.COMPLETED
        assert final.result == {"done": False}
        assert (s["t.escalate"].calls, s["t.after"].calls, s["t.undo"].calls) == (1, 1, 0)


async def test_a_poll_without_on_timeout_fails_not_satisfied_and_compensates(
    store_url: str | None,
) -> None:
    s = subs(Scripted(not_yet()))
    async with FlowHarness.open(
        [poll_flow(on_timeout="none")], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None
        assert final.failure.code == "flow.poll_not_satisfied"
        assert s["t.undo"].calls == 1
        assert await h.calls(inst.id, "t.undo", StepKind.COMPENSATION) == 1


async def test_a_late_wake_past_the_budget_times_out_without_another_call(
    store_url: str | None,
) -> None:
    check = Scripted(not_yet())
    s = subs(check)
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        await h.advance(timedelta(hours=3))  # the node was paused far past the budget
        final = await h.instance(inst.id)
        assert final.state is InstanceState.FAILED
        assert check.calls == 1
        assert s["t.escalate"].calls == 1


async def test_after_downtime_of_six_intervals_each_due_instance_is_attempted_once(
    store_url: str | None,
) -> None:
    check = Scripted(not_yet())
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=subs(check)
    ) as h:
        ids = [(await h.start("t.poll", {"order_id": f"o-{i}"})).instance.id for i in range(20)]
        assert check.calls == 20
        report = await h.advance(INTERVAL.initial * 6)
        assert report.claimed == 20
        assert check.calls == 40
        for instance_id in ids:
            inst = await h.instance(instance_id)
            assert inst.state is InstanceState.SUSPENDED and inst.wake_scope == 2
            assert inst.wake_at is not None and inst.wake_at > h.clock.now()


async def test_a_delivered_signal_ends_the_wait_with_one_row_and_no_further_attempt(
    store_url: str | None,
) -> None:
    check = Scripted(not_yet())
    s = subs(check)
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        record, created = await h.engine.deliver_signal(
            inst.id, "t.ready", {"job_id": "j"}, "hook-1"
        )
        assert created
        final = await h.instance(inst.id)
        assert final.state is InstanceState.COMPLETED  # now, not at the next attempt
        assert check.calls == 1
        snap = await h.snapshot(inst.id)
        signal_rows = [r for r in snap.steps if r.kind is StepKind.SIGNAL]
        assert [(r.step_id, r.scope, r.capability_id) for r in signal_rows] == [(1, 1, "t.ready")]
        again, created_again = await h.engine.deliver_signal(
            inst.id, "t.ready", {"job_id": "j"}, "hook-1"
        )
        assert not created_again and again.id == record.id


@pytest.mark.parametrize("fails", [1, 3])
async def test_failed_tries_park_durably_between_retries(fails: int, store_url: str | None) -> None:
    boom = [ConnectionError("status endpoint refused")] * fails
    check = Scripted(*boom, Status(done=True))
    s = subs(check)
    async with FlowHarness.open(
        [poll_flow(retry=True)], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        parked = await h.instance(inst.id)
        assert parked.state is InstanceState.SUSPENDED and not await h.holds_lease(inst.id)
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.COMPLETED
        rows = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.check"]
        assert [r.try_number for r in rows] == list(range(1, fails + 2))
        assert all(r.scope == 0 for r in rows)
        gaps = [b.started_at - a.committed_at for a, b in zip(rows, rows[1:], strict=False)]
        assert gaps == [timedelta(seconds=10 * 2**k) for k in range(fails)]


async def test_an_attempt_whose_retries_are_exhausted_fails_the_flow(store_url: str | None) -> None:
    check = Scripted(not_yet(), ConnectionError("refused"))
    s = subs(check)
    async with FlowHarness.open(
        [poll_flow(retry=True)], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "flow.step_failed"
        assert final.failure.details["capability_id"] == "t.check"
        assert final.failure.details["error_type"] == "ConnectionError"
        assert final.failure.details["detail"] == "refused"
        assert check.calls == 1 + 4
        assert s["t.undo"].calls == 1 and s["t.escalate"].calls == 0


async def test_a_budget_that_ends_during_retries_escalates_once_and_compensates_once(
    store_url: str | None,
) -> None:
    check = Scripted(not_yet(), ConnectionError("refused"))
    s = subs(check)
    flow = poll_flow(retry=True, budget=timedelta(seconds=75))
    async with FlowHarness.open([flow], database_url=store_url, migrate=False, substitutes=s) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "t.not_done"
        assert s["t.escalate"].calls == 1 and s["t.undo"].calls == 1
        rows = [r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "t.check"]
        # attempt 0 ok at 0 s; attempt 1 fails at 60 s, retry due 70 s fails, next due 90 s >
        # budget end 75 s: the timeout path runs at 75 s, without retrying the timeout.
        assert [(r.scope, r.outcome) for r in rows] == [
            (0, Outcome.SUCCESS),
            (1, Outcome.FAILURE),
            (1, Outcome.FAILURE),
        ]


async def test_the_deadline_wakes_a_parked_instance_and_fails_it_with_compensation(
    store_url: str | None,
) -> None:
    s = subs(Scripted(not_yet()))
    flow = poll_flow(deadline=timedelta(minutes=5), interval=Backoff.fixed("PT4M"))
    async with FlowHarness.open([flow], database_url=store_url, migrate=False, substitutes=s) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        await h.advance_to_next_wake(inst.id)  # attempt 1 at 4 min; next wake capped at 5 min
        parked = await h.instance(inst.id)
        assert parked.wake_at == parked.deadline_at
        await h.advance_to_next_wake(inst.id)
        final = await h.instance(inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == "flow.deadline_exceeded"
        assert s["t.undo"].calls == 1 and s["t.check"].calls == 2


async def test_any_node_resumes_an_instance_from_its_rows(store_url: str | None) -> None:
    check = Scripted(not_yet(), not_yet(), Status(done=True))
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=subs(check)
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        other = h.with_engine(node_id="node-b")
        h.clock.set((await h.instance(inst.id)).wake_at)  # type: ignore[arg-type]
        await other.sweep()
        h.clock.set((await h.instance(inst.id)).wake_at)  # type: ignore[arg-type]
        report = await other.sweep()
        assert report.advanced == 1
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED
        assert check.calls == 3


async def test_cancel_runs_compensations_once_in_reverse_order(store_url: str | None) -> None:
    order: list[str] = []
    s = subs(Scripted(not_yet()), t_undo=Scripted(lambda ctx: order.append("undo")))
    async with FlowHarness.open(
        [poll_flow()], database_url=store_url, migrate=False, substitutes=s
    ) as h:
        inst = (await h.start("t.poll", ORDER)).instance
        cancelled = await h.engine.cancel(inst.id)
        assert cancelled.state is InstanceState.CANCELLED
        assert order == ["undo"]
        from flowpark.errors import InstanceEnded

        with pytest.raises(InstanceEnded):
            await h.engine.cancel(inst.id)
        assert order == ["undo"]
