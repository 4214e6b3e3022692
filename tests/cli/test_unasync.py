"""The blocking client is written from the async one (scripts/unasync.py): the committed
file is current, and the check fails as soon as the async source changes without it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path("flowpark/client")


def _check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(root / "scripts" / "unasync.py"), "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_committed_blocking_client_is_what_the_script_writes() -> None:
    done = _check(ROOT, "--check")
    assert done.returncode == 0, done.stderr


def test_the_check_fails_when_the_async_client_changes_alone(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy2(ROOT / "scripts" / "unasync.py", tmp_path / "scripts")
    (tmp_path / CLIENT).mkdir(parents=True)
    for name in ("_async.py", "_sync.py"):
        shutil.copy2(ROOT / CLIENT / name, tmp_path / CLIENT / name)
    assert _check(tmp_path, "--check").returncode == 0
    source = tmp_path / CLIENT / "_async.py"
    source.write_text(
        source.read_text().replace(
            "    async def flows(self) -> list[FlowView]:",
            "    async def ping(self) -> None:\n"
            '        """Ask the node once."""\n'
            "        await self.flows()\n\n"
            "    async def flows(self) -> list[FlowView]:",
        )
    )
    stale = _check(tmp_path, "--check")
    assert stale.returncode == 1
    assert "flowpark/client/_sync.py is not what scripts/unasync.py writes" in stale.stderr
    assert _check(tmp_path).returncode == 0  # rewritten
    written = (tmp_path / CLIENT / "_sync.py").read_text()
    assert "    def ping(self) -> None:\n" in written
    assert "        self.flows()\n" in written
    assert "await " not in written and "async def" not in written
    assert _check(tmp_path, "--check").returncode == 0
