"""Every option of the CLI that takes a value names what it takes (URL, INSTANT, SECONDS...)
in ``--help``, where the bare type (``<str>``, ``<float>``) said nothing; a choice lists its
values; every option keeps its lower-case name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from app.cli import app


def _commands(command: Any, path: tuple[str, ...] = ("flowpark",)) -> Iterator[tuple[str, Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands is None:
        yield " ".join(path), command
        return
    for name, sub in subcommands.items():
        yield from _commands(sub, (*path, name))


def _valued_options() -> list[tuple[str, Any]]:
    return [
        (name, param)
        for name, command in _commands(typer.main.get_command(app))
        for param in command.params
        if param.param_type_name == "option" and not param.is_flag and param.name != "help"
    ]


def test_every_option_that_takes_a_value_names_it() -> None:
    options = _valued_options()
    assert len(options) > 40  # the walk reached the operator commands too
    unnamed = [
        f"{command} {param.opts[0]}"
        for command, param in options
        if param.metavar is None and param.type.name != "choice"
    ]
    assert unnamed == []


def test_option_names_stay_lower_case() -> None:
    upper = [
        f"{command} {opt}"
        for command, param in _valued_options()
        for opt in param.opts
        if opt.startswith("--") and not opt[2:].islower()
    ]
    assert upper == []


def test_the_help_shows_the_placeholder() -> None:
    shown = CliRunner().invoke(app, ["instances", "list", "--help"], env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    assert "INSTANT" in shown.output and "DURATION" in shown.output
    assert "<str>" not in shown.output
