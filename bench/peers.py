"""``peers``: the shape other durable-flow systems are measured in.

Phase 1 (throughput): one node (its own process, :mod:`bench.node`) starts N=2000
``bench.peers`` flows as fast as they go (32 at a time): three polls of a trivial in-process
status check (no HTTP), a 1 s durable wait between polls (parked: one row, woken by the
node's in-process wake or its sweep). Reports starts/s (N / the start phase), wakes/s
(wakes / first-to-last wake), completions/s (N / first start to last completion) and the
node's peak RSS. Its wake lag is reported as ``saturated_wake_lag_*``: wakes arrive as fast
as the starts went, faster than one node can serve them, so they queue.

Phase 1b (lag): the same N flows started at ``--rate`` per second (default 1,000): the wake
lag p50/p99 (attempt start minus ``wake_at``) at that offered load.

With ``--metrics on`` the nodes count Prometheus metrics as a deployed node does (``off``,
the default: they do not). ``--metrics compare`` runs only phase 1, ``--repeat`` times (default
3) each with metrics off and on, in turn: it reports the wakes/s of each setting (the best of
its runs) and their ratio, and the node's CPU milliseconds per flow (the median of its runs;
steadier than rates on a loaded machine) and their ratio: the cost of counting on the hot
path.

Phase 2 (crash): a node parks ``--overdue`` 500 flows and is SIGKILLed; once every one of
them is overdue a new node process is spawned. Reports seconds from the spawn (and from
the node's ``ready``) to the first and to the last of the 500 resumed (the start of its
attempt 1, from the journal), and the node's CPU seconds up to its ready line and from
there until the 500 were resumed (steadier than the wall times on a shared machine).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import psutil

from bench.common import REPO, BenchStore, Result, err_console, percentiles, sql

__all__ = ["run"]


def _instant(value: Any) -> datetime:
    """A timestamp read with plain SQL: aware datetime (PostgreSQL) or naive UTC text
    (SQLite)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _node(mode: str, store: BenchStore, **opts: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "bench.node", mode, "--url", store.url]
    for key, value in opts.items():
        if value is False:
            cmd.append(f"--no-{key.replace('_', '-')}")
        elif value is not True:
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "BENCH_PROGRESS": os.environ.get("BENCH_PROGRESS", "")},
    )


async def _line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), timeout)
    if not line:
        raise RuntimeError(f"node exited with {proc.wait()}")
    return line.strip()


async def _phase_drive(
    store: BenchStore, n: int, opts: dict[str, Any], rate: float | None = None
) -> dict[str, Any]:
    paced = f", {rate:g} starts/s" if rate else ", starts as fast as they go"
    err_console.print(f"peers: {n} flows on one node{paced}")
    sql(store, "DELETE FROM flow_step")
    sql(store, "DELETE FROM flow_instance")
    proc = _node("drive", store, n=n, **opts, **({"rate": rate} if rate else {}))
    report = json.loads(await _line(proc, timeout=600))
    proc.wait(timeout=60)
    times = sql(
        store,
        "SELECT min(created_at), max(updated_at) FROM flow_instance WHERE state = 'completed'",
    )[0]
    report["completion_span_s"] = (_instant(times[1]) - _instant(times[0])).total_seconds()
    return report


