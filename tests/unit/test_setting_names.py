"""A ``FLOWPARK_*`` variable that names no setting is warned of when a node starts (with the
closest setting's name), not silently ignored; the node's own URLs must be http(s) URLs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from flowpark.cli.main import app
from flowpark.settings import Settings, unknown_names


def test_a_misspelt_setting_is_named_with_the_closest_one() -> None:
    environ = {
        "FLOWPARK_TIMER_SCAN_INTERVL": "1",
        "FLOWPARK_DATABASE_URL": "sqlite:///x.db",  # a setting
        "FLOWPARK_URL": "http://127.0.0.1:8000",  # the CLI's
        "FLOWPARK_TEST_PG_URL": "postgresql://",  # the test suite's
        "FLOWPARK_ZZZ": "1",
        "OTHER": "1",
    }
    assert unknown_names(environ) == [
        ("FLOWPARK_TIMER_SCAN_INTERVL", "FLOWPARK_TIMER_SCAN_INTERVAL"),
        ("FLOWPARK_ZZZ", None),
    ]


def test_a_served_flows_own_names_are_known() -> None:
    environ = {"FLOWPARK_OCR_BASE_URL": "http://x"}
    assert [n for n, _ in unknown_names(environ)] == ["FLOWPARK_OCR_BASE_URL"]
    assert unknown_names(environ, ["FLOWPARK_OCR_BASE_URL"]) == []


def test_serve_warns_of_each_unknown_name_before_it_checks_the_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWPARK_DATABASE_URL", f"sqlite:///{tmp_path}/missing.db")
    monkeypatch.setenv("FLOWPARK_SWEEP_INTERVAL", "1")
    monkeypatch.setenv("FLOWPARK_OCR_BASE_URL", "http://127.0.0.1:9")  # the samples' setting
    done = CliRunner().invoke(app, ["serve", "--port", "0"])
    assert done.exit_code == 3  # the missing database: nothing was served
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: FLOWPARK_SWEEP_INTERVAL is no flowpark setting and is ignored (did you mean "
        "FLOWPARK_TIMER_SCAN_INTERVAL?); docs/settings.md lists them"
    ]


@pytest.mark.parametrize("url", ["notaurl", "ftp://host", "http://", "127.0.0.1:8000"])
def test_the_nodes_own_urls_must_be_http_urls(url: str) -> None:
    with pytest.raises(ValidationError, match="is not an http:// or https:// base URL"):
        Settings(self_url=url)
    with pytest.raises(ValidationError, match="is not an http:// or https:// base URL"):
        Settings(public_base_url=url)
    assert Settings(self_url=" https://flowpark.example.com ").self_url == (
        "https://flowpark.example.com"
    )
