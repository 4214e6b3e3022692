"""``flowpark demo`` on a port another process listens on prints one line and exits 3,
before it migrates anything (no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from app.demo import port_refused


def test_a_free_port_is_not_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port_refused("127.0.0.1", port) is None


def test_the_demo_on_a_busy_port_prints_one_line_and_exits_3(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert port_refused("127.0.0.1", port) == "address already in use"
        db = tmp_path / "demo.db"
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", "demo", "--port", str(port)]
            + ["--database-url", f"sqlite:///{db}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 3, done.stderr
    assert done.stderr.splitlines() == [
        f"error: cannot serve the demo on 127.0.0.1:{port}: address already in use "
        "(choose another with --port)"
    ]
    assert "Traceback" not in done.stdout + done.stderr
    assert not db.exists()  # refused before migrating
