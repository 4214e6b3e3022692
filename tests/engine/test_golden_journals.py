"""Golden journals: a few recorded runs kept as JSON (``tests/golden/*.json``), replayed by the
current engine on the virtual clock, which must reach the same decisions: the same journal
rows (node, scope, kind, capability, outcome, try), the same parks (node, attempt, what it
waits for, when) and the same end. An edit that changes what running instances do fails
here; when the change is meant, record again with ``FLOWPARK_GOLDEN_UPDATE=1 pytest
tests/engine/test_golden_journals.py`` and review the JSON diff."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from flowpark.testing import FlowHarness, Scripted
from tests.engine.flows import Job, Status, poll_flow

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
ORDER = {"order_id": "o-1"}


def _outcomes(script: list[Any]) -> list[Any]:
    """The JSON script of ``t.check`` as outcomes: true/false a status, a string an error."""
    return [Status(done=x) if isinstance(x, bool) else RuntimeError(x) for x in script]


SCENARIOS: dict[str, dict[str, Any]] = {
    "poll_completes_on_attempt_2": {"flow": {}, "check": [False, False, True]},
    "poll_times_out_then_fails_and_compensates": {"flow": {}, "check": [False]},
    "poll_times_out_then_rejoins": {"flow": {"on_timeout": "rejoin"}, "check": [False]},
    "poll_try_fails_then_retries": {
        "flow": {"retry": True},
        "check": ["provider down", "provider down", True],
    },
}


def _seconds(at: datetime | None, t0: datetime) -> float | None:
    return None if at is None else (at - t0).total_seconds()


async def _replay(flow_options: dict[str, Any], script: list[Any]) -> dict[str, Any]:
    check = Scripted(*_outcomes(script))
    subs = {
        "t.start": Scripted(Job(job_id="j")),
        "t.check": check,
        "t.undo": Scripted(None),
        "t.escalate": Scripted(None),
        "t.after": Scripted(None),
    }
    async with FlowHarness.open([poll_flow(**flow_options)], substitutes=subs) as h:
        t0 = h.clock.now()
        inst = (await h.start("t.poll", ORDER)).instance
        decisions: list[dict[str, Any]] = []
        for _ in range(40):
            inst = await h.instance(inst.id)
            decisions.append(
                {
                    "state": str(inst.state),
                    "wakeStepId": inst.wake_step_id,
                    "wakeScope": inst.wake_scope,
                    "wakeKind": None if inst.wake_kind is None else str(inst.wake_kind),
                    "wakeAtSeconds": _seconds(inst.wake_at, t0),
                }
            )
            if inst.state.ended:
                break
            await h.advance_to_next_wake(inst.id)
        rows = (await h.snapshot(inst.id)).steps
        return {
            "decisions": decisions,
            "journal": [
                [r.step_id, r.scope, str(r.kind), r.capability_id, str(r.outcome), r.try_number]
                for r in rows
            ],
            "end": {
                "state": str(inst.state),
                "result": inst.result,
                "error": None if inst.failure is None else inst.failure.code,
            },
            "checkCalls": check.calls,
        }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_a_recorded_journal_replays_to_the_same_decisions(name: str) -> None:
    scenario = SCENARIOS[name]
    replayed = await _replay(scenario["flow"], scenario["check"])
    path = GOLDEN / f"{name}.json"
    if os.environ.get("FLOWPARK_GOLDEN_UPDATE") == "1":
        recorded = {"scenario": scenario, **replayed}
        path.write_text(json.dumps(recorded, indent=2) + "\n", encoding="utf-8")
    golden = json.loads(path.read_text(encoding="utf-8"))
    assert golden["scenario"] == scenario, "the JSON records another scenario"
    assert replayed["journal"] == golden["journal"]
    assert replayed["decisions"] == golden["decisions"]
    assert replayed["end"] == golden["end"]
    assert replayed["checkCalls"] == golden["checkCalls"]
