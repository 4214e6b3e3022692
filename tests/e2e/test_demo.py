"""``flowpark demo`` end to end in a child process: migrate, serve, two documents complete."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.server import flowpark_command, free_port

DEMO_TIMEOUT = 120


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT + 30)
def test_demo_completes_both_documents(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            *flowpark_command(),
            "demo",
            "--database-url",
            f"sqlite:///{tmp_path}/demo.db",
            "--port",
            str(free_port()),
            "--pages",
            "3",
            "--per-page",
            "0.5",
            "--scan-interval",
            "0.5",
        ],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        cwd=tmp_path,
    )
    output = result.stdout + result.stderr

    assert result.returncode == 0, output
    assert output.count("state=completed") == 2, output
    assert 'result: {"documentId"' in output, output  # JSON, as the API answers
    assert "console at http://127.0.0.1:" in output and "/ui" in output, output
    assert "document.processed" in output, output
