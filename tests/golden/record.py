"""Record stored journals: instances parked (or mid-run) as this release wrote them, and
what the engine did next.

Run from the repository root::

    python -m tests.golden.record            # records the scenarios with no fixture yet
    python -m tests.golden.record NAME ...   # (re)records the scenarios named

Each scenario drives a small flow (:mod:`tests.engine.flows`) on the production engine, a
virtual clock and a fresh SQLite store to a chosen point (parked on a poll's attempt, on a
retry, on an ``await_signal``, after an operator's extension ...). There it dumps what the
store holds for the instance exactly as stored (the raw ``flow_instance``, ``flow_step``,
``flow_signal``, ``flow_action`` and ``flow_heartbeat`` rows, with the schema revision they
were written under), then resumes it (a sweep at an instant, a signal delivered, an
operator's wake) and records what the engine did next in a form that names no code: the
journal rows it appended, the signals it took, and where it left the instance (parked at
which node, attempt, instant and kind; or ended, with its result or failure code).

``tests/engine/test_replay_stored.py`` loads each fixture into a store at the recorded
revision, migrates it to head (as an upgrade meets parked instances in production), and
asks today's engine to resume it: the decider's next decision and what the engine then
writes must equal what was recorded.

Record a new fixture whenever the journal's shape changes (a new row kind, a column, a
value the engine stores or reads back differently): the old fixtures stay, as the journals
the previous release left behind, and the new one pins the new shape. Never re-record an
existing fixture to make a failing replay pass: that failure is what an upgrade would meet.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from flowpark.engine.node.operator import extend_budget, failed_for_good
from flowpark.engine.ports import Reopen
from flowpark.engine.ports.operator import OperatorAction
from flowpark.engine.records import Outcome, StepKind, StepRow
from flowpark.flows import ProviderPushback
from flowpark.store.migrate import head_revision
from flowpark.testing import FlowHarness, Scripted, substitute
from tests.engine.flows import Check, Job, Ready, Status, await_flow, correlated_flow, poll_flow
from tests.support.harness import sql_of

STORED = Path(__file__).resolve().parent / "stored"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
ORDER = {"order_id": "o-1"}
#: the stored tables of an instance (a fixture recorded before ``flow_correlation`` has none)
TABLES = (
    "flow_instance",
    "flow_step",
    "flow_signal",
    "flow_action",
    "flow_heartbeat",
    "flow_correlation",
)
#: the signal secrets of the recording and resuming harness (``FLOWPARK_SIGNAL_SECRETS``)
SECRETS = {"t.hooks": "golden-journal-secret"}
#: the flows by a scenario's ``flow``, and each one's name
FLOW_NAMES = {"poll": "t.poll", "await": "t.await", "correlated": "t.correlated"}


def outcomes(script: list[Any]) -> list[Any]:
    """A JSON script as :class:`Scripted` outcomes: true/false a :class:`Status`, a string
    an error (a failed try), ``{"pushback": seconds}`` the provider's pushback
    (``ProviderPushback``, Retry-After that long: not a try), null nothing."""
    return [
        Status(done=x)
        if isinstance(x, bool)
        else RuntimeError(x)
        if isinstance(x, str)
        else ProviderPushback(timedelta(seconds=x["pushback"]), status=429, detail="HTTP 429")
        if isinstance(x, dict)
        else None
        for x in script
    ]


def stand_ins(scripts: dict[str, list[Any]]) -> dict[str, Scripted]:
    """The scenario flows' capabilities, scripted (``t.start`` puts a job and records its id
    for the provider ``t.vendor``, as a step that started a provider's job does)."""
    subs: dict[str, Scripted] = {"t.start": Scripted(Job(job_id="j"), correlate={"t.vendor": "j"})}
    for cap in ("t.check", "t.undo", "t.escalate", "t.after"):
        subs[cap] = Scripted(*outcomes(scripts.get(cap, [None])))
    return subs


def remaining(script: list[Any], calls: int) -> list[Any]:
    """What a script still plays after ``calls`` calls (its last outcome repeats)."""
    return script[calls:] if calls < len(script) else script[-1:]


class CheckRenamed(Check):
    """The poll's body under another capability id (a plan changed incompatibly)."""

    id = "t.status"


def flows_of(scenario: dict[str, Any]) -> list[Any]:
    """The flow a scenario runs (``poll`` with options, ``await`` or ``correlated``);
    ``change`` ``body_renamed``: the poll's body calls another capability id under the same
    version."""
    if scenario["flow"] == "await":
        return [await_flow()]
    if scenario["flow"] == "correlated":
        return [correlated_flow()]
    flow = poll_flow(**scenario.get("options", {}))
    if scenario.get("change") == "body_renamed":
        substitute(flow, {"t.check": CheckRenamed()})
    return [flow]


