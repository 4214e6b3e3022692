"""``flowpark flows check`` as a child process: every rule code and exit 1 on bad flows,
exit 2 when building a flow raises (no traceback), exit 0 on the samples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.bad_flows import BAD

BAD_FILE = Path(__file__).resolve().parents[1] / "unit" / "bad_flows.py"


def test_flows_check_prints_every_rule_code_and_exits_1() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flowpark.cli.main", "flows", "check", str(BAD_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr
    for code in [*BAD, "flow.duplicate_version"]:
        assert code in done.stdout


def test_flows_check_exits_2_when_building_a_flow_raises(tmp_path: Path) -> None:
    module = tmp_path / "negative.py"
    module.write_text(
        "from datetime import timedelta\n"
        "from tests.unit.bad_flows import FIVE, Good, _f, _seen\n\n"
        "FLOW = _f('bad.negative').poll_until(Good(), until=_seen, "
        "interval=FIVE, timeout=timedelta(seconds=-1))\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "flowpark.cli.main", "flows", "check", str(module)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot load" in done.stdout and "must not be negative" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_flows_check_passes_the_samples() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flowpark.cli.main", "flows", "check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: document.process@1.0.0" in done.stdout
