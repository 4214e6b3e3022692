"""How ``flowpark serve`` and ``flowpark fakes`` start: the database checked before anything
starts (:func:`check_database`), a TCP socket bound before uvicorn starts (a port in use is
one line, not a traceback), and the shared ``flowpark fakes`` process that
``serve --workers N`` runs beside its workers."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

__all__ = [
    "DB_CHECK_TIMEOUT",
    "FAKES_START_TIMEOUT",
    "check_database",
    "free_loopback_port",
    "shared_fakes",
    "tcp_socket",
]

#: Seconds the start-up database check waits for the database to answer.
DB_CHECK_TIMEOUT = 20.0
#: Seconds ``serve`` waits for the ``flowpark fakes`` process it starts to answer.
FAKES_START_TIMEOUT = 30.0


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the child gets SIGTERM when ``serve`` dies, even by SIGKILL."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def shared_fakes(log_level: str) -> Iterator[str]:
    """Run ``flowpark fakes`` on a free loopback port until the block ends; yields its URL.

    The child inherits this environment (``FLOWPARK_SAMPLE_OCR_PER_PAGE``,
    ``FLOWPARK_API_TOKENS`` for the callback token, the fake job timings). It runs in a
    session of its own, so a Ctrl-C stops the uvicorn workers first and the fakes only
    once they are gone.
    """
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "flowpark.cli.main",
        "fakes",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # the provider's per-request lines would double the access log
        "--log-level",
        log_level if log_level.lower() == "debug" else "warning",
    ]
    per_page = os.environ.get("FLOWPARK_SAMPLE_OCR_PER_PAGE")
    if per_page:
        command += ["--per-page", per_page]
    process = subprocess.Popen(
        command,
        start_new_session=True,
        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
    )
    try:
        deadline = time.monotonic() + FAKES_START_TIMEOUT
        while not _answers(url):
            if process.poll() is not None:
                typer.echo(
                    f"error: fakes.start_failed: flowpark fakes exited with code "
                    f"{process.returncode} before answering on {url}",
                    err=True,
                )
                raise typer.Exit(1)
            if time.monotonic() > deadline:
                typer.echo(
                    f"error: fakes.start_failed: flowpark fakes did not answer on "
                    f"{url} within {FAKES_START_TIMEOUT:.0f} s",
                    err=True,
                )
                raise typer.Exit(1)
            time.sleep(0.1)
        yield url
    finally:
        if process.poll() is None:
            process.terminate()  # uvicorn shuts down cleanly on SIGTERM
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def tcp_socket(host: str, port: int) -> socket.socket:
    """A listening socket created with ``IPPROTO_TCP``.

    asyncio turns ``TCP_NODELAY`` on only for sockets whose protocol is ``IPPROTO_TCP``;
    the protocol-0 socket uvicorn binds from ``--host/--port`` leaves Nagle's algorithm on,
    and a keep-alive client then waits ~40 ms (delayed ACK) for every response.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
        )[0]
    except OSError as exc:  # a host name that does not resolve
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        hint = (
            " (choose another with --port, or --port 0 for any free port)"
            if exc.errno == errno.EADDRINUSE
            else ""
        )
        typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}{hint}", err=True)
        raise typer.Exit(1) from None
    sock.set_inheritable(True)  # the worker processes serve the same socket
    return sock