async def _phase_crash(store: BenchStore, overdue: int, opts: dict[str, Any]) -> dict[str, Any]:
    err_console.print(f"peers: SIGKILL a node holding {overdue} parked flows, restart")
    sql(store, "DELETE FROM flow_step")
    sql(store, "DELETE FROM flow_instance")
    parker = _node("park", store, n=overdue, **{**opts, "wait": 1.0})
    if await _line(parker, timeout=600) != "parked":
        raise RuntimeError("park node did not report")
    parker.send_signal(signal.SIGKILL)
    parker.wait()
    last_wake = sql(
        store, "SELECT max(wake_at), count(*) FROM flow_instance WHERE state = 'suspended'"
    )[0]
    if last_wake[1] != overdue:
        raise RuntimeError(f"expected {overdue} parked flows, found {last_wake[1]}")
    while datetime.now(UTC) <= _instant(last_wake[0]):
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.1)
    spawned = time.time()
    node = _node("serve", store, **opts)
    try:
        ready = float((await _line(node, timeout=60)).split()[1])
        cpu_ready = _cpu_seconds(node.pid)
        deadline = time.time() + 120
        while True:
            resumed = sql(
                store,
                "SELECT min(started_at), max(started_at), count(*) FROM flow_step WHERE scope = 1",
            )[0]
            if resumed[2] >= overdue or time.time() > deadline:
                break
            await asyncio.sleep(0.05)
        cpu_resumed = _cpu_seconds(node.pid)
    finally:
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=40)
        except subprocess.TimeoutExpired:
            node.kill()
    if resumed[2] < overdue:
        raise RuntimeError(f"only {resumed[2]} of {overdue} resumed")
    first, last = _instant(resumed[0]).timestamp(), _instant(resumed[1]).timestamp()
    return {
        "first_from_spawn_s": first - spawned,
        "last_from_spawn_s": last - spawned,
        "first_from_ready_s": first - ready,
        "last_from_ready_s": last - ready,
        "node_boot_s": ready - spawned,
        # the node's own CPU (user + system): up to its ready line (read right after it),
        # and from there until the 500 were seen resumed (polled every 50 ms)
        "node_boot_cpu_s": cpu_ready,
        "resume_cpu_s": cpu_resumed - cpu_ready,
    }


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def run(
    store: BenchStore,
    n: int,
    *,
    polls: int = 3,
    interval: float | None = None,
    scan_interval: float | None = None,
    short_wakes: bool = True,
    concurrency: int = 32,
    overdue: int = 500,
    rate: float | None = None,
    engine_concurrency: int = 100,
    metrics: str = "off",
    repeat: int | None = None,
    **_: Any,
) -> Result:
    opts: dict[str, Any] = {
        "polls": polls,
        "wait": interval or 1.0,
        "scan_interval": scan_interval or 10.0,
        "concurrency": concurrency,
        "engine_concurrency": engine_concurrency,
    }
    if not short_wakes:
        opts["short_wakes"] = False
    if metrics == "compare":
        return await _compare_metrics(store, n, opts, repeat or 3)
    if metrics == "on":
        opts["metrics"] = True
    pace = rate or 1000.0
    drive = await _phase_drive(store, n, opts)
    paced = await _phase_drive(store, n, opts, rate=pace)
    crash = await _phase_crash(store, overdue, opts)
    saturated = percentiles([x * 1000 for x in drive["lags_s"]], (50, 99))
    lags = percentiles([x * 1000 for x in paced["lags_s"]], (50, 99))
    figures = {
        "starts_per_s": round(n / drive["start_span_s"], 1),
        "wakes_per_s": round(drive["wakes"] / max(drive["wake_span_s"], 1e-9), 1),
        "completions_per_s": round(n / drive["completion_span_s"], 1),
        "wake_lag_p50_ms": round(lags["p50"], 1),
        "wake_lag_p99_ms": round(lags["p99"], 1),
        "paced_starts_per_s": round(n / paced["start_span_s"], 1),
        "paced_wakes_per_s": round(paced["wakes"] / max(paced["wake_span_s"], 1e-9), 1),
        "saturated_wake_lag_p50_ms": round(saturated["p50"], 1),
        "saturated_wake_lag_p99_ms": round(saturated["p99"], 1),
        "peak_rss_mb": round(drive["peak_rss_mb"], 1),
        "restart_first_resumed_s": round(crash["first_from_spawn_s"], 3),
        "restart_last_resumed_s": round(crash["last_from_spawn_s"], 3),
        "ready_last_resumed_s": round(crash["last_from_ready_s"], 3),
    }
    pg = store.kind == "postgres"
    targets = {}
    if pg:
        targets = {
            "starts_per_s": (">= 1000 (PostgreSQL)", figures["starts_per_s"] >= 1000),
            "wakes_per_s": (">= 1000 (PostgreSQL)", figures["wakes_per_s"] >= 1000),
            "wake_lag_p99_ms": (
                f"< 100 at {pace:g} starts/s (PostgreSQL)",
                figures["wake_lag_p99_ms"] < 100,
            ),
            "restart_last_resumed_s": (
                "<= 1 s after restart (PostgreSQL)",
                figures["restart_last_resumed_s"] <= 1.0,
            ),
        }
    return Result(
        "peers",
        store.kind,
        n,
        figures,
        {
            **opts,
            "short_wakes": short_wakes,
            "overdue": overdue,
            "rate": pace,
            "metrics": metrics,
        },
        targets=targets,
        details={
            "wakes": drive["wakes"],
            "start_span_s": round(drive["start_span_s"], 2),
            "wake_span_s": round(drive["wake_span_s"], 2),
            "completion_span_s": round(drive["completion_span_s"], 2),
            "wake_jobs_scheduled": drive["wake_jobs_scheduled"],
            "restart": {k: round(v, 3) for k, v in crash.items()},
        },
    )


