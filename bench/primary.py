"""``python -m bench.primary [--n N] [--concurrency C]``: what whole flows cost the
PostgreSQL primary, for sizing one (docs/scaling.md); prints one JSON object.

An in-process node (:func:`bench.flows.node_engine`, the production engine and store) runs
N ``bench.peers`` flows from start to end: N starts by C callers (default 32), then sweeps
until every flow has completed (three polls: the start runs attempt 0 and parks; each
sweep makes the parked flows due, claims them and runs the next attempt; the third
attempt is satisfied and the flow ends). Over that, per flow:

* ``statements``: SQL statements the node sent (SQLAlchemy's ``before_cursor_execute``);
* ``commits``: transactions committed (COMMITs, and one per statement on the store's
  autocommit connections), what a synchronous standby acknowledges one by one;
* ``wal_bytes``: ``pg_current_wal_lsn()`` after minus before (a ``CHECKPOINT`` first);
  WAL is the whole server's, so run it on a server nothing else writes to
  (``FLOWPARK_BENCH_PG_URL``), and the figure holds full-page images with
  ``full_page_writes = on`` (the default);
* ``node_cpu_ms``: this process's CPU (the node, and the bench's own callers);
* ``server_cpu_ms``: the PostgreSQL server's CPU (the postmaster and every process of it,
  live or ended, read from ``/proc``), when the server runs on this machine and its data
  folder is readable (else null): 1000 / that is the flows one server core carries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import event

from bench.common import BenchStore, bench_store, err_console, run_concurrently, sql
from bench.flows import Probe, build_peers_flow, node_engine

__all__ = ["measure"]


def _server_cpu(store: BenchStore) -> float | None:
    """CPU seconds of the server's processes so far, or None when not readable here."""
    import psutil

    folder = sql(store, "SELECT current_setting('data_directory')")[0][0]
    try:
        postmaster = psutil.Process(int(Path(folder, "postmaster.pid").read_text().split()[0]))
        own = postmaster.cpu_times()
        total = own.user + own.system + own.children_user + own.children_system
        for child in postmaster.children():
            with suppress(psutil.NoSuchProcess):
                times = child.cpu_times()
                total += times.user + times.system
    except (OSError, ValueError, psutil.Error):
        return None
    return float(total)


def _lsn(store: BenchStore) -> int:
    return int(sql(store, "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0][0])


async def measure(store: BenchStore, n: int, concurrency: int) -> dict[str, Any]:
    """Run ``n`` whole ``bench.peers`` flows on ``store``; return the per-flow figures."""
    counts = {"statements": 0, "commits": 0}

    def on_execute(conn: Any, *_: Any) -> None:
        counts["statements"] += 1
        if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            counts["commits"] += 1

    def on_commit(conn: Any) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            counts["commits"] += 1

    flow = build_peers_flow(Probe(), polls=3, wait=timedelta(hours=1))
    async with node_engine(store.url, flows=[flow], concurrency=100) as engine:
        sync = engine.store.engine.sync_engine  # type: ignore[attr-defined]
        plan = engine.catalog.latest("bench.peers")
        run_id = uuid.uuid4().hex[:6]

        async def start(i: int) -> None:
            await engine.start(plan, {"key": f"{run_id}-{i}"})

        sql(store, "CHECKPOINT")
        wal_before = _lsn(store)
        event.listen(sync, "before_cursor_execute", on_execute)
        event.listen(sync, "commit", on_commit)
        cpu_before = time.process_time()
        server_before = _server_cpu(store)
        began = time.perf_counter()
        await run_concurrently(n, concurrency, start, label=f"start ({concurrency} callers)")
        for _ in range(2):  # two wakes: attempts 1 and 2 (the last ends the flow)
            # every parked flow due now (the bench's own connection: not counted)
            sql(
                store,
                "UPDATE flow_instance SET wake_at = :t WHERE state = 'suspended'",
                {"t": engine.clock.now().replace(year=2000)},
            )
            advanced = 0
            while advanced < n:
                report = await engine.sweep()
                if report.advanced == 0:
                    break
                advanced += report.advanced
        seconds = time.perf_counter() - began
        cpu = time.process_time() - cpu_before
        server_after = _server_cpu(store)
        event.remove(sync, "before_cursor_execute", on_execute)
        event.remove(sync, "commit", on_commit)
        wal = _lsn(store) - wal_before
    done = sql(store, "SELECT count(*) FROM flow_instance WHERE state = 'completed'")[0][0]
    if done != n:
        raise RuntimeError(f"{done} of {n} flows completed")
    settings = dict(
        sql(
            store,
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('full_page_writes', 'synchronous_commit', 'wal_level', 'server_version')",
        )
    )
    return {
        "flows": n,
        "concurrency": concurrency,
        "seconds": round(seconds, 2),
        "flows_per_s": round(n / seconds, 1),
        "statements_per_flow": round(counts["statements"] / n, 3),
        "commits_per_flow": round(counts["commits"] / n, 3),
        "wal_bytes_per_flow": round(wal / n),
        "node_cpu_ms_per_flow": round(cpu * 1000 / n, 3),
        "server_cpu_ms_per_flow": (
            round((server_after - server_before) * 1000 / n, 3)
            if server_before is not None and server_after is not None
            else None
        ),
        "server": settings,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=2000, help="flows (default 2000)")
    parser.add_argument("--concurrency", type=int, default=32, help="callers starting flows")
    args = parser.parse_args()
    from flowpark.runtime.loop import run

    with bench_store("postgres") as store:
        figures = run(measure(store, args.n, args.concurrency))
    err_console.print(figures)
    sys.stdout.write(json.dumps(figures) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
