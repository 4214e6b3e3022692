"""``flowpark serve`` / ``worker`` refuse a database they cannot run on with one line
``error: <code>: <message>`` and exit code 3: no traceback, no empty SQLite file left."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from flowpark.cli.main import EXIT_STORE
from tests.support.server import flowpark_command, free_port

COMMANDS = [["serve", "--port", "9"], ["worker"]]  # port 9: never reached


def _run(args: list[str], database_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env["FLOWPARK_DATABASE_URL"] = database_url
    return subprocess.run(
        [*flowpark_command(), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def _refused(done: subprocess.CompletedProcess[str], code: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == EXIT_STORE, output
    assert "Traceback" not in output, output
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"error: {code}: "), output
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_missing_sqlite_file_is_refused_and_not_created(
    command: list[str], tmp_path: Path
) -> None:
    path = tmp_path / "flowpark.db"
    line = _refused(_run(command, f"sqlite:///{path}", tmp_path), "schema_behind_head")
    assert "flowpark db upgrade" in line and str(path) in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_an_unmigrated_sqlite_file_is_refused(command: list[str], tmp_path: Path) -> None:
    path = tmp_path / "flowpark.db"
    path.touch()
    line = _refused(_run(command, f"sqlite:///{path}", tmp_path), "schema_behind_head")
    assert "flowpark db upgrade" in line


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_a_sqlite_file_in_a_missing_directory_is_unavailable(
    command: list[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/missing/flowpark.db"
    line = _refused(_run(command, url, tmp_path), "store_unavailable")
    assert f"{tmp_path}/missing" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_postgresql_on_a_closed_port_is_unavailable(command: list[str], tmp_path: Path) -> None:
    url = f"postgresql://flowpark:s3cret@127.0.0.1:{free_port()}/flowpark"
    line = _refused(_run(command, url, tmp_path), "store_unavailable")
    assert "s3cret" not in line and "127.0.0.1" in line


def test_an_unsupported_url_is_refused(tmp_path: Path) -> None:
    _refused(_run(["worker"], "mysql://x@127.0.0.1/db", tmp_path), "store_unavailable")


def test_db_upgrade_in_a_missing_folder_names_the_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing/flowpark.db"
    line = _refused(_run(["db", "upgrade"], url, tmp_path), "store_unavailable")
    assert f"directory {tmp_path}/missing does not exist" in line, line
    assert "unable to open database file" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "command", [*COMMANDS, ["db", "upgrade"]], ids=["serve", "worker", "db upgrade"]
)
def test_a_sqlite_url_with_two_slashes_names_the_forms_expected(
    command: list[str], tmp_path: Path
) -> None:
    line = _refused(_run(command, "sqlite://flowpark.db", tmp_path), "store_unavailable")
    assert "sqlite://flowpark.db is a malformed SQLite URL" in line, line
    assert "sqlite:///relative.db" in line and "sqlite:////abs/path.db" in line
    assert "in-memory" not in line
    assert list(tmp_path.iterdir()) == []


def test_a_migrated_database_passes_the_check(_sqlite_template: Path, tmp_path: Path) -> None:
    from flowpark.cli.serving import check_database

    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    check_database(f"sqlite:///{path}")  # no exception


def test_version_prints_the_installed_version() -> None:
    from importlib.metadata import version

    from typer.testing import CliRunner

    from flowpark.cli.main import app

    done = CliRunner().invoke(app, ["--version"])
    assert done.exit_code == 0, done.output
    assert done.output.strip() == f"flowpark {version('flowpark')}"


def _cannot_listen(done: subprocess.CompletedProcess[str], where: str) -> str:
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    lines = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith(f"error: cannot listen on {where}"), output
    return lines[0]


def test_serve_on_a_host_that_does_not_resolve_is_one_line(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    url = f"sqlite:///{tmp_path / 'flowpark.db'}"
    args = ["serve", "--host", "no-such-host.invalid", "--port", str(free_port())]
    _cannot_listen(_run(args, url, tmp_path), "no-such-host.invalid:")


def test_a_worker_whose_metrics_port_is_taken_is_one_line(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    url = f"sqlite:///{tmp_path / 'flowpark.db'}"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = _run(["worker", "--metrics-port", str(port)], url, tmp_path)
    line = _cannot_listen(done, f"127.0.0.1:{port} (metrics)")
    assert "address already in use" in line


def test_the_fakes_on_a_port_in_use_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = _run(["fakes", "--port", str(port)], f"sqlite:///{tmp_path}/x.db", tmp_path)
    line = _cannot_listen(done, f"127.0.0.1:{port}")
    assert "address already in use" in line.lower()
    assert line.endswith("(choose another with --port, or --port 0 for any free port)"), line
    assert done.stdout == ""  # no server log lines either
