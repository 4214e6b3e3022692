"""Edges of the operator CLI a new user meets: a cancel of an instance whose call is in flight
says it was requested (not done); the parser's own usage errors are one line ``error: usage:
...`` (exit 2) as the commands' are; no ``--help`` cuts a word (a variable name) short."""

from __future__ import annotations

import shutil
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from flowpark.cli.main import app, main
from flowpark.engine.records import NewInstance
from tests.api.operator_support import operated
from tests.engine.flows import poll_flow


def _run_main(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["flowpark", *args])
    with pytest.raises(SystemExit) as exited:
        main()
    return int(exited.value.code or 0)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("instances", "list", "--state", "bogus"), "Invalid value for '--state': 'bogus'"),
        (("instances", "lst"), "No such command 'lst'"),
        (("reviews", "show"), "Missing argument 'REVIEW'"),
        (("instances", "list", "--limit", "0"), "Invalid value for '--limit'"),
    ],
)
def test_a_usage_error_of_the_parser_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: Any, says: str
) -> None:
    assert _run_main(monkeypatch, *args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("error: usage: ") and says in line, line
    assert line.endswith(" --help)"), line


def test_version_and_help_still_exit_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_main(monkeypatch, "--version") == 0
    assert "flowpark" in capsys.readouterr().out
    assert _run_main(monkeypatch, "reviews", "--help") == 0
    assert "claim" in capsys.readouterr().out


def _commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    for name, sub in getattr(command, "commands", {}).items():
        found += _commands(sub, (*path, name))
    return found


def test_no_help_cuts_a_word_at_80_columns() -> None:
    runner = CliRunner()
    for path in _commands(get_command(app)):
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
        assert shown.exit_code == 0, (path, shown.output)
        # the only ellipsis allowed is the console's short form of an id, in examples
        text = shown.output.replace("01a242e6…3058c5", "")
        assert "…" not in text, (path, text)


async def test_a_cancel_of_an_instance_with_a_call_in_flight_says_it_was_requested(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    async with operated(f"sqlite:///{tmp_path / 'flowpark.db'}", [poll_flow()]) as op:
        now = op.h.clock.now()
        record, _ = await op.h.store.intake.create_instance(
            NewInstance(
                id=op.h.engine.new_id(),
                flow_name="t.poll",
                flow_version="1.0.0",
                input={"order_id": "o-busy"},
                created_at=now,
                deadline_at=None,
                lease_owner="busy-node",  # a node is in the middle of a call
                lease_expires_at=now + timedelta(minutes=5),
            )
        )
        env = {"FLOWPARK_URL": op.server.base_url, "FLOWPARK_TOKEN": op.server.token}
        done = CliRunner().invoke(app, ["instances", "cancel", record.id], env=env)
    assert done.exit_code == 0, done.output
    assert "cancel requested; it takes effect when the call in flight ends" in done.stdout
    assert "cancel done" not in done.stdout