def _throughput(drive: dict[str, Any], n: int) -> dict[str, float]:
    return {
        "wakes_per_s": drive["wakes"] / max(drive["wake_span_s"], 1e-9),
        "starts_per_s": n / drive["start_span_s"],
        "completions_per_s": n / drive["completion_span_s"],
        "cpu_ms_per_flow": drive["cpu_s"] * 1000 / n,
    }


async def _compare_metrics(store: BenchStore, n: int, opts: dict[str, Any], repeat: int) -> Result:
    """Phase 1 with metrics off and on in turn, ``repeat`` times each."""
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for setting in ("off", "on") * repeat:
        err_console.print(f"peers: metrics {setting}")
        extra = {"metrics": True} if setting == "on" else {}
        runs[setting].append(_throughput(await _phase_drive(store, n, {**opts, **extra}), n))
    best = {k: max(v, key=lambda r: r["wakes_per_s"]) for k, v in runs.items()}
    off, on = best["off"]["wakes_per_s"], best["on"]["wakes_per_s"]
    ratio = on / off
    cpu = {k: statistics.median(r["cpu_ms_per_flow"] for r in v) for k, v in runs.items()}
    figures = {
        "wakes_per_s_metrics_off": round(off, 1),
        "wakes_per_s_metrics_on": round(on, 1),
        "wakes_on_over_off": round(ratio, 3),
        "cpu_ms_per_flow_metrics_off": round(cpu["off"], 3),
        "cpu_ms_per_flow_metrics_on": round(cpu["on"], 3),
        "cpu_on_over_off": round(cpu["on"] / cpu["off"], 3),
        "starts_per_s_metrics_off": round(best["off"]["starts_per_s"], 1),
        "starts_per_s_metrics_on": round(best["on"]["starts_per_s"], 1),
        "completions_per_s_metrics_off": round(best["off"]["completions_per_s"], 1),
        "completions_per_s_metrics_on": round(best["on"]["completions_per_s"], 1),
    }
    return Result(
        "peers",
        store.kind,
        n,
        figures,
        {**opts, "metrics": "compare"},
        targets={
            "wakes_on_over_off": (">= 0.95 (metrics cost < 5%)", ratio >= 0.95),
            "cpu_on_over_off": ("<= 1.05 (metrics cost < 5%)", cpu["on"] / cpu["off"] <= 1.05),
        },
        details={
            "runs": {
                k: [{m: round(x, 3 if m.startswith("cpu") else 1) for m, x in r.items()} for r in v]
                for k, v in runs.items()
            }
        },
    )
