"""The CLI never sends a control character of what it prints to the terminal raw: stored
text (a review's note, its subject, an instance's error) holding ESC, an OSC title sequence,
a C1 CSI or DEL is shown escaped (``\\x1b``), in lines, tables, errors and JSON alike; and
every printer of the CLI goes through the consoles that do so."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from flowpark.cli import _client
from flowpark.cli.consoles import json_text, printable
from flowpark.cli.main import app

ID = "01a232b9-0995-7449-8556-23fef0c5e08e"
#: set the terminal's title, clear the screen, a C1 CSI (red), DEL, a carriage return
EVIL = "done\x1b]0;pwned\x07 \x1b[2J\x9b31mred\x7f\rover"
#: how it shows: each control escaped (rich drops BEL and CR from a text before: never raw)
SHOWN = "done\\x1b]0;pwned \\x1b[2J\\x9b31mred\\x7fover"
#: what may reach the terminal raw: a tab, a line feed, and (no terminal here) no ESC at all
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
CLI = Path(__file__).resolve().parents[2] / "flowpark" / "cli"

REVIEW = {
    "id": "rev-1",
    "sequence": 1,
    "instanceId": ID,
    "flow": "t.poll",
    "subject": f"subject {EVIL}",
    "reason": f"reason {EVIL}",
    "details": {"why": EVIL},
    "state": "resolved",
    "createdAt": "2026-01-01T10:00:00Z",
    "claimedBy": "ops",
    "claimedAt": "2026-01-01T10:01:00Z",
    "closedBy": "ops",
    "closedAt": "2026-01-01T10:02:00Z",
    "note": f"note {EVIL}",
}
INSTANCE = {
    "instanceId": ID,
    "flow": "t.poll",
    "version": "1.0.0",
    "state": "failed",
    "error": {"code": "t.not_done", "message": f"message {EVIL}"},
}


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> None:
    """A node that answers the review and its instance, as stored by anyone."""
    monkeypatch.setenv("COLUMNS", "300")

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        if path.startswith("/api/v1/instances/"):
            return INSTANCE
        if path == "/api/v1/reviews":
            return [REVIEW]
        return REVIEW

    monkeypatch.setattr(_client._Api, "call", call)


def _invoke(*args: str) -> Any:
    done = CliRunner().invoke(app, [*args, "--token", "t0ken"])
    assert done.exit_code == 0, done.output
    return done


def test_reviews_show_prints_stored_text_escaped_never_raw(node: None) -> None:
    done = _invoke("reviews", "show", "rev-1")
    assert RAW.search(done.stdout) is None, repr(done.stdout)
    for line in (
        "subject: subject ",
        "reason: reason ",
        "note: note ",
        "error: t.not_done: message ",
    ):
        assert line + SHOWN in done.stdout, done.stdout


def test_a_table_of_stored_text_is_escaped_too(node: None) -> None:
    done = _invoke("reviews", "list")
    assert RAW.search(done.stdout) is None, repr(done.stdout)
    for part in SHOWN.split(" "):  # a column may wrap the text at its space
        assert part in done.stdout


def test_json_output_carries_the_same_strings_as_escapes(node: None) -> None:
    done = _invoke("reviews", "show", "rev-1", "--json")
    assert RAW.search(done.stdout) is None, repr(done.stdout)
    assert json.loads(done.stdout) == {**REVIEW, "instance": INSTANCE}  # the same values


def test_an_error_echoing_stored_text_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = {
        "type": "about:blank",
        "title": "review_not_found",
        "status": 404,
        "code": "review_not_found",
        "detail": f"no review {EVIL}",
    }
    transport = httpx.MockTransport(
        lambda request: httpx.Response(
            404, json=problem, headers={"content-type": "application/problem+json"}
        )
    )

    class Mocked(httpx.Client):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "transport": transport})

    monkeypatch.setattr(httpx, "Client", Mocked)
    done = CliRunner().invoke(app, ["reviews", "show", "x", "--token", "t0ken"])
    assert done.exit_code != 0
    assert RAW.search(done.stderr) is None, repr(done.stderr)
    assert "no review done\\x1b]0;pwned" in done.stderr, done.stderr


def test_the_helpers_escape_every_control_but_tab_and_line_feed() -> None:
    for code in range(0xA0 + 1):
        ch = chr(code)
        control = code < 0x20 or 0x7F <= code <= 0x9F
        if ch in "\t\n" or not control:
            assert printable(ch) == ch
        else:
            assert printable(ch) == f"\\x{code:02x}"
        text = json_text({"k": ch})
        assert RAW.search(text.replace("\n", "")) is None or not control
        assert json.loads(text) == {"k": ch}


def test_every_cli_printer_goes_through_the_escaping_consoles() -> None:
    """No module of the CLI makes a console of its own, writes with print() or echoes JSON
    with raw non-ASCII text it did not make with :func:`json_text` (JSON in ASCII escapes
    every control; the demo's print() lines say what the demo itself does, and print its
    journal through :func:`printable`)."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            if name in ("Console", "rich.console.Console") and path.name != "consoles.py":
                found.append(f"{path.name}:{node.lineno}: {name}(")
            said = ast.unparse(node)
            if name == "typer.echo" and "json.dumps" in said and "ensure_ascii=False" in said:
                found.append(f"{path.name}:{node.lineno}: typer.echo(json.dumps(...))")
            if name == "print" and path.name not in ("demo.py",):
                found.append(f"{path.name}:{node.lineno}: print(")
    assert found == []
