"""How ``flowpark serve`` and ``flowpark fakes`` listen: a TCP socket bound before uvicorn
starts (a port in use is one line, not a traceback), and the shared ``flowpark fakes``
process that ``serve --workers N`` runs beside its workers."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import typer

__all__ = ["FAKES_START_TIMEOUT", "free_loopback_port", "shared_fakes", "tcp_socket"]

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
        "app.cli",
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
