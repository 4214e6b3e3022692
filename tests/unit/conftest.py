"""The fast tier: ``pytest tests/unit`` answers in seconds.

A test here needs no database server and starts no process: SQLite files, in-process
apps (``httpx.ASGITransport``, typer's ``CliRunner``) and the virtual clock only. Both are
enforced, so the tier stays fast:

* a test here that starts a child process fails with where to put it (``tests/cli`` runs
  the ``flowpark`` command and other programs as child processes);
* a test here marked ``postgres`` or ``slow`` is a collection error.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a PostgreSQL or slow test in the fast tier (a usage error names them)."""
    misplaced = [
        item.nodeid
        for item in items
        if item.path.is_relative_to(HERE)
        and any(item.get_closest_marker(name) for name in ("postgres", "slow"))
    ]
    if misplaced:
        raise pytest.UsageError(
            "tests/unit is the fast tier (no database server, no child process); move these "
            "to tests/postgres, tests/cli or tests/e2e:\n  " + "\n  ".join(misplaced)
        )


@pytest.fixture(autouse=True)
def _no_child_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test that starts a child process (``subprocess``, ``asyncio`` subprocesses)."""

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"tests/unit starts no process (it ran {args!r}): put this test in tests/cli"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    yield
