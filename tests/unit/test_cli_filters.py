"""The operator CLI's filter options are declared once (``with_filters``): ``list``,
``wake`` and ``cancel`` take the same ten, and each reaches the API as the list's filter."""

from __future__ import annotations

from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from flowpark.cli import _client
from flowpark.cli.instances import instances_app
from flowpark.cli.main import app

FILTER_OPTIONS = {
    "--flow",
    "--version",
    "--state",
    "--overdue",
    "--stuck",
    "--error-code",
    "--waiting",
    "--instance-key",
    "--created-after",
    "--created-before",
}


def _options(name: str) -> set[str]:
    command = typer.main.get_command(instances_app).commands[name]  # type: ignore[attr-defined]
    return {opt for param in command.params for opt in param.opts if opt.startswith("--")}


@pytest.mark.parametrize("name", ["list", "wake", "cancel"])
def test_each_command_takes_the_ten_filter_options(name: str) -> None:
    assert _options(name) >= FILTER_OPTIONS


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any]]]:
    """The API calls the CLI makes (answered with empty pages, nothing sent)."""
    made: list[tuple[str, str, dict[str, Any]]] = []

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        made.append((method, path, kwargs))
        return {"matched": 0, "instances": [], "nextCursor": None}

    monkeypatch.setattr(_client._Api, "call", call)
    return made


def test_filters_reach_the_bulk_body_and_the_list_query(
    calls: list[tuple[str, str, dict[str, Any]]],
) -> None:
    filters = ["--flow", "f", "--state", "failed", "--state", "suspended", "--stuck"]
    filters += ["--error-code", "e", "--waiting", "poll", "--overdue", "60"]
    filters += ["--instance-key", "k", "--created-after", "2026-01-01T00:00:00Z"]
    filters += ["--created-before", "2026-02-01T00:00:00Z"]
    runner = CliRunner()
    for command in (["wake"], ["cancel"], ["list"]):
        done = runner.invoke(app, ["instances", *command, *filters, "--json"])
        assert done.exit_code == 0, done.output
    expected = {
        "flow": "f",
        "state": ["failed", "suspended"],
        "stuck": True,
        "errorCode": "e",
        "waiting": "poll",
        "overdue": 60.0,
        "instanceKey": "k",
        "createdAfter": "2026-01-01T00:00:00+00:00",
        "createdBefore": "2026-02-01T00:00:00+00:00",
    }
    (_, _, wake), (_, _, cancel), (_, path, listed) = calls
    assert wake["body"] == {"action": "wake", "filter": expected, "dryRun": True}
    assert cancel["body"] == {"action": "cancel", "filter": expected, "dryRun": True}
    assert path == "/api/v1/instances" and listed["params"] == {**expected, "limit": 50}


def test_all_is_sent_only_when_asked(calls: list[tuple[str, str, dict[str, Any]]]) -> None:
    runner = CliRunner()
    refused = runner.invoke(app, ["instances", "cancel"])
    assert refused.exit_code == 2 and calls == []
    every = runner.invoke(app, ["instances", "cancel", "--all", "--dry-run", "--json"])
    assert every.exit_code == 0, every.output
    assert calls[0][2]["body"] == {"action": "cancel", "filter": {}, "all": True, "dryRun": True}
