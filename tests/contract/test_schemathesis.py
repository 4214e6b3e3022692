"""Schemathesis against a real ``flowpark serve`` process on each store: every check, the
examples, coverage, fuzzing and stateful phases (through the document's links: start ->
read -> signal -> cancel), with the seed and bounds of ``schemathesis.toml`` beside this
file. Any finding fails the test, with Schemathesis' report of it.

Run one by hand the same way::

    PYTHONPATH=. st --config-file tests/contract/schemathesis.toml run \\
        http://127.0.0.1:8000/openapi.json -H 'Authorization: Bearer dev-token'
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import TOKEN, serve_subprocess

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Path(__file__).with_name("schemathesis.toml")
#: The whole Schemathesis run may take this long (it takes well under a minute).
RUN_TIMEOUT = 240


def _st() -> list[str]:
    script = Path(sys.executable).with_name("st")
    return [str(script)] if script.exists() else [sys.executable, "-m", "schemathesis.cli"]


@pytest.mark.slow
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_schemathesis_finds_nothing(store_url: str, tmp_path: Path) -> None:
    with serve_subprocess(
        store_url,
        tmp_path / "server.log",
        sample_ocr_per_page="0.05",
        timer_scan_interval="0.5",
    ) as server:
        server.wait_serving(30)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
        run = subprocess.run(
            [
                *_st(),
                "--config-file",
                str(CONFIG),
                "--no-color",
                "run",
                f"{server.base_url}/openapi.json",
                "--header",
                f"Authorization: Bearer {TOKEN}",
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
        )
        output = run.stdout + run.stderr
        summary = output[output.rfind("SUMMARY") :] if "SUMMARY" in output else output[-3000:]
        print(summary)  # the counts, shown with -s or on failure
        assert run.returncode == 0, f"Schemathesis found problems:\n{output[-15000:]}"
        # every phase ran, over every operation, with the links walked
        for phase in ("Examples", "Coverage", "Fuzzing", "Stateful"):
            assert re.search(rf"✅\s+{phase}", output), (phase, summary)
        assert re.search(r"API Links:\s+[1-9]\d* covered", output), output[:3000]
        assert "FAILURES" not in output  # (its hints may say "Schemathesis found no ...")
        assert re.search(r"\b0 failures\b|\d+ passed", summary), summary
        assert server.process.poll() is None, server.output()[-3000:]
        server_log = server.output()
        assert "Traceback" not in server_log, server_log[-5000:]
