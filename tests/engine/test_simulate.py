"""``flowpark flows simulate``'s figures against hand-computed cases: ten instances of a
poll every minute without jitter (tests/engine/flows.py's ``t.poll``: start, then check
until done, 10-minute budget, on timeout escalate and fail, start compensated by undo)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flowpark.simulate import Second, parse_script, queue_load, simulate
from tests.engine.flows import poll_flow

PROVIDER = ("t.start", "t.check")


def test_scripts_parse_and_bad_ones_are_refused() -> None:
    steps = parse_script("pending*2, 429:60 ,503,done")
    assert [(s.answer, s.retry_after) for s in steps] == [
        ("pending", None),
        ("pending", None),
        ("429", 60.0),
        ("503", None),
        ("done", None),
    ]
    for bad in ("", "pending*0", "maybe", "done:5", "429:x", "pending*", "pending*99999999999999"):
        with pytest.raises(ValueError):
            parse_script(bad)


def test_the_queue_serves_the_oldest_first_within_the_limit() -> None:
    assert queue_load({0: 12, 2: 1}, 5) == [
        Second(0, 12, 5, 7),
        Second(1, 0, 5, 2),
        Second(2, 1, 3, 0),
    ]
    assert queue_load({3: 12}, None) == [Second(3, 12, 12, 0)]


def test_the_queue_stops_at_its_bound_with_the_backlog_left() -> None:
    assert queue_load({0: 12}, 5, until=2) == [Second(0, 12, 5, 7), Second(1, 0, 5, 2)]


def test_a_fleet_far_above_a_low_limit_ends_in_seconds_with_the_backlog_left() -> None:
    from flowpark.cli.main import app

    # 10^12 instances at 1 call/s drain for 2.5 * 10^5 years: the figures stop at the run's
    # horizon (7 days) and say what is left, rather than filling memory second by second
    args = ["flows", "simulate", "document.process", "--instances", str(10**12)]
    done = CliRunner().invoke(app, [*args, "--limit", "1", "--sample", "5"])
    assert done.exit_code == 0, done.output
    assert "still deferred where the figures stop, 7d after" in " ".join(done.output.split())


async def test_a_poll_done_on_its_third_check_at_a_thousand_instances() -> None:
    # per instance: t.start and check 0 at +0 s, check 1 (pending) at +60 s, check 2 (done)
    # at +120 s: 4 provider calls. Ten instances stand for 1,000 (x100): 2,000 calls due
    # in second 0, 1,000 at +60 and at +120. At 500/s: 500 a second, the backlog of second
    # 0 (1,500) gone after 3 more seconds, the others after one: 122 seconds, 4,000 calls.
    sim = await simulate(
        poll_flow(signal=False),
        1000,
        parse_script("pending*2,done"),
        limit=500,
        sample=10,
        provider_capabilities=PROVIDER,
    )
    assert (sim.sample, sim.scale, sim.scripted) == (10, 100, "t.check")
    assert sim.calls_per_instance == [4] * 10
    assert sim.calls_by_capability == {"t.after": 1, "t.check": 3, "t.start": 1}
    due = {s.at: s.demand for s in sim.seconds if s.demand}
    assert due == {0: 2000, 60: 1000, 120: 1000}
    assert sim.peak_demand_per_s == 2000
    assert sim.peak_per_s == 500
    assert len(sim.seconds) == 122
    assert sim.mean_per_s == pytest.approx(4000 / 122)
    assert sim.max_delay_s == pytest.approx(3.0)
    assert [(s.at, s.served, s.backlog) for s in sim.seconds[:5]] == [
        (0, 500, 1500),
        (1, 500, 1000),
        (2, 500, 500),
        (3, 500, 0),
        (4, 0, 0),
    ]
    assert sim.ends == {("completed", ""): (10, 120.0, 120.0)}
    assert sim.timeouts == [] and sim.compensations == {}


async def test_a_provider_that_never_finishes_runs_out_the_budget_and_compensates() -> None:
    # checks at +0, +60, ..., +540 (10), then the budget ends at +600: escalate, fail,
    # undo the start
    sim = await simulate(
        poll_flow(signal=False),
        10,
        parse_script("pending"),
        provider_capabilities=PROVIDER,
    )
    assert sim.calls_per_instance == [11] * 10
    due = {s.at: s.demand for s in sim.seconds if s.demand}
    assert due == {0: 20, **{60 * k: 10 for k in range(1, 10)}}
    assert sim.peak_per_s == 20 and sim.limit is None
    assert sim.timeouts == [600.0] * 10
    assert sim.ends == {("failed", "t.not_done"): (10, 600.0, 600.0)}
    assert sim.compensations == {"t.undo": [600.0] * 10}
    assert sim.calls_by_capability["t.escalate"] == 1


async def test_a_pushback_parks_until_its_retry_after_and_fails_nothing() -> None:
    # p.poll (tests/api/test_providers_api.py): p.upload and p.check name the provider
    # ocr; a check every minute. Check 0 at +0 s (pending), check 1 at +60 s answers 429
    # with Retry-After: 30: not a failed try, parked until +90 s plus its jitter (up to a
    # fifth of 30 s); check 2 between +90 s and +96 s is done.
    from tests.api.test_providers_api import flow

    sim = await simulate(flow(), 10, parse_script("pending,429:30,done"))
    assert sim.provider_capabilities == ("p.check", "p.upload")
    assert sim.calls_per_instance == [4] * 10
    due = {s.at: s.demand for s in sim.seconds if s.demand}
    assert (due.pop(0), due.pop(60)) == (20, 10)
    assert sum(due.values()) == 10 and all(90 <= at <= 96 for at in due)
    [(state, code)] = sim.ends
    count, first, last = sim.ends[(state, code)]
    assert (state, count) == ("completed", 10) and 90 <= first <= last <= 96.1
    assert sim.compensations == {}


def test_the_command_prints_the_figures_of_the_sample_at_100000_instances() -> None:
    from flowpark.cli.main import app

    runner = CliRunner()
    args = ["flows", "simulate", "document.process", "--instances", "100000"]
    done = runner.invoke(app, [*args, "--script", "pending*3,done", "--limit", "50", "--json"])
    assert done.exit_code == 0, done.output
    figures = json.loads(done.output)
    assert figures["instances"] == 100_000 and figures["sampled"] == 200
    assert figures["scale"] == 500 and figures["limitPerS"] == 50
    assert figures["peakPerS"] == 50 and figures["peakDemandPerS"] >= 100_000
    assert figures["callsByCapability"]["ocr.status"] == 4
    text = runner.invoke(app, [*args, "--script", "pending*3,done", "--sample", "20"])
    assert text.exit_code == 0, text.output
    assert "at 100,000 instances (20 run through the engine" in text.output
    assert "deferral queue" in text.output
    bad = runner.invoke(app, [*args, "--script", "pending*0"])
    assert bad.exit_code == 2 and "--script" in bad.output
    endless = runner.invoke(app, [*args, "--limit", "nan"])  # ran with no limit at all
    assert endless.exit_code == 2 and "is not a number of calls per second" in endless.output
    unknown = runner.invoke(app, ["flows", "simulate", "no.such", "--instances", "3"])
    assert unknown.exit_code == 2 and "no flow no.such" in unknown.output


@pytest.mark.timeout(60)
def test_a_pushback_outlasting_the_flow_deadline_fails_it_and_defers_its_undo() -> None:
    # document.process: a 429 asking for 20,000 s outlasts the OCR budget and the flow
    # deadline; the undo (ocr.cancel) calls the same paused provider after the deadline
    # passed: it parks until the provider's instant, not at the passed deadline again and
    # again (the virtual clock never moved on, and the run never ended)
    from flowpark.cli.main import app

    args = ["flows", "simulate", "document.process", "--instances", "2"]
    done = CliRunner().invoke(app, [*args, "--script", "429:20000,done", "--json"])
    assert done.exit_code == 0, done.output
    figures = json.loads(done.output)
    assert "flow.deadline_exceeded" in json.dumps(figures["ends"])
    assert figures["compensations"]["ocr.cancel"]
