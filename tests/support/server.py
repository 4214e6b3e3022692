"""Real flowpark servers for tests: uvicorn on loopback, in a thread or a subprocess.

Capabilities reach the fake OCR over real HTTP at ``settings.self_url``, so API tests need a
real listening server, not an ASGI transport.

* :func:`live_server` - ``create_app(settings)`` served by ``uvicorn.Server`` (lifespan on)
  in a background thread with its own event loop, on a socket bound before start-up so the
  port (and ``self_url``) is known up front. Usable from sync or async tests and from
  session-scoped fixtures; stops cleanly (lifespan shutdown) on exit.
* :func:`serve_subprocess` - ``flowpark serve`` in a child process with the environment
  given (e.g. ``TZ=Asia/Tokyo``), output captured to a file.
"""

from __future__ import annotations

import inspect
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from flowpark.runtime.app import create_app
from flowpark.runtime.forwarded import forwarded_options
from flowpark.samples.registry import sample_flows
from flowpark.samples.settings import SampleSettings
from flowpark.settings import Settings
from tests.support.eventually import eventually_sync

__all__ = [
    "TOKEN",
    "LiveServer",
    "ServerStartFailed",
    "SubprocessServer",
    "free_port",
    "live_server",
    "serve_subprocess",
    "server_settings",
]

#: The bearer token test servers accept.
TOKEN = "test-token"
STARTUP_TIMEOUT = 30.0
SHUTDOWN_TIMEOUT = 30.0


class ServerStartFailed(RuntimeError):
    """The server stopped before it was serving (e.g. the lifespan raised)."""


def free_port() -> int:
    """A loopback port free right now (for subprocesses, which bind it themselves)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _split(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``overrides`` as (node :class:`Settings` fields, :class:`SampleSettings` fields)."""
    sample = {k: v for k, v in overrides.items() if k in SampleSettings.model_fields}
    return {k: v for k, v in overrides.items() if k not in sample}, sample


def server_settings(database_url: str, base_url: str, **overrides: Any) -> Settings:
    """Node settings for a test server: fast sweep, the test token, ``self_url=base_url``,
    ``start_wait_seconds=30``.

    Sample settings among ``overrides`` are ignored here (see :func:`sample_settings`).
    """
    values: dict[str, Any] = {
        "database_url": database_url,
        "self_url": base_url,
        "api_tokens": TOKEN,
        "timer_scan_interval": 0.2,
        "node_id": f"test-{base_url.rsplit(':', 1)[-1]}",
        # a start answers once the instance parks, however loaded the test machine is
        # (tests of the bounded start answer set their own)
        "start_wait_seconds": 30.0,
    }
    values.update(_split(overrides)[0])
    return Settings(**values)


def sample_settings(**overrides: Any) -> SampleSettings:
    """The samples' settings for a test server: fast fake OCR (``sample_ocr_per_page=0.05``),
    no OCR webhook (``ocr_callbacks=False``: the poll alone finishes documents); node
    settings among ``overrides`` are ignored."""
    values: dict[str, Any] = {"sample_ocr_per_page": 0.05, "ocr_callbacks": False}
    values.update(_split(overrides)[1])
    return SampleSettings(**values)


def samples_app(settings: Settings, sample: SampleSettings) -> FastAPI:
    """``create_app`` serving the samples with ``sample`` settings."""
    return create_app(settings, flows=[sample_flows(sample)])


