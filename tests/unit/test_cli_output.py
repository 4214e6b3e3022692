"""What the operator CLI prints stays whole and secret-free: a line is never broken at
the terminal's width (80 columns when piped), a piped table keeps one line per row, and a
URL's password never reaches stderr."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from typer.testing import CliRunner

from flowpark.cli import EXIT_UNREACHABLE, _client
from flowpark.cli.main import app

#: An instance id (the commands take it as it is: nothing is looked up)
ID = "01a232b9-0995-7449-8556-23fef0c5e08e"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_node_is_one_line_without_the_urls_password(
    monkeypatch: pytest.MonkeyPatch, retries_at_once: list[float]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    url = f"http://operator:hunter2-secret@127.0.0.1:{_closed_port()}/some/long/path/prefix"
    done = CliRunner().invoke(app, ["instances", "list", "--url", url, "--token", "t0ken"])
    assert done.exit_code == EXIT_UNREACHABLE
    assert len(retries_at_once) == 3  # the read was sent again before the CLI gave up
    assert "hunter2-secret" not in done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unreachable: "), lines
    assert "operator:***@127.0.0.1" in lines[0]
    assert lines[0].endswith(
        "(is a node serving there? pass its URL with --url or set FLOWPARK_URL)"
    )


def test_the_next_cursor_is_printed_whole_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    cursor = "W" * 150

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        return {"instances": [], "nextCursor": cursor}

    monkeypatch.setattr(_client._Api, "call", call)
    done = CliRunner().invoke(app, ["instances", "list", "--token", "t0ken"])
    assert done.exit_code == 0, done.output
    assert f"more: --cursor {cursor}\n" in done.stderr


def test_an_action_answers_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    answer = {
        "endsAt": "2026-01-01T12:00:00Z",
        "previousEndsAt": "2026-01-01T10:00:00Z",
        "cappedByDeadline": True,
    }
    monkeypatch.setattr(_client._Api, "call", lambda self, *a, **k: answer)
    instance_id = "01a232b9-0995-7449-8556-23fef0c5e08e"
    done = CliRunner().invoke(app, ["instances", "extend", instance_id, "--by", "PT2H"])
    assert done.exit_code == 0, done.output
    assert done.stdout.count("\n") == 1 and done.stdout.startswith(instance_id), done.stdout
    assert "(capped by the flow deadline)" in done.stdout


def test_watch_prints_each_change_on_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "30")
    view: dict[str, Any] = {
        "instanceId": "01a232b9-0995-7449-8556-23fef0c5e08e",
        "flow": "document.process",
        "version": "1.0.0",
        "state": "completed",
        "createdAt": "2026-01-01T10:00:00Z",
        "updatedAt": "2026-01-01T12:00:00Z",
        "wakeAt": None,
        "journal": [],
    }
    monkeypatch.setattr(_client._Api, "call", lambda self, *a, **k: view)
    done = CliRunner().invoke(app, ["instances", "show", str(view["instanceId"]), "--watch"])
    assert done.exit_code == 0, done.output
    first = done.stdout.splitlines()[0]
    assert first.startswith("2026-01-01 12:00:00Z  completed") and first.endswith("wake at -")


@pytest.mark.parametrize("url", ["nonsense", "http://", "ftp://x", "http://u:pw-secret@[::1"])
def test_a_url_that_names_no_node_is_bad_usage(url: str) -> None:
    done = CliRunner().invoke(app, ["instances", "list", "--url", url, "--token", "t0ken"])
    assert done.exit_code == 2, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: usage: --url "), lines
    assert "pw-secret" not in done.stderr


def test_extend_sends_every_duration_form_as_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    bodies: list[Any] = []

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        bodies.append(kwargs["body"]["extendBy"])
        return {"endsAt": None, "previousEndsAt": None}

    monkeypatch.setattr(_client._Api, "call", call)
    for by in ("3600", "1.5", "PT2H", "2h", "90m", "1h30m", "1e3", "1d"):
        done = CliRunner().invoke(app, ["instances", "extend", ID, "--by", by])
        assert done.exit_code == 0, done.output
    assert bodies == [3600.0, 1.5, 7200.0, 7200.0, 5400.0, 5400.0, 1000.0, 86400.0]


@pytest.mark.parametrize(
    ("by", "says"),
    [
        ("-5", "is not a duration (90, 90s, 15m, 2h, 1d, 1h30m or PT2H)"),
        ("inf", "is not a duration"),
        ("2 hours", "is not a duration"),
        ("0", "is not a duration above zero"),
        ("PT", "is not a duration"),
    ],
)
def test_extend_refuses_what_is_no_duration_in_its_own_words(
    monkeypatch: pytest.MonkeyPatch, by: str, says: str
) -> None:
    monkeypatch.setattr(_client._Api, "call", lambda *a, **k: pytest.fail("nothing is sent"))
    done = CliRunner().invoke(app, ["instances", "extend", ID, "--by", by])
    assert done.exit_code == 2
    assert done.stderr.startswith(f"error: usage: --by {by!r} {says}"), done.stderr
    assert "pydantic" not in done.stderr and "Input should" not in done.stderr


def test_filters_take_durations_and_instants_as_people_type_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import UTC, datetime, timedelta

    sent: list[dict[str, Any]] = []

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        sent.append(kwargs["params"])
        return {"instances": [], "nextCursor": None}

    monkeypatch.setattr(_client._Api, "call", call)
    args = ["instances", "list", "--overdue", "15m", "--created-after", "yesterday"]
    done = CliRunner().invoke(app, [*args, "--created-before", "2099-12-01T09:30"])
    assert done.exit_code == 0, done.output
    [params] = sent
    assert params["overdue"] == 900.0
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert params["createdAfter"] == (midnight - timedelta(days=1)).isoformat()
    assert params["createdBefore"] == "2099-12-01T09:30:00+00:00"  # no offset: UTC
    bad = CliRunner().invoke(app, ["instances", "list", "--created-after", "last tuesday"])
    assert bad.exit_code == 2
    assert bad.stderr.startswith("error: usage: --created-after 'last tuesday' is not an instant")


@pytest.mark.parametrize("ago", ["99999999d", "99999999999d", "1e300"])
def test_an_instant_further_back_than_any_date_is_bad_usage(
    monkeypatch: pytest.MonkeyPatch, ago: str
) -> None:
    monkeypatch.setattr(_client._Api, "call", lambda *a, **k: pytest.fail("nothing is sent"))
    done = CliRunner().invoke(app, ["instances", "list", "--created-after", ago])
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"error: usage: --created-after {ago!r} is not an instant")
    assert "Traceback" not in done.output


def test_a_piped_list_is_one_line_per_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    row: dict[str, Any] = {
        "instanceId": "01a232b9-0995-7449-8556-23fef0c5e08e",
        "flow": "document.process",
        "version": "1.0.0",
        "state": "suspended",
        "waitingFor": {"kind": "poll", "capability": "ocr.status"},
        "wakeAt": "2026-01-01T12:00:00Z",
        "budgetEndsAt": "2026-01-01T13:00:00Z",
        "errorCode": "provider.rejected_because_of_a_long_reason",
    }
    answer = {"instances": [row, {**row, "instanceId": row["instanceId"][:-1] + "f"}]}
    monkeypatch.setattr(_client._Api, "call", lambda self, *a, **k: {**answer, "nextCursor": None})
    done = CliRunner().invoke(app, ["instances", "list", "--token", "t0ken"])
    assert done.exit_code == 0, done.output
    lines = done.stdout.splitlines()
    assert len(lines) == 4, lines  # header, two rows, the count
    assert "document.process@1.0.0" in lines[1] and row["errorCode"] in lines[1]
    assert lines[2].split()[0].endswith("f")


def test_a_list_on_a_narrow_terminal_fits_its_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    flows = [{"name": "document.process", "version": "1.0.0", "signals": ["ocr.completed"] * 4}]
    monkeypatch.setattr(_client._Api, "call", lambda self, *a, **k: flows)
    done = CliRunner().invoke(app, ["flows", "list", "--token", "t0ken"])
    assert done.exit_code == 0, done.output
    assert max(len(line) for line in done.stdout.splitlines()) <= 60


def test_counts_take_the_overdue_threshold_as_list_does(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []

    def call(self: Any, method: str, path: str, **kwargs: Any) -> Any:
        sent.append(kwargs["params"]["overdue"])
        return {"byState": [], "overdue": 0, "stuck": 0, "total": 0}

    monkeypatch.setattr(_client._Api, "call", call)
    for given in ("15m", "90", "PT2H"):
        done = CliRunner().invoke(app, ["instances", "counts", "--overdue", given])
        assert done.exit_code == 0, done.output
    assert sent == [900.0, 90.0, 7200.0]
    refused = CliRunner().invoke(app, ["instances", "counts", "--overdue", "-1"])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("error: usage: --overdue '-1' is not a duration")


def test_a_bulk_action_says_what_it_could_not_act_on(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {"matched": 3, "actionable": 0, "acted": 0, "skipped": 0}
    monkeypatch.setattr(_client._Api, "call", lambda *a, **k: answers)
    done = CliRunner().invoke(app, ["instances", "wake", "--state", "completed"])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == (
        "wake: 0 acted on, 0 skipped of 3 matching; 3 in a state wake does not act on"
    )


def test_a_reversed_creation_range_is_a_usage_error_sent_nowhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_client._Api, "call", lambda *a, **k: pytest.fail("nothing is sent"))
    args = ["--created-after", "2026-12-05", "--created-before", "2026-12-01"]
    done = CliRunner().invoke(app, ["instances", "list", *args])
    assert done.exit_code == 2
    assert done.stderr.startswith(
        "error: usage: --created-after (2026-12-05T00:00:00+00:00) is not before --created-before"
    ), done.stderr


def test_a_narrow_terminal_lists_ids_in_the_consoles_short_form(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row: dict[str, Any] = {
        "instanceId": ID,
        "flow": "document.process",
        "version": "1.0.0",
        "state": "suspended",
        "waitingFor": {"kind": "poll", "capability": "ocr.status"},
        "wakeAt": "2026-01-01T12:00:00Z",
    }
    answer = {"instances": [row], "nextCursor": None}
    monkeypatch.setattr(_client._Api, "call", lambda self, *a, **k: answer)
    for columns in ("80", "120"):
        monkeypatch.setenv("COLUMNS", columns)
        done = CliRunner().invoke(app, ["instances", "list", "--token", "t0ken"])
        assert done.exit_code == 0, done.output
        if columns == "80":
            assert f"{ID[:8]}…{ID[-6:]}" in done.stdout and ID not in done.stdout, done.stdout
        else:
            assert ID in done.stdout, done.stdout
