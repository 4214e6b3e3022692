"""Running the typer app so that the command line parser's own refusals read as the
commands' do: one line ``error: usage: ...`` on stderr and exit code 2 (typer would print a
box of several lines), never a traceback."""

from __future__ import annotations

import importlib
from typing import Any

import typer

from flowpark.errors import ErrorCode

__all__ = ["one_line", "run_parsed"]


def one_line(value: object) -> str:
    """``value``'s text on one line (its runs of whitespace, newlines too, as one space)."""
    return " ".join(str(value).split())


def _click_exceptions() -> Any:
    """The module of the parser's exceptions: typer's own copy of click in the typer
    releases that carry one, else click's."""
    try:
        return importlib.import_module("typer._click.exceptions")
    except ImportError:  # an older typer, over click itself
        return importlib.import_module("click.exceptions")


def run_parsed(app: typer.Typer) -> int:
    """Run ``app`` on ``sys.argv`` and answer its exit code.

    Returns:
        The command's exit code (0 when it returned normally).

    Raises:
        SystemExit: 2 after a usage error (one line ``error: usage: <what> (see <command>
            --help)``) or a command group called without a command (its help printed);
            a parser error's own code after any other; 1 when aborted.
    """
    click = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except click.NoArgsIsHelpError:  # the help was printed
        raise SystemExit(2) from None
    except click.UsageError as exc:  # one line, as the commands' own usage errors
        where = f" (see {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
        message = one_line(exc.format_message())
        typer.echo(f"error: {ErrorCode.USAGE}: {message}{where}", err=True)
        raise SystemExit(exc.exit_code) from None
    except click.ClickException as exc:
        typer.echo(f"error: {one_line(exc.format_message())}", err=True)
        raise SystemExit(exc.exit_code) from None
    except typer.Abort:
        typer.echo("Aborted!", err=True)
        raise SystemExit(1) from None
    return code if isinstance(code, int) else 0
