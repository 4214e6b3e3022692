"""The fast tier: ``pytest tests/unit`` answers in seconds.

A test here needs no database server and starts no process: SQLite files, in-process
apps (``httpx.ASGITransport``, typer's ``CliRunner``) and the virtual clock only. Both are
enforced, so the tier stays fast:

* a test here that starts a child process fails with where to put it (``tests/cli`` runs
  the ``flowpark`` command and other programs as child processes);
* a test here marked ``postgres`` or ``slow`` is a collection error.

Two costs a process pays once when it runs one CLI command, and these tests pay for each
of their hundred commands, are paid once a session (each is most of a CLI test's time):
typer's build of the click command from every command's signature (~35 ms), and httpx's
load of the CA bundle for each client a command (or a test of the node's outbound client)
makes (~30 ms).
"""

from __future__ import annotations

import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import httpx._transports.default
import pytest
import typer
import typer.main
import typer.testing
from httpx._config import create_ssl_context

import flowpark.client._sync
from flowpark.client._calls import retry_delay

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a PostgreSQL or slow test in the fast tier (a usage error names them)."""
    misplaced = [
        item.nodeid
        for item in items
        if item.path.is_relative_to(HERE)
        and any(item.get_closest_marker(name) for name in ("postgres", "slow"))
    ]
    if misplaced:
        raise pytest.UsageError(
            "tests/unit is the fast tier (no database server, no child process); move these "
            "to tests/postgres, tests/cli or tests/e2e:\n  " + "\n  ".join(misplaced)
        )


@pytest.fixture(autouse=True)
def _no_child_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail the test that starts a child process (``subprocess``, ``asyncio`` subprocesses)."""

    def refuse(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError(
            f"tests/unit starts no process (it ran {args!r}): put this test in tests/cli"
        )

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse)
    yield


def _registrations(cli: typer.Typer) -> tuple[Any, ...]:
    """What typer builds a click command from: its callback, commands and groups."""
    return (
        cli.registered_callback,
        tuple((c, c.callback) for c in cli.registered_commands),
        tuple(
            (g, g.typer_instance and _registrations(g.typer_instance))
            for g in cli.registered_groups
        ),
    )


#: The click command built for a typer app: ``id(app)``: (app, its registrations, command).
_commands: dict[int, tuple[typer.Typer, tuple[Any, ...], Any]] = {}


def _command(cli: typer.Typer) -> Any:
    known = _commands.get(id(cli))
    if known is None or known[0] is not cli or known[1] != _registrations(cli):
        known = _commands[id(cli)] = (cli, _registrations(cli), typer.main.get_command(cli))
    return known[2]


@pytest.fixture(autouse=True)
def _click_command_built_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CliRunner.invoke(app, ...)`` runs the click command typer built for ``app`` at its
    first invocation, again while ``app``'s commands are the same ones (a click command
    holds no state of a run: each gets its own context)."""
    monkeypatch.setattr(typer.testing, "_get_command", _command)


#: TLS contexts made with httpx's default settings: (trust_env, SSL_CERT_FILE, SSL_CERT_DIR).
_contexts: dict[tuple[bool, str | None, str | None], ssl.SSLContext] = {}


def _context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
    if verify is not True or cert is not None:
        return create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
    env = os.environ if trust_env else {}
    key = (trust_env, env.get("SSL_CERT_FILE"), env.get("SSL_CERT_DIR"))
    if key not in _contexts:
        _contexts[key] = create_ssl_context(verify=verify, cert=cert, trust_env=trust_env)
    return _contexts[key]


@pytest.fixture(autouse=True)
def _tls_context_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """An httpx client made with the default TLS settings gets the context made for the
    first one with the same settings (the CA file or directory the environment names, or
    certifi's); other settings get a context of their own, as without this. The node's
    outbound client (httpx over aiohttp, flowpark.runtime.http) asks httpx for its context too."""
    monkeypatch.setattr(httpx._transports.default, "create_ssl_context", _context)
    monkeypatch.setattr(httpx, "create_ssl_context", _context)


@pytest.fixture
def retries_at_once(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The blocking client sends its retries without waiting; the list gets the pause each
    would have waited (test_client_retries runs the retries with their pauses)."""
    pauses: list[float] = []

    def at_once(retry: int, response: httpx.Response | None) -> float:
        pauses.append(retry_delay(retry, response))
        return 0.0

    monkeypatch.setattr(flowpark.client._sync, "retry_delay", at_once)
    return pauses
