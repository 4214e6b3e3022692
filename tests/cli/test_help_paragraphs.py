"""``flowpark <command> --help`` on a wide terminal (``COLUMNS=200``): help texts are
paragraphs the terminal wraps, never lines broken where the docstring's source broke them.

A line of a paragraph (the prose under ``Usage:``, or one cell of the Options and Commands
panels) may end only where the next word would not have fitted: any earlier break is a hard
wrap, a sentence broken mid-line. The lines typer adds under an option (``[env var: ...]``,
``[default: ...]``, ``[required]``) and list items are their own lines, not continuations.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.server import flowpark_command

WIDTH = 200
#: Slack for rich's padding: a break is a hard wrap only when the next word would have fitted
#: with this many columns to spare.
SLACK = 3
COMMANDS = [
    [],
    ["serve"],
    ["worker"],
    ["fakes"],
    ["nodes"],
    ["flows", "check"],
    ["instances"],
    ["instances", "show"],
    ["instances", "wake"],
]
_BOX = "│╭╰─╮╯"


def _help(command: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(COLUMNS=str(WIDTH), LINES="50", TERM="dumb", NO_COLOR="1")
    done = subprocess.run(
        [*flowpark_command(), *command, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _first_word(text: str) -> str:
    return text.split()[0] if text.split() else ""


def _continues(text: str) -> bool:
    """``text`` (a line's content) continues the line above it: not a list item, not one of
    typer's bracketed notes under an option."""
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith(("•", "-", "[", "*"))


def hard_wraps(output: str, width: int = WIDTH) -> list[str]:
    """The breaks in ``output`` (a help page) that the terminal did not need: each as
    ``'<end of the line> / <start of the next>'``."""
    found: list[str] = []
    lines = output.splitlines()
    # prose: the lines outside the panels, paragraphs split by blank lines
    for above, below in zip(lines, lines[1:], strict=False):
        if above[:1] in _BOX or below[:1] in _BOX or not above.strip():
            continue
        if _continues(below) and len(above.rstrip()) + 1 + len(_first_word(below)) <= (
            width - SLACK
        ):
            found.append(f"{above.strip()[-40:]} / {below.strip()[:40]}")
    # panels: a row whose help cell goes on in the next row (whose name columns are blank)
    rows = [line[1:].rstrip().removesuffix("│") for line in lines if line.startswith("│")]
    for above, below in zip(rows, rows[1:], strict=False):
        start = len(below) - len(below.lstrip())
        if start < 4 or not _continues(below) or len(above) <= start:
            continue  # the next row names an option or command of its own
        cell_width = width - 2 - start  # the panel's two borders
        cell = above[start:].rstrip()
        if len(cell) + 1 + len(_first_word(below)) <= cell_width - SLACK:
            found.append(f"{cell[-40:]} / {below.strip()[:40]}")
    return found


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "flowpark")
def test_help_is_paragraphs_the_terminal_wraps(command: list[str]) -> None:
    output = _help(command)

    assert "Usage: flowpark" in output, output
    assert max(len(line) for line in output.splitlines()) <= WIDTH, output
    assert hard_wraps(output) == [], output


def test_the_check_finds_a_hard_wrap() -> None:
    wrapped = (
        " Run a node with the HTTP API and the sweep.\n"
        "\n"
        " Exit codes: 3 when the database is unreachable or not\n"
        " migrated; 4 when a flow breaks a definition rule.\n"
        "╭─ Commands ─╮\n"
        "│ show    Explain one instance: state, what it waits for, budget, attempts with every"
        " try's" + " " * 94 + "│\n"
        "│         error, operator actions." + " " * 166 + "│\n"
        "│ wake    Wake one parked instance now." + " " * 161 + "│\n"
        "╰────────────╯\n"
    )
    found = hard_wraps(wrapped)
    assert [wrap.split(" / ")[1].split()[0] for wrap in found] == ["migrated;", "error,"], found
