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
from tests.golden.stored import fixture_names, load_fixture, resumed_harness


@pytest.mark.parametrize("name", fixture_names())
async def test_a_stored_journal_resumes_as_recorded(name: str, tmp_path: Path) -> None:
    fixture = load_fixture(name)
    instance_id = fixture["instanceId"]
    async with resumed_harness(fixture, tmp_path) as h:
        before = len(fixture["stored"]["flow_step"])
        assert len((await h.snapshot(instance_id)).steps) == before
        await resume(h, instance_id, fixture["resume"])
        await h.engine.drain()
        assert await observed(h, instance_id, before) == fixture["next"]


async def _decide(h: FlowHarness, fixture: dict[str, Any]) -> RunDecision:
    """The decider's first decision on resuming the fixture's instance as recorded."""
    instance_id, how = fixture["instanceId"], fixture["resume"]
    point = datetime.fromisoformat(fixture["point"])
    if how["via"] == "signal":  # the signal is stored first, as a delivery does
        now = point + timedelta(seconds=how["afterSeconds"])
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
        before = len(fixture["stored"]["flow_step"])
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