@dataclass
class Scenario:
    """One recorded resume: drive to the point, then resume.

    Attributes:
        name: the fixture's name.
        spec: the flow and scripts (JSON, stored in the fixture).
        to_point: drives a started instance to the recorded point.
        resume: JSON naming how the instance is resumed (see :func:`resume`).
        must_fail: a must-fail fixture: the changed flow it is resumed with and the error
            that resume must end in (nothing is resumed while recording).
    """

    name: str
    spec: dict[str, Any]
    to_point: Callable[[FlowHarness, str], Awaitable[None]]
    resume: dict[str, Any] = field(default_factory=lambda: {"via": "sweep"})
    must_fail: dict[str, Any] | None = None


async def wakes(h: FlowHarness, instance_id: str, n: int) -> None:
    """Sweep at the instance's recorded wake ``n`` times."""
    for _ in range(n):
        await h.advance_to_next_wake(instance_id)


async def extended(h: FlowHarness, instance_id: str) -> None:
    """Nine wakes (parked at the budget's end), then an operator extends it by 5 min."""
    await wakes(h, instance_id, 9)
    await h.store.reads.record_action(
        OperatorAction(
            id="0190a000-0000-7000-8000-000000000001",
            instance_id=instance_id,
            action="extend_budget",
            actor="operator",
            acted_at=h.clock.now(),
            details={"extendBy": "PT5M"},
        )
    )
    await extend_budget(h.engine, instance_id, timedelta(minutes=5))


async def warned_then_extended(h: FlowHarness, instance_id: str) -> None:
    """Ten wakes (the eighth the budget's warning, ``budget.warning``; after the tenth the
    instance is parked at the budget's end), then an operator extends the budget by 5 min:
    the next wake runs an attempt, not the timeout's escalation."""
    await wakes(h, instance_id, 10)
    await h.store.reads.record_action(
        OperatorAction(
            id="0190a000-0000-7000-8000-000000000002",
            instance_id=instance_id,
            action="extend_budget",
            actor="operator",
            acted_at=h.clock.now(),
            details={"extendBy": "PT5M"},
        )
    )
    await extend_budget(h.engine, instance_id, timedelta(minutes=5))


async def noop(h: FlowHarness, instance_id: str) -> None:
    """The point is the first park."""


async def retry_reopened(h: FlowHarness, instance_id: str) -> None:
    """A cancel whose compensation failed for good, then an operator's retry that reopened
    the instance (its retry row written with the claim) on a node that died before its
    run: running, ``ending`` cancelled, under a lease that expires in 30 s."""
    await h.engine.cancel(instance_id)
    now = h.clock.now()
    rows = tuple(
        StepRow(
            instance_id,
            r.step_id,
            r.scope,
            StepKind.RETRY,
            r.capability_id,
            Outcome.SUCCESS,
            now,
            now,
            values={"after_try": r.try_number},
        )
        for r in failed_for_good((await h.snapshot(instance_id)).steps)
    )
    assert rows, "the compensation did not fail for good"
    reopen = Reopen(instance_id, "dead-node", now, now + timedelta(seconds=30), rows)
    assert await h.store.intake.reopen(reopen) is not None


