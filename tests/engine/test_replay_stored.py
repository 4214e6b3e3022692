"""Replay of stored journals: instances parked by a previous release (``tests/golden/stored``,
recorded by ``python -m tests.golden.record``) are loaded as stored, migrated to head, and
resumed by today's code. The decider's next decision, and what the engine then writes,
must be what the recording release did; a fixture whose plan changed incompatibly must fail
to resume with ``journal_mismatch`` (the instance fails with ``flow.journal_mismatch``)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flowpark.engine.decide.decider import Decider
from flowpark.engine.decide.decisions import (
    BeginEnding,
    Emit,
    Execute,
    Finish,
    MailboxView,
    Record,
    RunDecision,
    Suspend,
    TakeSignal,
)
from flowpark.engine.ports import NewSignal
from flowpark.engine.records import StepKind
from flowpark.errors import JournalMismatch
from flowpark.testing import FlowHarness
from tests.golden.record import observed, resume
from tests.golden.stored import fixture_names, journal_rows, load_fixture, resumed_harness


@pytest.mark.parametrize("name", fixture_names())
async def test_a_stored_journal_resumes_as_recorded(name: str, tmp_path: Path) -> None:
    fixture = load_fixture(name)
    instance_id = fixture["instanceId"]
    async with resumed_harness(fixture, tmp_path) as h:
        before = journal_rows(fixture)
        assert len((await h.snapshot(instance_id)).steps) == before
        await resume(h, instance_id, fixture["resume"])
        await h.engine.drain()
        assert await observed(h, instance_id, before) == fixture["next"]


async def _decide(h: FlowHarness, fixture: dict[str, Any]) -> RunDecision:
    """The decider's first decision on resuming the fixture's instance as recorded."""
    instance_id, how = fixture["instanceId"], fixture["resume"]
    point = datetime.fromisoformat(fixture["point"])
    if how["via"] in ("signal", "webhook"):  # stored first, as a delivery does (a webhook:
        now = point + timedelta(seconds=how["afterSeconds"])  # its payload is the signal's)
        await h.store.mailbox.deliver_signal(
            NewSignal(instance_id, how["name"], how["payload"], None, now, h.engine.new_id())
        )
    snapshot = await h.snapshot(instance_id)
    inst = snapshot.instance
    if how["via"] == "sweep":
        assert inst.wake_at is not None
        now = inst.wake_at
    elif how["via"] in ("wake_now", "takeover"):
        now = point + timedelta(seconds=how["afterSeconds"])
    plan = h.catalog.get(inst.flow_name, inst.flow_version)
    return Decider(plan, inst.input).decide(
        inst,
        snapshot.steps,
        MailboxView(tuple(snapshot.signals), len(snapshot.steps)),
        now,
        woken=how["via"] == "wake_now",
    )


def _recorded_form(decision: RunDecision) -> dict[str, Any]:
    """A decision in the fixture's terms: the row it writes first, or the park or end."""
    if isinstance(decision, Execute):
        return {"row": [decision.step, decision.scope, str(decision.kind), decision.try_number]}
    if isinstance(decision, Emit):  # a wait's budget warning: the emit row at the wait
        return {"row": [decision.step, 0, str(StepKind.EMIT), 1]}
    if isinstance(decision, Record):
        row = decision.row
        return {"row": [row.step_id, row.scope, str(row.kind), row.try_number]}
    if isinstance(decision, TakeSignal):
        return {"row": [decision.step, decision.row.scope, str(StepKind.SIGNAL), 1]}
    if isinstance(decision, BeginEnding):
        failure = decision.failure.code if decision.failure else None
        return {"ending": [str(decision.ending), failure]}
    if isinstance(decision, Finish):
        return {"ending": [str(decision.state), None]}
    assert isinstance(decision, Suspend), decision
    return {"park": [decision.step, decision.scope, str(decision.kind)]}


def _expected_form(recorded: dict[str, Any], unwinding: bool = False) -> dict[str, Any]:
    """What the recorded next says the first decision was (a compensation's row comes
    after the ending is stored, unless the instance was ``unwinding`` already)."""
    inst = recorded["instance"]
    rows = recorded["rows"]
    if rows and (rows[0]["kind"] != "compensation" or unwinding):
        first = rows[0]
        return {"row": [first["node"], first["scope"], first["kind"], first["try"]]}
    if inst["state"] in ("failed", "cancelled"):
        return {"ending": [inst["state"], inst["failureCode"]]}
    if inst["state"] == "completed":
        return {"ending": ["completed", None]}
    return {"park": [inst["wakeNode"], inst["wakeScope"], inst["wakeKind"]]}


