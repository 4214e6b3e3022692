"""A PostgreSQL server of the bench's own, with the server's default settings.

``python -m bench scale --server own`` (its default) measures dead tuples and table growth
with autovacuum on, as a server runs it out of the box; the machine's shared server may
have it off (a CI setting). Debian's server binaries (``/usr/lib/postgresql/<version>/bin``)
run ``initdb`` into a temporary folder and ``pg_ctl`` on a free loopback port, trust
authentication; no setting is changed but the port, the socket folder and the listen
address (``fsync``, ``shared_buffers``, autovacuum: the defaults). As root, every command
runs as the ``postgres`` user (PostgreSQL refuses to run as root). The folder is removed
afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

__all__ = ["own_server"]


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(bin_dir: Path, *args: str) -> None:
    command = [str(bin_dir / args[0]), *args[1:]]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")


@contextmanager
def own_server() -> Iterator[str]:
    """Start a default-configured PostgreSQL server; yield its admin URL
    (``postgresql://postgres@127.0.0.1:<port>/postgres``); stop it and remove its folder.

    Raises:
        RuntimeError: the server binaries are missing, or initdb or pg_ctl failed.
    """
    bin_dir = _bin_dir()
    folder = Path(tempfile.mkdtemp(prefix="flowpark-bench-pg-"))
    data = folder / "data"
    port = _free_port()
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    try:
        _run(bin_dir, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
        _run(bin_dir, "pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "log"),
             "-w", "start")  # fmt: skip
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            with suppress(RuntimeError):
                _run(bin_dir, "pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