SCENARIOS = [
    Scenario(
        "poll_satisfied_on_attempt_2",
        {"flow": "poll", "scripts": {"t.check": [False, False, True]}},
        lambda h, i: wakes(h, i, 1),
    ),
    Scenario(
        "poll_timeout_rejoins",
        {"flow": "poll", "options": {"on_timeout": "rejoin"}, "scripts": {"t.check": [False]}},
        lambda h, i: wakes(h, i, 9),
    ),
    Scenario(
        "poll_timeout_fails_and_compensates",
        {"flow": "poll", "scripts": {"t.check": [False]}},
        lambda h, i: wakes(h, i, 9),
    ),
    Scenario(
        "poll_try_fails_then_retries",
        {
            "flow": "poll",
            "options": {"retry": True},
            "scripts": {"t.check": ["provider down", "provider down", True]},
        },
        noop,
    ),
    Scenario(
        "poll_ended_by_signal",
        {"flow": "poll", "scripts": {"t.check": [False]}},
        lambda h, i: wakes(h, i, 1),
        {"via": "signal", "name": "t.ready", "payload": {"job_id": "j"}, "afterSeconds": 20},
    ),
    Scenario(
        "await_signal_taken",
        {"flow": "await"},
        noop,
        {"via": "signal", "name": "t.ready", "payload": {"job_id": "j"}, "afterSeconds": 300},
    ),
    Scenario("await_signal_times_out", {"flow": "await"}, noop),
    Scenario(
        "poll_budget_extended",
        {"flow": "poll", "scripts": {"t.check": [False]}},
        extended,
    ),
    Scenario(
        "poll_woken_by_operator",
        {"flow": "poll", "scripts": {"t.check": [False, True]}},
        noop,
        {"via": "wake_now", "afterSeconds": 10},
    ),
    Scenario(
        "compensation_retry_taken_over",
        {"flow": "poll", "scripts": {"t.check": [False], "t.undo": ["provider down", None]}},
        retry_reopened,
        {"via": "takeover", "afterSeconds": 31},
    ),
    Scenario(  # attempt 1 falls due before the provider's next slot: deferred for budget
        "provider_deferred_attempt",
        {"flow": "poll", "options": {"provider_every": 120}, "scripts": {"t.check": [False, True]}},
        lambda h, i: wakes(h, i, 1),
    ),
    Scenario(  # attempt 1: the provider answers 429, Retry-After 30 s
        "provider_pushed_back_attempt",
        {"flow": "poll", "scripts": {"t.check": [False, {"pushback": 30}, True]}},
        lambda h, i: wakes(h, i, 1),
    ),
    Scenario(  # the provider's signed webhook, found by the job id t.start recorded
        "correlated_webhook_taken",
        {"flow": "correlated"},
        noop,
        {
            "via": "webhook",
            "provider": "t.vendor",
            "name": "t.done",
            "payload": {"job_id": "j"},
            "deliveryId": "delivery-1",
            "afterSeconds": 90,
        },
    ),
    Scenario(  # parked for the wake at the poll's warning (2 min 30 s before its end)
        "poll_budget_warning_reached",
        {"flow": "poll", "options": {"warn_before": "PT2M30S"}, "scripts": {"t.check": [False]}},
        lambda h, i: wakes(h, i, 7),
    ),
    Scenario(  # warned, then extended at the end by an operator: an attempt, no escalation
        "poll_extended_after_warning",
        {"flow": "poll", "options": {"warn_before": "PT2M30S"}, "scripts": {"t.check": [False]}},
        warned_then_extended,
    ),
    Scenario(
        "must_fail_deferred_body_renamed",
        {"flow": "poll", "options": {"provider_every": 120}, "scripts": {"t.check": [False, True]}},
        lambda h, i: wakes(h, i, 1),
        must_fail={
            "changedFlow": {
                "flow": "poll",
                "options": {"provider_every": 120},
                "change": "body_renamed",
            },
            "error": {"code": "journal_mismatch", "step_id": 2},
            "instance": {"state": "failed", "failureCode": "flow.journal_mismatch"},
        },
    ),
    Scenario(
        "must_fail_body_renamed",
        {"flow": "poll", "scripts": {"t.check": [False, False, True]}},
        lambda h, i: wakes(h, i, 1),
        must_fail={
            "changedFlow": {"flow": "poll", "change": "body_renamed"},
            "error": {"code": "journal_mismatch", "step_id": 2},
            "instance": {"state": "failed", "failureCode": "flow.journal_mismatch"},
        },
    ),
]


def jsonable(value: Any) -> Any:
    """A raw column value as JSON (SQLite hands back str, int, float, bytes or None)."""
    if isinstance(value, bytes):
        return {"$bytes": value.hex()}
    return value


async def dump(h: FlowHarness, instance_id: str) -> dict[str, list[dict[str, Any]]]:
    """The instance's rows in each table, raw, as the store holds them."""
    stored: dict[str, list[dict[str, Any]]] = {}
    async with sql_of(h).engine.connect() as conn:
        for table in TABLES:
            key = "id" if table == "flow_instance" else "instance_id"
            order = "" if table == "flow_instance" else " ORDER BY rowid"
            result = await conn.execute(
                text(f"SELECT * FROM {table} WHERE {key} = :id{order}"),  # noqa: S608
                {"id": instance_id},
            )
            stored[table] = [
                {k: jsonable(v) for k, v in row._mapping.items()} for row in result.fetchall()
            ]
    return stored


def row_form(row: Any) -> dict[str, Any]:
    """A journal row as the fixture names it (no code's names); a try its provider deferred
    also says until when and why (rows of earlier releases never were)."""
    form = {
        "node": row.step_id,
        "scope": row.scope,
        "kind": str(row.kind),
        "name": row.capability_id,
        "outcome": str(row.outcome),
        "try": row.try_number,
        "final": row.final,
        "nextTryAt": row.next_try_at.isoformat() if row.next_try_at else None,
        "values": {k: v for k, v in row.values.items() if k != "event_id"},
    }
    if row.deferred_until is not None:
        form["deferredUntil"] = row.deferred_until.isoformat()
        form["deferredBy"] = row.deferred_by
    return form


