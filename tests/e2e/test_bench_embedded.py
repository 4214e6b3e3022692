"""``python -m bench embedded --quick``: the scenario runs as the lead runs it (its own
process, the shop-like host in a uvicorn process of its own, a fresh database on the test
server) and its JSON carries every figure of each start path, and the statement counts of
the start in the caller's transaction: one of flowpark's inside it, none after its commit,
one caller transaction per start."""

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
PATHS = ("bare", "http", "local", "tx", "order-only")


@pytest.fixture(scope="module")
def result() -> dict[str, Any]:
    env = {**os.environ, "FLOWPARK_BENCH_PG_URL": pg_admin_url(), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "embedded", "--quick", "--json"],
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


def test_every_start_path_is_measured(result: dict[str, Any]) -> None:
    assert (result["scenario"], result["store"], result["n"]) == ("embedded", "postgres", 100)
    paths = result["details"]["paths"]
    assert set(paths) == set(PATHS)
    for name, figures in paths.items():
        assert figures["per_s"] > 0, name
        assert math.isfinite(figures["cpu_ms"]) and figures["cpu_ms"] >= 0, name
        assert 0 < figures["p50_ms"] <= figures["p99_ms"], name
    for key in ("http_start_cpu_ms", "local_start_cpu_ms", "tx_start_cpu_ms", "bare_route_cpu_ms"):
        assert math.isfinite(result[key]), key
    # the CPU targets are reported (met or not: at this size they are noise)
    assert set(result["targets"]) >= {"in_process_start_cpu_ms", "tx_start_beyond_order_cpu_ms"}


def test_a_start_in_the_callers_transaction_is_one_statement_and_nothing_after(
    result: dict[str, Any],
) -> None:
    counted = result["details"]["statements_on_tx_path"]
    assert counted["committed"] == counted["begun"] == result["n"]
    assert counted["flowpark_per_tx_min"] == counted["flowpark_per_tx_max"] == 1
    assert counted["in_tx"] == 2 * result["n"]  # the host's order row and flowpark's start
    assert counted["after_commit"] == counted["outside"] == 0
    assert result["flowpark_statements_per_caller_tx"] == 1
    assert result["statements_after_commit"] == 0
    assert result["caller_transactions_per_start"] == 1
    for key in (
        "flowpark_statements_per_caller_tx",
        "statements_after_commit",
        "caller_transactions_per_start",
    ):
        assert result["targets"][key]["met"] is True, key