@pytest.mark.parametrize("name", fixture_names())
async def test_the_decider_decides_next_what_the_recording_release_did(
    name: str, tmp_path: Path
) -> None:
    fixture = load_fixture(name)
    async with resumed_harness(fixture, tmp_path) as h:
        decision = await _decide(h, fixture)
    unwinding = fixture["stored"]["flow_instance"][0].get("ending") is not None
    assert _recorded_form(decision) == _expected_form(fixture["next"], unwinding)


@pytest.mark.parametrize("name", fixture_names(must_fail=True))
async def test_a_journal_whose_plan_changed_fails_to_resume_with_a_stable_code(
    name: str, tmp_path: Path
) -> None:
    fixture = load_fixture(name)
    expected = fixture["mustFail"]
    instance_id = fixture["instanceId"]
    async with resumed_harness(fixture, tmp_path, flow=expected["changedFlow"]) as h:
        with pytest.raises(JournalMismatch) as info:
            await _decide(h, fixture)
        assert info.value.code == expected["error"]["code"]
        assert info.value.fields["step_id"] == expected["error"]["step_id"]
        assert info.value.fields["instance_id"] == instance_id
        before = journal_rows(fixture)
        await resume(h, instance_id, fixture["resume"])
        seen = await observed(h, instance_id, before)
        assert seen["rows"] == []  # nothing ran, nothing was compensated
        assert seen["instance"]["state"] == expected["instance"]["state"]
        assert seen["instance"]["failureCode"] == expected["instance"]["failureCode"]
        report = await h.sweep()
        assert report.claimed == 0  # ended: never re-claimed


def test_the_fixtures_cover_the_recorded_scenarios() -> None:
    names = fixture_names()
    assert len(names) >= 8 and fixture_names(must_fail=True)
    for name in names:
        fixture = load_fixture(name)
        assert fixture["stored"]["flow_instance"], name
        assert fixture["next"]["rows"] or fixture["next"]["instance"]["state"], name


#: the fixtures of what providers added: a deferral, a pushback, a correlated webhook, a
#: budget warning and an extension after it (each also replayed by the tests above)
PROVIDER_FIXTURES = {
    "provider_deferred_attempt": ("budget", None),
    "provider_pushed_back_attempt": ("pushback", None),
    "correlated_webhook_taken": (None, "t.done"),
    "poll_budget_warning_reached": (None, "budget.warning"),
    "poll_extended_after_warning": (None, "t.check"),  # not the timeout's t.escalate
}


@pytest.mark.parametrize("name", sorted(PROVIDER_FIXTURES))
async def test_a_provider_fixture_pins_what_a_change_would_alter(name: str, tmp_path: Path) -> None:
    """Each provider fixture is replayed above; here the replay is shown able to fail: the
    recorded next with the deferral's reason, its instant, or the row a provider's webhook,
    warning or extension wrote changed is not what today's code does."""
    fixture = load_fixture(name)
    reason, row_name = PROVIDER_FIXTURES[name]
    instance_id = fixture["instanceId"]
    async with resumed_harness(fixture, tmp_path) as h:
        await resume(h, instance_id, fixture["resume"])
        await h.engine.drain()
        seen = await observed(h, instance_id, journal_rows(fixture))
    assert seen == fixture["next"]
    tampered = []
    rows = fixture["next"]["rows"]
    if reason is not None:
        (held,) = [r for r in rows if "deferredBy" in r]
        assert held["deferredBy"] == reason
        flipped = "pushback" if reason == "budget" else "budget"
        tampered.append(_with_row(fixture["next"], held, deferredBy=flipped))
        tampered.append(_with_row(fixture["next"], held, deferredUntil=fixture["point"]))
        undeferred = {k: v for k, v in held.items() if k not in ("deferredBy", "deferredUntil")}
        tampered.append({**fixture["next"], "rows": [undeferred if r is held else r for r in rows]})
    if row_name is not None:
        assert any(r["name"] == row_name for r in rows), rows
        tampered.append({**fixture["next"], "rows": [r for r in rows if r["name"] != row_name]})
    assert tampered and all(t != seen for t in tampered)


def _with_row(nxt: dict[str, Any], row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**nxt, "rows": [{**r, **changes} if r is row else r for r in nxt["rows"]]}
