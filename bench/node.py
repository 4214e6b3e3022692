"""``python -m bench.node MODE --url URL ...``: a flowpark node for the ``peers`` bench, in
its own process (so its RSS is its own and it can be SIGKILLed).

The node is what ``create_app``/``flowpark worker`` run: an ``Engine`` on the store with
the ``SystemClock`` and the production ``Sweeper`` (periodic sweep + in-process wakes),
with the ``bench.peers`` flow registered, its heap settled as the worker's
(:mod:`flowpark.runtime.heap`, when the side has it).

Modes:
* ``drive``: start N flows (``--concurrency`` at a time, at most ``--rate`` per second when
  given) and wait until all completed;
  print one JSON line with the start window, wake instants and lags, and peak RSS.
* ``park``: start N flows with no sweeper and print ``parked`` (then wait to be killed).
* ``serve``: sweep until SIGTERM; print ``ready <epoch seconds>`` once the sweeper runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import sys
import time
import uuid
from datetime import timedelta

from bench.compat import name_of, store_of


def _hold_collector() -> None:
    """What ``flowpark worker`` does first: pause the collector until the node has started
    (:func:`flowpark.runtime.heap.hold_collector`; :func:`_settle_heap` resumes it). A revision
    without it keeps the collector on."""
    try:
        hold_collector = name_of("flowpark.runtime.heap", "hold_collector")
    except ImportError:
        return
    hold_collector()


if __name__ == "__main__":
    _hold_collector()

from sqlalchemy import text  # noqa: E402 - after the collector is held, as the worker

from bench.flows import Probe, build_peers_flow, node_engine  # noqa: E402

run = name_of("flowpark.runtime.loop", "run")
Sweeper = name_of("flowpark.runtime.scheduler", "Sweeper")


async def _count(engine, state: str) -> int:  # type: ignore[no-untyped-def]
    async with store_of(engine).engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    text("SELECT count(*) FROM flow_instance WHERE state = :s"), {"s": state}
                )
            ).scalar_one()
        )


async def main(args: argparse.Namespace) -> None:
    probe = Probe()
    flow = build_peers_flow(probe, polls=args.polls, wait=timedelta(seconds=args.wait))
    async with node_engine(
        args.url,
        flows=[flow],
        pool_size=args.pool_size,
        concurrency=args.engine_concurrency,
        node_id=f"bench-{args.mode}-{uuid.uuid4().hex[:4]}",
        metrics=args.metrics,
    ) as engine:
        engine.wake_listeners.append(probe.on_park)
        plan = engine.catalog.latest("bench.peers")
        sweeper = None
        if args.mode in ("drive", "serve"):
            sweeper = Sweeper(engine, args.scan_interval, short_wakes=args.short_wakes)
            sweeper.start()
        _settle_heap()
        if args.mode == "serve":
            print(f"ready {time.time():.6f}", flush=True)
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            await stop.wait()
            await sweeper.stop()  # type: ignore[union-attr]
            return
        from bench.common import run_concurrently  # not at import: a serving node boots faster

        run_id = uuid.uuid4().hex[:6]

        async def start(i: int) -> None:
            await engine.start(plan, {"key": f"{run_id}-{i}"})

        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        await run_concurrently(
            args.n, args.concurrency, start, label=f"{args.mode}: start", rate=args.rate
        )
        t1 = time.perf_counter()
        if args.mode == "park":
            print("parked", flush=True)
            await asyncio.Event().wait()  # until killed
        while await _count(engine, "completed") < args.n:
            await asyncio.sleep(0.05)
        t2 = time.perf_counter()
        cpu2 = _cpu_seconds()
        await sweeper.stop()  # type: ignore[union-attr]
    report = {
        "start_span_s": t1 - t0,
        "wake_span_s": (max(probe.wake_times) - min(probe.wake_times)) if probe.wake_times else 0.0,
        "wakes": len(probe.lags),
        "lags_s": probe.lags,
        "all_done_s": t2 - t0,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # the node's CPU seconds (user + system) over its whole life, steadier than rates
        # on a loaded machine
        "cpu_s": _cpu_seconds(),
        # the same, from the first start to the last completion only (no boot, no imports)
        "drive_cpu_s": cpu2 - cpu0,
        "wake_jobs_scheduled": sweeper.wakes_scheduled if sweeper else 0,
    }
    print(json.dumps(report), flush=True)


def _settle_heap() -> None:
    """What ``flowpark worker`` does once started (``FLOWPARK_GC_FREEZE``, on by default
    there; it also resumes a collector :func:`_hold_collector` paused); a revision without
    :mod:`flowpark.runtime.heap` keeps the collector's defaults."""
    try:
        settle_heap = name_of("flowpark.runtime.heap", "settle_heap")
    except ImportError:
        return
    settle_heap()


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["drive", "park", "serve"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--polls", type=int, default=3)
    parser.add_argument("--wait", type=float, default=1.0)
    parser.add_argument("--scan-interval", type=float, default=10.0)
    parser.add_argument("--no-short-wakes", dest="short_wakes", action="store_false")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--pool-size", type=int, default=20)
    parser.add_argument(
        "--metrics", action="store_true", help="count Prometheus metrics as a node does"
    )
    parser.add_argument(
        "--engine-concurrency",
        type=int,
        default=32,
        help="runs the node advances at once (FLOWPARK_CONCURRENCY)",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="starts begun per second (default: as fast as they go)",
    )
    return parser.parse_args()


if __name__ == "__main__":
    run(main(parse()))
    sys.exit(0)