def check_database(url: str, schema: str | None = None) -> None:
    """Refuse a database the service cannot run on, before anything starts.

    A SQLite file that does not exist is not created (the service would otherwise leave
    an empty file behind).

    Args:
        url: the database's URL (``FLOWPARK_DATABASE_URL``).
        schema: the PostgreSQL schema of flowpark's tables (``FLOWPARK_DATABASE_SCHEMA``).

    Raises:
        SchemaBehindHead: not migrated to head (or a SQLite file that does not exist).
        StoreUnavailable: an invalid URL, or the database cannot be reached.
    """
    from sqlalchemy.exc import DBAPIError, SQLAlchemyError

    from flowpark.errors import FlowparkError, SchemaBehindHead, StoreUnavailable
    from flowpark.store import check_schema_at_head, make_async_engine
    from flowpark.store.db import is_sqlite, parse_url

    try:
        parsed = parse_url(url)
        sqlite = is_sqlite(parsed)
    except (ValueError, SQLAlchemyError) as exc:
        raise StoreUnavailable(f"invalid FLOWPARK_DATABASE_URL: {exc}") from exc
    shown = parsed.render_as_string(hide_password=True)
    if sqlite and parsed.database and parsed.database != ":memory:":
        path = Path(parsed.database)
        if not path.parent.is_dir():
            raise StoreUnavailable(
                f"cannot open the SQLite database {path}: directory {path.parent} does not exist"
            )
        if not path.exists():
            from flowpark.store import head_revision  # Alembic: only for this refusal

            raise SchemaBehindHead(
                f"the SQLite database {path} does not exist; run `flowpark db upgrade` to "
                "create it and migrate it to head",
                current=None,
                head=head_revision(),
            )

    async def check() -> None:
        engine = make_async_engine(url, pool_size=1, schema=schema)
        try:
            await asyncio.wait_for(check_schema_at_head(engine, schema), DB_CHECK_TIMEOUT)
        finally:
            await engine.dispose()

    try:
        asyncio.run(check())
    except FlowparkError:
        raise
    except ValueError as exc:  # an in-memory SQLite database, an unsupported backend
        raise StoreUnavailable(f"invalid FLOWPARK_DATABASE_URL {shown}: {exc}") from exc
    except TimeoutError as exc:
        raise StoreUnavailable(
            f"the database at {shown} did not answer within {DB_CHECK_TIMEOUT:.0f} s"
        ) from exc
    except DBAPIError as exc:
        raise StoreUnavailable(f"cannot use the database at {shown}: {exc.orig}") from exc
    except (OSError, SQLAlchemyError) as exc:
        raise StoreUnavailable(f"cannot use the database at {shown}: {exc}") from exc


def serve_fakes(
    host: str,
    port: int,
    log_level: str,
    per_page: float | None,
    callback_token: str | None,
    rate_limit: float | None,
) -> None:
    """Serve the sample's fake providers on ``host:port`` until stopped (``flowpark fakes``).

    Args:
        host / port: where to listen (port 0: any free port).
        log_level: uvicorn's log level.
        per_page: seconds the fake OCR takes per page (None: the sample setting).
        callback_token: the key of the OCR callbacks' tokens (None: the sample setting).
        rate_limit: calls/s the fake OCR admits (None: the sample setting).

    Raises:
        typer.Exit: code 1 when the port is in use, 3 when the server did not start.
    """
    import uvicorn
    from pydantic import SecretStr

    from flowpark.cli.serving import tcp_socket
    from flowpark.runtime.forwarded import forwarded_options
    from flowpark.runtime.logs import log_config, set_node_id
    from flowpark.samples.fakes.server import create_fakes_server
    from flowpark.samples.settings import SampleSettings
    from flowpark.settings import Settings

    set_node_id(f"fakes-{port}")
    sock = tcp_socket(host, port)  # a port in use: one line, exit 1
    node_settings = Settings()
    token = SecretStr(callback_token) if callback_token else None
    given = {"sample_callback_token": token, "ocr_rate_limit": rate_limit}
    overrides = {k: v for k, v in given.items() if v}
    config = uvicorn.Config(
        create_fakes_server(
            sample=SampleSettings(**overrides),  # type: ignore[arg-type]
            per_page=per_page,
        ),
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config(log_level),
        timeout_keep_alive=node_settings.keep_alive_seconds,
        **forwarded_options(node_settings),
    )
    server = uvicorn.Server(config)
    server.run(sockets=[sock])
    if not server.started:
        raise typer.Exit(3)
