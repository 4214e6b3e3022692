"""``flowpark demo --embedded`` end to end in a child process: the shop is served, its order
is paid by the payment flow, and the order it refuses after the start leaves nothing."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.server import flowpark_command, free_port

DEMO_TIMEOUT = 120


@pytest.mark.slow
@pytest.mark.timeout(DEMO_TIMEOUT + 30)
def test_the_embedded_demo_pays_an_order_and_rolls_back_a_refused_one(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            *flowpark_command(),
            "demo",
            "--embedded",
            "--port",
            str(free_port()),
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
    assert (tmp_path / "shop.db").is_file()  # the default database of --embedded
    assert "flowpark included at /flowpark" in output, output
    assert "order=paid" in output and "payment=completed" in output, output
    assert "signal payment.succeeded" in output, output  # the journal: the webhook ended it
    assert "POST /orders -> 422" in output, output
    counts = re.search(r"payment\.await instances: (\d+) before, (\d+) after", output)
    assert counts and counts[1] == counts[2], output
    assert "intents for o-" in output and ": 0 (nothing was called)" in output, output
    assert "/docs" in output and "/flowpark/api/v1/instances" in output, output
