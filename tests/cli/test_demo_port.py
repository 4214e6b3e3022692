"""``flowpark demo`` and its port: the socket is bound before anything else and held until
the demo ends, so a port taken meanwhile cannot break it; a port in use is one line and exit
code 2, before anything is migrated (no traceback); ``--port 0`` takes any free port."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flowpark.cli import demo
from flowpark.cli.demo import port_refused, run_demo


def test_a_free_port_is_not_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert port_refused("127.0.0.1", port) is None


def test_the_demo_on_a_busy_port_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        assert port_refused("127.0.0.1", port) == "address already in use"
        db = tmp_path / "demo.db"
        done = subprocess.run(
            [sys.executable, "-m", "flowpark.cli.main", "demo", "--port", str(port)]
            + ["--database-url", f"sqlite:///{db}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: cannot serve the demo on 127.0.0.1:{port}: address already in use "
        "(choose another with --port, or --port 0 for any free port)"
    ]
    assert "Traceback" not in done.stdout + done.stderr
    assert not db.exists()  # refused before migrating


def test_the_port_is_held_from_the_check_to_the_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Another process that tries the port while the demo migrates (a second demo, started
    at the same moment) finds it taken; the demo itself serves and completes."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    taken: list[str | None] = []
    from flowpark.store import migrate

    upgrade = migrate.upgrade

    def upgrade_while_another_tries(url: str, schema: str | None = None) -> None:
        taken.append(port_refused("127.0.0.1", port))
        upgrade(url, schema=schema)

    monkeypatch.setattr(migrate, "upgrade", upgrade_while_another_tries)
    code = run_demo(
        host="127.0.0.1",
        port=port,
        pages=1,
        per_page=0.01,
        scan_interval=0.1,
        database_url=f"sqlite:///{tmp_path / 'demo.db'}",
    )
    out = capsys.readouterr()
    assert taken == ["address already in use"]
    assert code == 0, out.err
    assert f"flowpark serving on http://127.0.0.1:{port} " in out.out
    assert "Traceback" not in out.out + out.err


def test_port_0_serves_on_a_free_port_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_demo(
        host="127.0.0.1",
        port=0,
        pages=1,
        per_page=0.01,
        scan_interval=0.1,
        database_url=f"sqlite:///{tmp_path / 'demo.db'}",
    )
    out = capsys.readouterr().out
    assert code == 0
    served = re.search(r"flowpark serving on http://127\.0\.0\.1:(\d+) ", out)
    assert served is not None and int(served[1]) > 0, out
    assert demo.port_refused("127.0.0.1", int(served[1])) is None  # released at the end
