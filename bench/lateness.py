"""``lateness``: how late a wake is. N instances of ``bench.peers`` (a trivial in-process
status check, polled ``--polls`` times with a short fixed interval, 2 s by default),
started at a steady ``--rate`` (25/s by default, well inside one node's capacity), run on
a node of this process: the engine plus the production ``Sweeper`` (periodic sweep every
``--scan-interval`` seconds, default the server's 10 s, and the in-process wake for waits
due before the next scan).

Lateness of a wake = the attempt's start (engine clock, inside the capability) minus the
``wake_at`` the park recorded (seen through ``Engine.wake_listeners``). Reported as p50,
p99 and max in milliseconds, next to the scan interval; ``--no-short-wakes`` measures the
sweep alone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

from bench.common import BenchStore, Result, percentiles, progress, run_concurrently, sql
from bench.compat import name_of
from bench.flows import Probe, build_peers_flow, node_engine

Sweeper = name_of("flowpark.runtime.scheduler", "Sweeper")

__all__ = ["run", "wait_completed"]


async def wait_completed(store: BenchStore, n: int, *, label: str, timeout: float) -> float:
    """Wait (with a progress bar) until ``n`` instances completed; returns the seconds."""
    t0 = time.perf_counter()
    with progress() as bar:
        task = bar.add_task(label, total=n)
        while True:
            counts = dict(sql(store, "SELECT state, count(*) FROM flow_instance GROUP BY state"))
            done = counts.get("completed", 0)
            bar.update(task, completed=done)
            if counts.get("failed"):
                raise RuntimeError(f"{counts['failed']} instances failed: {counts}")
            if done >= n:
                return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise RuntimeError(f"only {done} of {n} instances completed in {timeout}s")
            await asyncio.sleep(0.1)


async def run(
    store: BenchStore,
    n: int,
    *,
    polls: int = 3,
    scan_interval: float = 10.0,
    interval: float = 2.0,
    short_wakes: bool = True,
    concurrency: int = 32,
    rate: float = 25.0,
    **_: Any,
) -> Result:
    probe = Probe()
    flow = build_peers_flow(probe, polls=polls, wait=timedelta(seconds=interval))
    run_id = uuid.uuid4().hex[:6]
    async with node_engine(store.url, flows=[flow]) as engine:
        engine.wake_listeners.append(probe.on_park)
        sweeper = Sweeper(engine, scan_interval, short_wakes=short_wakes)
        sweeper.start()
        try:
            plan = engine.catalog.latest("bench.peers")

            async def start(i: int) -> None:
                await engine.start(plan, {"key": f"{run_id}-{i}"})

            await run_concurrently(n, concurrency, start, label="start", rate=rate)
            await wait_completed(
                store, n, label="wakes", timeout=scan_interval * polls + interval * polls + 120
            )
        finally:
            await sweeper.stop()
    lags_ms = [lag * 1000 for lag in probe.lags]
    stats = percentiles(lags_ms, (50, 99))
    figures = {
        "lateness_p50_ms": round(stats["p50"], 1),
        "lateness_p99_ms": round(stats["p99"], 1),
        "lateness_max_ms": round(stats["max"], 1),
        "scan_interval_ms": round(scan_interval * 1000, 1),
        "p99_over_scan_interval": round(stats["p99"] / (scan_interval * 1000), 4),
        "wakes": len(lags_ms),
    }
    return Result(
        "lateness",
        store.kind,
        n,
        figures,
        {
            "polls": polls,
            "interval_s": interval,
            "scan_interval_s": scan_interval,
            "short_wakes": short_wakes,
            "start_rate_per_s": rate,
            "offered_wakes_per_s": rate * (polls - 1),
        },
        details={"wake_jobs_scheduled": sweeper.wakes_scheduled},
    )
