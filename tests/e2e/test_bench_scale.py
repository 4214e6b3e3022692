"""``python -m bench scale`` at a tiny size: 2,000 parked ``document.process`` instances, a
5-second wake window. The scenario runs as the lead runs it (its own process, a fake OCR
and a flowpark server of its own, a fresh database on the test server) and its JSON must
carry every figure the scale section of BENCHMARKS.md names, each within what it can be.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import pg_admin_url

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]
PARKED = 2_000


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    env = {**os.environ, "FLOWPARK_BENCH_PG_URL": pg_admin_url(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "scale", "--parked", str(PARKED), "--duration", "5"]
        + ["--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def test_bytes_per_parked_instance_by_relation(result: dict[str, Any]) -> None:
    assert result["scenario"] == "scale"
    assert result["store"] == "postgres"
    assert result["parked"] == PARKED
    by_relation = result["details"]["bytes_by_relation"]
    for relation in ("flow_instance", "flow_step", "pk_flow_step", "flow_correlation"):
        assert by_relation[relation] > 0, relation
    # a parked document.process is an instance row (carrying the upload's retry window),
    # two journal rows (the upload, carrying the poll's budget and attempt 0's retry
    # window, and attempt 0) and a correlation key
    assert result["bytes_per_parked"] == pytest.approx(sum(by_relation.values()), rel=0.01)
    assert result["details"]["template"]["rows"] == {
        "flow_instance": 1,
        "flow_step": 2,
        "flow_correlation": 1,
    }
    assert all(n > 0 for n in result["details"]["shape_rows_checked"].values())


def test_claims_among_the_parked(result: dict[str, Any]) -> None:
    claims = result["details"]["claims"]
    assert claims["claims"] > 0
    assert claims["k"] == PARKED // 4
    assert claims["claims"] <= claims["claimed_in_all"] <= claims["k"]
    assert result["claims_per_s"] > 0
    assert result["failed"] == 0


def test_wake_lag_at_half_the_claim_rate(result: dict[str, Any]) -> None:
    assert result["due_per_s"] == pytest.approx(result["claims_per_s"] / 2, rel=0.01)
    window = result["details"]["window"]
    assert window["due"] > 0
    assert result["wakes_measured"] == window["due"]
    assert result["wakes_unclaimed"] == 0
    # a claim takes only instances already due, on the clock that set their wake_at
    assert 0 <= result["wake_lag_p50_ms"] <= result["wake_lag_p99_ms"]
    assert result["wake_lag_p99_ms"] <= result["wake_lag_max_ms"]
    assert window["drained"] is True


def test_start_latency_meanwhile(result: dict[str, Any]) -> None:
    assert result["starts"] > 0
    assert result["start_errors"] == 0
    assert 0 < result["start_p50_ms"] <= result["start_p99_ms"] <= result["start_max_ms"]
    assert result["params"]["callers"] == 32


def test_dead_tuples_and_growth(result: dict[str, Any]) -> None:
    # on a server of the bench's own with the default settings: autovacuum on
    assert result["params"]["server"].startswith("own")
    assert result["autovacuum"] == "on"
    # no table's autovacuum turned off, and the load's rebuild of the journal's key index
    # left no fillfactor behind
    assert result["details"]["relation_options"] == {}
    tables = result["details"]["tables"]
    # the window's claims and starts wrote journal rows and updated instance rows
    assert tables["flow_step"]["inserted"] > result["wakes_measured"]
    assert tables["flow_instance"]["updated"] >= result["wakes_measured"]
    assert result["growth_bytes"] > 0
    assert result["dead_tuples"] >= 0
    assert result["live_tuples"] > PARKED
    for key in ("autovacuum_runs", "autoanalyze_runs", "dead_tuples_before"):
        assert _finite(result[key]), key


def test_phases_and_hardware(result: dict[str, Any]) -> None:
    phases = result["details"]["phases_s"]
    for phase in ("templates (engine)", "load (SQL)", "analyze", "claims", "total"):
        assert _finite(phases[phase]), phase
    assert result["machine"]["cpus"] >= 1
    assert result["machine"]["postgresql"]
