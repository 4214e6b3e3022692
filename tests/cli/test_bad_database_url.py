"""``flowpark db upgrade`` and ``flowpark demo`` refuse a database URL they cannot use (not a
URL, an unsupported database, a host list it cannot read, an unreachable server or hosts)
with one line ``error:
store_unavailable: ...`` and exit code 3: no traceback, and never the URL's password."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flowpark.cli.main import EXIT_STORE


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


URLS = {
    "not a URL": "nonsense",
    "unsupported": "mysql://app:pw-secret-1@127.0.0.1/x",
    "unreachable": f"postgresql://app:pw-secret-1@127.0.0.1:{_closed_port()}/x",
    "unreadable host list": "postgresql://app:pw-secret-1@db-a:5432,db-b:x/flowpark",
    "no host of the list answers": (
        f"postgresql://app:pw-secret-1@127.0.0.1:{_closed_port()},127.0.0.1:{_closed_port()}/x"
    ),
}


@pytest.mark.parametrize("case", list(URLS))
@pytest.mark.parametrize("command", ["db upgrade", "demo"])
def test_a_database_url_that_cannot_be_used_is_one_line(
    case: str, command: str, tmp_path: Path
) -> None:
    url = URLS[case]
    args = ["db", "upgrade", "--url", url]
    if command == "demo":
        args = ["demo", "--port", str(_closed_port()), "--database-url", url]
    done = subprocess.run(
        [sys.executable, "-m", "flowpark.cli.main", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_STORE, output
    assert "Traceback" not in output and "pw-secret-1" not in output, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: store_unavailable: "), output
