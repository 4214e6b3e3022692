"""Every option of the CLI that takes a value names what it takes (URL, INSTANT, SECONDS...)
in ``--help``, where the bare type (``<str>``, ``<float>``) said nothing; a choice lists its
values; every option keeps its lower-case name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from flowpark.cli.main import app


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
        if param.param_type_name == "argument"
        or (param.param_type_name == "option" and not param.is_flag and param.name != "help")
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


@pytest.mark.parametrize("command", ["serve", "worker", "fakes"])
def test_an_unknown_log_level_is_one_usage_error_naming_the_levels(command: str) -> None:
    done = CliRunner().invoke(app, [command, "--log-level", "loud"], env={"COLUMNS": "200"})
    assert done.exit_code == 2
    assert (
        "Traceback" not in done.output
        and done.exception is None
        or isinstance(done.exception, SystemExit)
    )
    assert "'loud' is not one of 'critical', 'error', 'warning', 'info', 'debug'" in done.output


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["serve", "--port", "-1"], "-1 is not in the range 0<=x<=65535"),
        (["serve", "--port", "70000"], "70000 is not in the range 0<=x<=65535"),
        (["serve", "--workers", "0"], "0 is not in the range x>=1"),
        (["fakes", "--port", "-1"], "-1 is not in the range 0<=x<=65535"),
    ],
)
def test_serve_and_fakes_refuse_numbers_out_of_range_before_anything_starts(
    args: list[str], said: str
) -> None:
    done = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert done.exit_code == 2
    assert said in done.output