async def observed(h: FlowHarness, instance_id: str, before: int) -> dict[str, Any]:
    """What the engine did since the point: rows after the first ``before``, the signals
    taken, and where the instance is."""
    snap = await h.snapshot(instance_id)
    inst = snap.instance
    signals = await h.store.reads.list_signals(instance_id)
    return {
        "rows": [row_form(r) for r in snap.steps[before:]],
        "signals": [
            {"name": s.name, "takenAtNode": s.taken_step_id, "matched": s.matched}
            for s in signals
            if s.taken_at is not None
        ],
        "instance": {
            "state": str(inst.state),
            "wakeAt": inst.wake_at.isoformat() if inst.wake_at else None,
            "wakeNode": inst.wake_step_id,
            "wakeScope": inst.wake_scope,
            "wakeKind": str(inst.wake_kind) if inst.wake_kind else None,
            "result": inst.result,
            "failureCode": inst.failure.code if inst.failure else None,
        },
    }


async def resume(h: FlowHarness, instance_id: str, how: dict[str, Any]) -> None:
    """Resume the instance as ``how`` says: ``sweep`` at its recorded wake, a ``signal``
    delivered ``afterSeconds`` after the point, a provider's signed ``webhook`` then (to its
    provider signal route, found by its correlation key), an operator's ``wake_now`` then,
    or a ``takeover``: a sweep then, of a lease that expired."""
    if how["via"] == "sweep":
        await h.advance_to_next_wake(instance_id)
        return
    h.clock.advance(timedelta(seconds=how["afterSeconds"]))
    if how["via"] == "signal":
        await h.engine.deliver(instance_id, how["name"], how["payload"])
    elif how["via"] == "webhook":
        await h.provider_signal(
            how["provider"], how["name"], how["payload"], delivery_id=how["deliveryId"]
        )
    elif how["via"] == "wake_now":
        await h.engine.wake_now(instance_id)
    elif how["via"] == "takeover":  # the sweep takes over a lease that expired
        await h.sweep()
    else:
        raise ValueError(f"unknown resume {how['via']!r}")


async def record(scenario: Scenario) -> dict[str, Any]:
    """Drive ``scenario`` to its point, dump the store, resume, and describe the next."""
    spec = scenario.spec
    scripts = spec.get("scripts", {})
    subs = stand_ins(scripts)
    folder = Path(
        tempfile.mkdtemp(prefix="flowpark-record-")
    )  # the rows are dumped as SQLite holds them
    url = f"sqlite:///{folder / 'record.db'}"
    async with FlowHarness.open(
        flows_of(spec), database_url=url, substitutes=subs, start=T0, signal_secrets=SECRETS
    ) as h:
        instance_id = (await h.start(FLOW_NAMES[spec["flow"]], ORDER)).instance.id
        await scenario.to_point(h, instance_id)
        point = h.clock.now()
        stored = await dump(h, instance_id)
        # the journal as read back (a deadline carried inside a row, or inside the instance
        # row, is a row of the journal but not of flow_step)
        journal = len((await h.snapshot(instance_id)).steps)
        scripts_after = {cap: remaining(s, subs[cap].calls) for cap, s in scripts.items()}
        if scenario.must_fail is None:
            await resume(h, instance_id, scenario.resume)
            await h.engine.drain()
            nxt = await observed(h, instance_id, journal)
    outcome = {"mustFail": scenario.must_fail} if scenario.must_fail else {"next": nxt}
    return {
        "about": __doc__.splitlines()[0] if __doc__ else "",
        "recordedWith": {"schemaRevision": head_revision(), "commit": _commit()},
        "instanceId": instance_id,
        "flow": {k: v for k, v in spec.items() if k != "scripts"},
        "scriptsAfter": scripts_after,
        "point": point.isoformat(),
        "resume": scenario.resume,
        "journalRows": journal,
        "stored": stored,
        **outcome,
    }


def _commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


async def main(names: list[str]) -> None:
    """Record the scenarios ``names`` (default: every scenario with no fixture yet) into
    ``tests/golden/stored/<name>.json``; an existing fixture is kept unless named."""
    STORED.mkdir(exist_ok=True)
    for scenario in SCENARIOS:
        path = STORED / f"{scenario.name}.json"
        if (names and scenario.name not in names) or (not names and path.exists()):
            continue
        fixture = await record(scenario)
        path.write_text(json.dumps(fixture, indent=1, sort_keys=False) + "\n")
        print(f"recorded {path.relative_to(Path.cwd())}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))


__all__ = ["SCENARIOS", "Ready", "outcomes", "record", "remaining", "stand_ins"]
