"""A PostgreSQL server a test owns: its own data folder and port, stopped and started at
will (the shared server on 5432 is never touched).

Debian's server binaries (``/usr/lib/postgresql/<version>/bin``) run ``initdb`` into a
temporary folder and ``pg_ctl`` on a free loopback port, with trust authentication and no
fsync (a test's data need not survive a power cut). PostgreSQL refuses to run as root: as
root, every command runs as the ``postgres`` user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.support.server import free_port

__all__ = ["OwnPostgres", "own_postgres"]


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
    return Path(found[-1])


@dataclass
class OwnPostgres:
    """One PostgreSQL server of the test's own.

    Attributes:
        port: its loopback port.
        folder: its data folder (and socket folder).
    """

    port: int
    folder: Path
    bin_dir: Path

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:<port>/postgres``."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = 120) -> None:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed: {done.stdout}{done.stderr}")

    def start(self, *settings: str) -> None:
        """Start the server and wait until it accepts connections.

        Args:
            *settings: more ``name=value`` server settings, after (over) the defaults.
        """
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        options += "".join(f" -c {setting}" for setting in settings)
        self._run(
            "pg_ctl", "-D", str(self.folder / "data"), "-o", options,
            "-l", str(self.folder / "server.log"), "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server at once (``-m fast``: sessions are ended, nothing waits)."""
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")


@contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """An initialised, started :class:`OwnPostgres`; stopped and removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="flowpark-pg-", dir="/tmp"))
    folder.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    server = OwnPostgres(free_port(), folder, _bin_dir())
    try:
        server._run(
            "initdb", "-D", str(folder / "data"), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        server.start()
        yield server
    finally:
        with suppress(RuntimeError, subprocess.TimeoutExpired):
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