@dataclass
class LiveServer:
    """A running server: its base URL, settings and app."""

    base_url: str
    settings: Settings
    app: FastAPI
    token: str = TOKEN
    server: uvicorn.Server | None = field(default=None, repr=False)

    @property
    def database_url(self) -> str:
        return self.settings.database_url

    def client(
        self, *, token: str | None = TOKEN, timeout: float = 30.0, **kwargs: Any
    ) -> httpx.AsyncClient:
        """An HTTP client on the server (with ``Authorization: Bearer <token>`` unless
        ``token`` is None)."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout, **kwargs)


@contextmanager
def live_server(
    database_url: str,
    *,
    app_factory: Callable[[Settings, SampleSettings], FastAPI]
    | Callable[[Settings], FastAPI] = samples_app,
    **overrides: Any,
) -> Iterator[LiveServer]:
    """Serve ``app_factory(settings, sample)`` with uvicorn on 127.0.0.1 in a background
    thread.

    Args:
        database_url: the (normally migrated) database.
        app_factory: builds the app from the settings (and the sample settings, when it
            takes two arguments); default :func:`samples_app`.
        **overrides: :class:`Settings` and :class:`SampleSettings` fields over
            :func:`server_settings`' and :func:`sample_settings`' defaults.

    Yields:
        :class:`LiveServer` once ``server.started`` (lifespan done, socket listening).

    Raises:
        ServerStartFailed: the server exited before serving (the lifespan failed); the
            cause is chained when uvicorn raised one.
    """
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto is TCP,
    # and accepted connections inherit it; with proto 0 every keep-alive response waits
    # ~40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    base_url = f"http://127.0.0.1:{port}"
    settings = server_settings(database_url, base_url, **overrides)
    if len(inspect.signature(app_factory).parameters) == 1:
        app = app_factory(settings)  # type: ignore[call-arg]
    else:
        app = app_factory(settings, sample_settings(**overrides))  # type: ignore[call-arg]
    # log_config=None: uvicorn's loggers propagate to the root logger (caplog sees them).
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            lifespan="on",
            log_level="warning",
            log_config=None,
            timeout_keep_alive=settings.keep_alive_seconds,
            **forwarded_options(settings),
        )
    )
    outcome: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit on start-up failure, or a crash
            outcome.append(exc)

    thread = threading.Thread(target=serve, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not server.started:
            thread.join(0.02)
            if not thread.is_alive():
                cause = outcome[0] if outcome else None
                raise ServerStartFailed(
                    f"server on {base_url} exited before serving ({cause!r})"
                ) from cause
            if time.monotonic() > deadline:
                raise ServerStartFailed(
                    f"server on {base_url} not started after {STARTUP_TIMEOUT}s"
                )
        yield LiveServer(base_url, settings, app, server=server)
    finally:
        server.should_exit = True
        thread.join(SHUTDOWN_TIMEOUT)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"server on {base_url} did not stop in {SHUTDOWN_TIMEOUT}s")
    if outcome:
        raise RuntimeError(f"server on {base_url} crashed: {outcome[0]!r}") from outcome[0]


@dataclass
class SubprocessServer:
    """``flowpark serve`` in a child process."""

    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        """Everything the process wrote so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace")

    def client(self, *, token: str = TOKEN, timeout: float = 30.0) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers={"Authorization": f"Bearer {token}"}
        )

    def wait_serving(self, timeout: float = STARTUP_TIMEOUT) -> None:
        """Return once ``/healthz`` answers 200.

        Raises:
            AssertionError: the node exited, or did not answer within ``timeout`` seconds
                (the message holds its output).
        """

        def serving() -> None:
            assert self.process.poll() is None, "the node exited"
            try:
                status = httpx.get(f"{self.base_url}/healthz", timeout=2.0).status_code
            except httpx.TransportError as exc:
                raise AssertionError(f"not serving yet: {exc}") from exc
            assert status == 200, status

        try:
            eventually_sync(
                serving, timeout=timeout, interval=0.1, what=f"{self.base_url} /healthz"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- server output ---\n{self.output()}") from None


def flowpark_command() -> list[str]:
    """The ``flowpark`` console script of the running interpreter's environment."""
    script = Path(sys.executable).with_name("flowpark")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from flowpark.cli.main import main; main()"]


@contextmanager
def serve_subprocess(
    database_url: str,
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    workers: int = 1,
    settings: Mapping[str, str] | None = None,
    **settings_env: str,
) -> Iterator[SubprocessServer]:
    """Run ``flowpark serve --host 127.0.0.1 --port <free>`` in a child process.

    Args:
        database_url: ``FLOWPARK_DATABASE_URL`` (must be migrated).
        log_path: where the child's output goes.
        env: extra environment (e.g. ``{"TZ": "Asia/Tokyo"}``).
        workers: uvicorn worker processes (each one sweeps).
        settings: more ``FLOWPARK_<NAME>`` values by lower-case name (as ``settings_env``).
        **settings_env: ``FLOWPARK_<NAME>`` values by lower-case name
            (``sample_ocr_per_page="1"``).

    Yields:
        :class:`SubprocessServer` (not yet known to be up: wait for ``/healthz``).
    """
    port = free_port()
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    child_env.update(
        {
            "FLOWPARK_DATABASE_URL": database_url,
            "FLOWPARK_API_TOKENS": TOKEN,
            "FLOWPARK_SELF_URL": f"http://127.0.0.1:{port}",
            # a start answers once the instance parks, however loaded the machine is (tests
            # of the bounded start answer pass their own start_wait_seconds)
            "FLOWPARK_START_WAIT_SECONDS": "30",
            "PYTHONUNBUFFERED": "1",
        }
    )
    named = {**(settings or {}), **settings_env}
    child_env.update({f"FLOWPARK_{k.upper()}": v for k, v in named.items()})
    child_env.update(env or {})
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                *flowpark_command(),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
                "--log-level",
                "warning",
            ],
            env=child_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield SubprocessServer(f"http://127.0.0.1:{port}", process, log_path)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(SHUTDOWN_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
