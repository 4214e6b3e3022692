"""The recommended alert rules load in Prometheus and fire as their unit tests say
(``promtool``, from Debian's ``prometheus`` package, which ``.ci/run`` installs)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus"


def _promtool(*args: str) -> str:
    promtool = shutil.which("promtool")
    if promtool is None:  # fails, never skips: the rules are part of what ships
        pytest.fail(
            "promtool is not on PATH: install Debian's prometheus package "
            "(apt-get install -y --no-install-recommends prometheus; .ci/run does)",
            pytrace=False,
        )
    done = subprocess.run(
        [promtool, *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_alert_rules_pass_promtool_check() -> None:
    declared = (RULES / "flowpark-alerts.yml").read_text().count("- alert: ")
    assert declared == 15
    found = _promtool("check", "rules", "flowpark-alerts.yml")
    assert f"SUCCESS: {declared} rules found" in found


def test_alert_rules_unit_tests_pass() -> None:
    assert "SUCCESS" in _promtool("test", "rules", "flowpark-alerts.test.yml")


def test_every_metric_the_rules_name_exists() -> None:
    from flowpark.runtime.metrics import Metrics

    exposed = {m.name for m in Metrics("n").registry.collect()}
    text = (RULES / "flowpark-alerts.yml").read_text()
    named = set(re.findall(r"\bflowpark_[a-z_]+", text))
    assert len(named) >= 8
    for name in named:
        base = name.removesuffix("_bucket").removesuffix("_total")
        assert base in exposed, f"{name} is no flowpark metric"
