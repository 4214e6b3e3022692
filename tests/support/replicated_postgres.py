"""A PostgreSQL primary and a synchronous streaming-replication standby of the test's own,
for failover tests (the shared server on 5432 is never touched).

Debian's server binaries, as :mod:`tests.support.own_postgres` runs them (as the
``postgres`` user when the tests run as root), on two free loopback ports in one temporary
folder: ``initdb`` and start the primary (``wal_level=replica``, ``synchronous_commit=on``,
``synchronous_standby_names`` naming the standby), ``pg_basebackup -R`` its copy, start the
standby (``cluster_name`` = the name the primary waits for). A commit the primary
acknowledges has then been flushed on the standby too. No fsync: a test's data need not
survive a power cut, only a server's death.

Two ways to lose the primary: :meth:`ReplicatedPostgres.stop_primary` (a clean switchover:
a fast shutdown sends the standby every record before it ends) and
:meth:`ReplicatedPostgres.kill_primary` (SIGKILL to the postmaster and every process of
it at once); then :meth:`ReplicatedPostgres.promote` (``pg_ctl promote``). The promoted
server runs alone, without a synchronous standby, as an HA manager runs it until a new
standby joins.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psycopg

from tests.support.own_postgres import OwnPostgres, _bin_dir
from tests.support.server import free_port

__all__ = ["ReplicatedPostgres", "replicated_postgres"]

#: the standby's name, as the primary's ``synchronous_standby_names`` waits for it
STANDBY_NAME = "standby"
#: settings of both servers over :meth:`OwnPostgres.start`'s defaults
_COMMON = ("synchronous_commit=on", "wal_level=replica", "max_wal_senders=4", "hot_standby=on")


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a postmaster's backends and workers)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, ValueError, IndexError):
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")"
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found


@dataclass
class ReplicatedPostgres:
    """A primary and its synchronous standby.

    Attributes:
        primary: the server that takes writes first.
        standby: its synchronous standby (read-only until promoted).
    """

    primary: OwnPostgres
    standby: OwnPostgres

    @property
    def url(self) -> str:
        """Both servers in libpq's multi-host form, writable sessions only:
        ``postgresql://postgres@127.0.0.1:<p>,127.0.0.1:<s>/postgres?target_session_attrs=
        read-write``."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def replication(self) -> list[tuple[str, str, str]]:
        """The primary's standbys: ``(application_name, state, sync_state)`` each, e.g.
        ``[("standby", "streaming", "sync")]``."""
        with psycopg.connect(self.primary.url, autocommit=True, connect_timeout=5) as conn:
            found = conn.execute(
                "SELECT application_name, state, sync_state FROM pg_stat_replication"
            ).fetchall()
        return [(str(a), str(b), str(c)) for a, b, c in found]

    def stop_primary(self) -> None:
        """A clean switchover's first half: the primary's fast shutdown (sessions ended;
        every WAL record sent to the standby before the server ends)."""
        self.primary.stop()

    def kill_primary(self) -> None:
        """The primary's machine lost: SIGKILL to its postmaster and every child at once
        (nothing flushed, no session told)."""
        pid_file = self.primary.folder / "data" / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        doomed = [postmaster, *_children(postmaster)]
        for pid in doomed:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in doomed:  # reaped by their parents (runuser, the postmaster) or init
            with suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

    def promote(self) -> None:
        """``pg_ctl promote -w``: the standby ends recovery and takes writes."""
        self.standby._run("pg_ctl", "-D", str(self.standby.folder / "data"), "-w", "promote")


def _server(folder: Path, name: str) -> OwnPostgres:
    home = folder / name
    home.mkdir(mode=0o755)
    if os.geteuid() == 0:
        shutil.chown(home, "postgres", "postgres")
    return OwnPostgres(free_port(), home, _bin_dir())


@contextmanager
def replicated_postgres() -> Iterator[ReplicatedPostgres]:
    """A started primary with a started, synchronous, streaming standby; both stopped
    (immediately) and removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="flowpark-pg-pair-", dir="/tmp"))
    folder.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    primary = _server(folder, "primary")
    standby = _server(folder, "standby")
    try:
        primary._run(
            "initdb", "-D", str(primary.folder / "data"), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip
        primary.start(*_COMMON, f"synchronous_standby_names={STANDBY_NAME}")
        primary._run(
            "pg_basebackup", "-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres",
            "-D", str(standby.folder / "data"), "-R", "-X", "stream", "-c", "fast",
            "--no-sync",
        )  # fmt: skip
        standby.start(*_COMMON, f"cluster_name={STANDBY_NAME}")
        yield ReplicatedPostgres(primary, standby)
    finally:
        for server in (primary, standby):
            if (server.folder / "data" / "postmaster.pid").exists():
                with suppress(RuntimeError, subprocess.TimeoutExpired):
                    server._run(
                        "pg_ctl", "-D", str(server.folder / "data"), "-m", "immediate", "-w",
                        "stop",
                    )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
