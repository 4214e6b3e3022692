"""``python -m bench.figures GROUP [--n N] [--rate R]``: one group of ``bench compare``'s
figures for the code on ``sys.path``, on a fresh PostgreSQL database; prints one JSON object.

``bench compare`` runs this module once per group, side and round, in a process whose
``PYTHONPATH`` puts the harness (this ``bench/`` package) first and the side's tree (its
``app``, ``samples`` and ``alembic``) second, so the same measuring code drives both sides
and the side's own code is what runs. The object names the side's commit and where its
``app`` package was imported from.

Groups:

* ``start``: the ``peers`` flow (three polls of an in-process check, 1 s waits) on one node
  process, N starts by 32 callers as fast as they go: ``starts_per_s``, ``wakes_per_s``,
  ``node_cpu_ms_per_flow`` (the node's CPU from the first start to the last completion, per
  flow) and ``sustained_flows_per_s`` (1000 / that: the flows one core carries).
* ``start1``: the same with one caller: ``starts_per_s_1``.
* ``lag``: the same flows started at ``--rate`` per second (``bench compare`` passes half the
  side's sustained rate of its ``start`` run in the same round): wake lag p50/p99.
* ``restart``: a node parks 500 flows and is SIGKILLed; once all are overdue a new node is
  spawned: ``node_ready_s`` (spawn to its ready line) and ``resumed_after_ready_s`` (ready
  to the last of the 500 resumed), and the node's CPU seconds over each: ``node_ready_cpu_s``
  and ``resume_cpu_s``.
* ``park``: N ``document.process`` starts through the engine API (fake OCR pending, no
  sweep): ``bytes_per_parked`` and each relation's ``pg_relation_size`` (heap, TOAST and
  every index) per parked instance.
* ``http``: ``POST /api/v1/documents`` by the raw keep-alive client (32 connections) to
  flowpark's server and, right after, to the bare FastAPI route (:mod:`bench.ceiling`):
  server CPU ms per request of each and their ratio.
* ``sweep``: :mod:`bench.sweep` (N documents, 3 polls each): attempts/s, its same-run
  single-row UPDATE baseline (32 writers through the same SQLAlchemy pool) and the ratio.
* ``sql``: statements and round trips per start and per park, counted with SQLAlchemy event
  hooks on an in-process node, and rows written per start (``pg_stat_user_tables``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import BenchStore, bench_store, err_console, rss_mb, sql
from bench.compat import module, name_of, store_of

__all__ = ["GROUPS", "relation_sizes"]


def side() -> dict[str, Any]:
    """Which code this process runs: the tree its engine is imported from (``flowpark``, or
    ``app`` before the one-package move: :mod:`bench.compat`) and its git commit."""
    root = Path(str(module("flowpark.engine.clock").__file__)).resolve().parents[2]
    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {"commit": commit + ("+dirty" if dirty else ""), "tree": str(root)}


#: the tables that record the schema's revision (flowpark's own; ``alembic_version`` before
#: migration 0025): left out of the figures
VERSION_TABLES = frozenset({"flow_alembic_version", "alembic_version"})


def relation_sizes(store: BenchStore) -> dict[str, int]:
    """``pg_relation_size`` of every relation of the public schema (tables, their TOAST
    tables and indexes), by name; the Alembic version tables left out."""
    rows = sql(
        store,
        "SELECT c.relname, pg_relation_size(c.oid), t.relname "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN pg_index i ON i.indexrelid = c.oid "
        "LEFT JOIN pg_class t ON t.oid = i.indrelid "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i', 't')",
    )
    toast = sql(
        store,
        "SELECT t.relname, pg_relation_size(c.reltoastrelid) + COALESCE(("
        "  SELECT sum(pg_relation_size(i.indexrelid)) FROM pg_index i"
        "  WHERE i.indrelid = c.reltoastrelid), 0) "
        "FROM pg_class c JOIN pg_class t ON t.oid = c.oid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.reltoastrelid <> 0",
    )
    sizes = {name: int(size) for name, size, owner in rows if (owner or name) not in VERSION_TABLES}
    for table, size in toast:
        if size and table not in VERSION_TABLES:
            sizes[f"{table} (TOAST)"] = int(size)
    return {k: v for k, v in sizes.items() if v}


# -- groups ------------------------------------------------------------------------------
def _opts(concurrency: int) -> dict[str, Any]:
    return {
        "polls": 3,
        "wait": 1.0,
        "scan_interval": 10.0,
        "concurrency": concurrency,
        "engine_concurrency": 100,
    }


async def _drive(store: BenchStore, n: int, concurrency: int, rate: float | None) -> dict[str, Any]:
    from bench.peers import _phase_drive

    return await _phase_drive(store, n, _opts(concurrency), rate=rate)


async def group_start(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    drive = await _drive(store, n, 32, None)
    cpu_ms = drive["drive_cpu_s"] * 1000 / n
    return {
        "starts_per_s": n / drive["start_span_s"],
        "wakes_per_s": drive["wakes"] / max(drive["wake_span_s"], 1e-9),
        "node_cpu_ms_per_flow": cpu_ms,
        "sustained_flows_per_s": 1000 / cpu_ms,
        "peak_rss_mb": drive["peak_rss_mb"],
    }


async def group_start1(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    drive = await _drive(store, n, 1, None)
    return {"starts_per_s_1": n / drive["start_span_s"]}


async def group_lag(store: BenchStore, n: int, *, rate: float, **_: Any) -> dict[str, Any]:
    from bench.common import percentiles

    drive = await _drive(store, n, 32, rate)
    lags = percentiles([x * 1000 for x in drive["lags_s"]], (50, 99))
    return {
        "lag_rate_per_s": rate,
        "lag_starts_per_s": n / drive["start_span_s"],
        "wake_lag_p50_ms": lags["p50"],
        "wake_lag_p99_ms": lags["p99"],
    }


async def group_restart(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    from bench.peers import _phase_crash

    crash = await _phase_crash(store, n, _opts(32))
    return {
        "node_ready_s": crash["node_boot_s"],
        "resumed_after_ready_s": crash["last_from_ready_s"],
        "resumed_from_spawn_s": crash["last_from_spawn_s"],
        # a revision of the harness before these figures has no such keys
        **{
            key: crash[name]
            for key, name in (
                ("node_ready_cpu_s", "node_boot_cpu_s"),
                ("resume_cpu_s", "resume_cpu_s"),
            )
            if name in crash
        },
    }


async def group_park(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine as SyncEngine

    from bench import park

    statements = [0]

    def count(*args: Any) -> None:
        statements[0] += 1

    # every engine of this process: the node's (the bench's own setup SQL runs after)
    event.listen(SyncEngine, "before_cursor_execute", count)
    result = await park.run(store, n)
    event.remove(SyncEngine, "before_cursor_execute", count)
    sizes = relation_sizes(store)
    parked = result.figures["parked"]
    return {
        "bytes_per_parked": sum(sizes.values()) / parked,
        "park_statements_per_start": statements[0] / parked,
        "park_starts_per_s": result.figures["starts_per_s"],
        "bytes_by_relation": {k: round(v / parked, 1) for k, v in sorted(sizes.items())},
    }


async def group_http(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    from bench.ceiling import spawn_ceiling
    from bench.common import LIFTED_OCR_LIMIT, CpuMeter, spawn_fake_ocr, spawn_server
    from bench.rawclient import drive

    async def measure(server: Any, helpers: dict[str, int]) -> dict[str, float]:
        port = int(server.base_url.rsplit(":", 1)[1])
        await drive("127.0.0.1", port, 200, first=n)  # warm-up
        meter = CpuMeter(store, helpers)
        meter.start()
        _, wall = await drive("127.0.0.1", port, n)
        used = meter.stop()
        return {
            "server_cpu_ms": used["server"] * 1000 / n,
            "client_cpu_ms": used["bench"] * 1000 / n,
            "requests_per_s": n / wall,
        }

    with (
        spawn_fake_ocr() as ocr,
        spawn_server(store.url, ocr.base_url, extra_env=LIFTED_OCR_LIMIT) as server,
    ):
        flowpark = await measure(server, {"server": server.pid})
    with spawn_ceiling() as bare:
        ceiling = await measure(bare, {"server": bare.pid})  # type: ignore[attr-defined]
    return {
        "http_server_cpu_ms": flowpark["server_cpu_ms"],
        "http_ceiling_cpu_ms": ceiling["server_cpu_ms"],
        "http_cpu_over_ceiling": flowpark["server_cpu_ms"] / ceiling["server_cpu_ms"],
        "http_starts_per_s": flowpark["requests_per_s"],
        "http_ceiling_per_s": ceiling["requests_per_s"],
    }


async def group_sweep(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    from bench import sweep

    result = await sweep.run(store, n)
    return {
        "sweep_attempts_per_s": result.figures["attempts_per_s"],
        "sweep_update_tps": result.figures["baseline_tps"],
        "sweep_over_update": result.figures["ratio"],
    }


async def group_sql(store: BenchStore, n: int, **_: Any) -> dict[str, Any]:
    """Statements and round trips per start and per park on an in-process node."""
    import uuid
    from datetime import timedelta

    from sqlalchemy import event

    from bench.common import run_concurrently
    from bench.flows import Probe, build_peers_flow, node_engine

    counts = {"statements": 0, "begin": 0, "commit": 0, "rollback": 0}
    texts: dict[str, int] = {}

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        counts["statements"] += 1
        key = " ".join(statement.split())[:90]
        texts[key] = texts.get(key, 0) + 1

    def counter(name: str) -> Any:
        # BEGIN, COMMIT and ROLLBACK are round trips of their own, except on an autocommit
        # connection (the store's one-statement writes), where the driver sends nothing
        def hook(conn: Any, *args: Any) -> None:
            if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
                counts[name] += 1

        return hook

    probe = Probe()
    flow = build_peers_flow(probe, polls=3, wait=timedelta(hours=1))
    out: dict[str, Any] = {}
    async with node_engine(store.url, flows=[flow], concurrency=100) as engine:
        sync = store_of(engine).engine.sync_engine  # type: ignore[attr-defined]
        event.listen(sync, "before_cursor_execute", on_execute)
        for name in ("begin", "commit", "rollback"):
            event.listen(sync, name, counter(name))
        plan = engine.catalog.latest("bench.peers")
        run_id = uuid.uuid4().hex[:6]

        def snapshot() -> dict[str, int]:
            return dict(counts)

        def per(before: dict[str, int], k: int) -> dict[str, float]:
            d = {key: counts[key] - before[key] for key in counts}
            trips = d["statements"] + d["begin"] + d["commit"] + d["rollback"]
            return {"statements": d["statements"] / k, "round_trips": trips / k}

        async def start(i: int) -> None:
            await engine.start(plan, {"key": f"{run_id}-{i}"})

        await run_concurrently(20, 1, start, label="warm-up", start=10 * n)
        texts.clear()
        before = snapshot()
        await run_concurrently(n, 1, start, label="start (1 caller)")
        out["start_1_caller"] = per(before, n)
        out["start_statements"] = sorted(((v / n, k) for k, v in texts.items()), reverse=True)
        before = snapshot()
        await run_concurrently(n, 32, start, label="start (32 callers)", start=n)
        out["start_32_callers"] = per(before, n)
        # a wake: every parked flow due now, one sweep advances each by one attempt (and parks)
        sql(
            store,
            "UPDATE flow_instance SET wake_at = :t WHERE state = 'suspended'",
            {"t": engine.clock.now().replace(year=2000)},
        )
        texts.clear()
        before = snapshot()
        report = await engine.sweep()
        out["wake_and_park"] = per(before, max(report.advanced, 1))
        out["wake_statements"] = sorted(
            ((v / max(report.advanced, 1), k) for k, v in texts.items()), reverse=True
        )
    await asyncio.sleep(1.2)  # the backends are gone: their table statistics are flushed
    rows = sql(
        store,
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del "
        "FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0",
    )
    started = 2 * n + 20
    out["rows_written_per_flow"] = {
        name: {
            "inserted": round(ins / started, 2),
            "updated": round(upd / started, 2),
            "hot_updated": round(hot / started, 2),
            "deleted": round(dele / started, 2),
        }
        for name, ins, upd, hot, dele in rows
        if name not in VERSION_TABLES
    }
    return out


GROUPS = {
    "start": (group_start, 2000),
    "start1": (group_start1, 300),
    "lag": (group_lag, 2000),
    "restart": (group_restart, 500),
    "park": (group_park, 20_000),
    "http": (group_http, 2000),
    "sweep": (group_sweep, 1000),
    "sql": (group_sql, 200),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("group", choices=sorted(GROUPS))
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--rate", type=float, default=None)
    args = parser.parse_args()
    run = name_of("flowpark.runtime.loop", "run")

    job, default_n = GROUPS[args.group]
    n = args.n or default_n
    who = side()
    err_console.print(f"[dim]{args.group} n={n} on {who['commit']} ({who['tree']})[/dim]")
    t0 = time.perf_counter()
    with bench_store("postgres") as store:
        figures = run(job(store, n, rate=args.rate))
    out = {
        "group": args.group,
        "n": n,
        **who,
        "seconds": round(time.perf_counter() - t0, 1),
        "bench_rss_mb": round(rss_mb(), 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        **figures,
    }
    sys.stdout.write(json.dumps(out, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
