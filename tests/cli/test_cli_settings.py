"""A ``FLOWPARK_*`` variable that does not validate is refused by every command with one
line ``error: settings_invalid: <variable>: <why>`` and exit code 2: no traceback, and
never the variable's value (a webhook secret or a token may be in it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flowpark.cli.main import EXIT_SETTINGS
from flowpark.settings import Settings
from tests.support.server import flowpark_command

SECRET = "whsec_c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw"

CASES = {
    "an unknown choice": (
        {"FLOWPARK_METRICS_ACCESS": "bogus"},
        "FLOWPARK_METRICS_ACCESS: Input should be 'loopback', 'token' or 'open'",
    ),
    "a subscriber without a name": (
        {"FLOWPARK_SUBSCRIBERS": f'[{{"url": "http://x", "secret": "{SECRET}"}}]'},
        "FLOWPARK_SUBSCRIBERS (subscribers.0.name): Field required",
    ),
    "subscribers that are not JSON": (
        {"FLOWPARK_SUBSCRIBERS": f'[{{"name": "a", "secret": "{SECRET}"'},
        "FLOWPARK_SUBSCRIBERS cannot be parsed: ",
    ),
    "a provider rate of 0": (
        {"FLOWPARK_PROVIDER_LIMITS": '{"ocr": {"rate_per_second": 0}}'},
        "FLOWPARK_PROVIDER_LIMITS: Value error, provider 'ocr': rate_per_second must be a "
        "number from 0.001 to 1e+06",
    ),
    "a negative provider rate": (
        {"FLOWPARK_PROVIDER_LIMITS": '{"ocr": {"rate_per_second": -5, "burst": 2}}'},
        "FLOWPARK_PROVIDER_LIMITS: Value error, provider 'ocr': rate_per_second must be",
    ),
    "two tokens with one name": (
        {"FLOWPARK_API_TOKENS": "ops:ops-token-1:read,ops:ops-token-2:operate"},
        "FLOWPARK_API_TOKENS: Value error, FLOWPARK_API_TOKENS names two tokens 'ops'",
    ),
    "a schema name that is no plain identifier": (
        {"FLOWPARK_DATABASE_SCHEMA": "Flow-Park"},
        "FLOWPARK_DATABASE_SCHEMA: Value error, a schema name is a plain SQL identifier",
    ),
    "a schema on SQLite": (  # the database URL of every case is a SQLite file
        {"FLOWPARK_DATABASE_SCHEMA": "flowpark"},
        "FLOWPARK_DATABASE_SCHEMA: Value error, SQLite has no schemas",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("command", [["serve", "--port", "9"], ["db", "upgrade"]], ids=str)
def test_a_setting_that_does_not_validate_is_one_line(
    case: str, command: list[str], tmp_path: Path
) -> None:
    variables, expected = CASES[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(variables, FLOWPARK_DATABASE_URL=f"sqlite:///{tmp_path / 'f.db'}")
    done = subprocess.run(
        [*flowpark_command(), *command],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_SETTINGS, output
    assert "Traceback" not in output and SECRET not in output, output
    assert "ops-token-" not in output, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: settings_invalid: "), output
    assert expected in lines[0], output


def test_two_tokens_with_one_name_are_refused_when_the_settings_are_read() -> None:
    with pytest.raises(ValueError, match="names two tokens 'ops'"):
        Settings(api_tokens="ops:a-token:read,ops:b-token:operate")
