"""``python -m bench <scenario> --store sqlite|postgres --n N [--json]``, or
``python -m bench compare --against REV [--scenarios ...] [--rounds N]`` (see bench/compare.py).

Scenarios: park, sweep, start, lateness, signal, peers, console, list, retention, providers,
scale, embedded, bulkwake (see BENCHMARKS.md). ``scale`` and ``embedded`` run on PostgreSQL
only (their default store): ``python -m bench scale --parked 1000000 --json``
(``--parked`` is ``--n``).
Each run makes a fresh database (PostgreSQL: ``flowpark_bench_<random>`` on
``FLOWPARK_BENCH_PG_URL``, default the local server; SQLite: a temporary file), runs,
prints a table, and with
``--json`` prints one JSON object on stdout (the table then goes to stderr).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from contextlib import ExitStack

from bench.common import bench_store, err_console, machine
from bench.compat import name_of

run = name_of("flowpark.runtime.loop", "run")

SCENARIOS = {
    # name: (module, default N)
    "park": ("bench.park", 10_000),
    "sweep": ("bench.sweep", 2_000),
    "start": ("bench.start", 3_000),
    "lateness": ("bench.lateness", 1_000),
    "signal": ("bench.signal", 1_000),
    "peers": ("bench.peers", 2_000),
    "console": ("bench.console", 10_000),
    "list": ("bench.listing", 1_000_000),
    "retention": ("bench.retention", 2_000),
    "providers": ("bench.providers", 2_000),
    "scale": ("bench.scale", 1_000_000),
    "embedded": ("bench.embedded", 2_000),
    "bulkwake": ("bench.bulkwake", 1_000),
}
#: scenarios that run on one store only (their default)
DEFAULT_STORE = {"scale": "postgres", "embedded": "postgres"}
#: scenarios that run on a PostgreSQL server of their own unless --server shared
OWN_SERVER = {"scale": "own"}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument(
        "--store",
        choices=["sqlite", "postgres"],
        default=None,
        help="sqlite (default) or postgres (scale: postgres only)",
    )
    parser.add_argument(
        "--n",
        "--parked",
        dest="n",
        type=int,
        default=None,
        help="instances (default per scenario); scale: parked instances (1,000,000)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--via",
        choices=["engine", "http"],
        default="engine",
        help="park: start through the engine API or over HTTP",
    )
    parser.add_argument("--concurrency", type=int, default=32, help="client concurrency")
    parser.add_argument("--polls", type=int, default=3, help="sweep/peers: polls per flow")
    parser.add_argument(
        "--scan-interval", type=float, default=None, help="lateness/peers: seconds between sweeps"
    )
    parser.add_argument(
        "--overdue",
        type=int,
        default=500,
        help="peers: parked flows left overdue by the SIGKILLed node",
    )
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        help="lateness/peers: seconds of durable wait between polls",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="lateness: starts per second (default 25); peers: starts per "
        "second of the lag phase (default 1000); providers: the limit (default 50); "
        "scale: instances falling due per second in the window (default half the claims/s)",
    )
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="scale: seconds of the wake window (default 300)",
    )
    parser.add_argument(
        "--start-rate",
        type=float,
        default=None,
        help="scale: starts per second of the callers in the window (default a tenth "
        "of the due rate)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="scale: flowpark servers that sweep and answer the starts (default 1)",
    )
    parser.add_argument(
        "--claim-seconds",
        type=float,
        default=None,
        help="scale: longest claims/s measurement (default 25)",
    )
    parser.add_argument(
        "--engine-concurrency",
        type=int,
        default=None,
        help="peers/sweep: runs the node advances at once "
        "(FLOWPARK_CONCURRENCY; default 100 for peers, 32 for sweep)",
    )
    parser.add_argument(
        "--no-short-wakes",
        dest="short_wakes",
        action="store_false",
        help="lateness/peers: no in-process wake, the periodic sweep only",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="console: answers timed per page (default 20); list: per filter (default 50); "
        "peers --metrics compare: runs of each setting (default 3)",
    )
    parser.add_argument(
        "--metrics",
        choices=["on", "off", "compare"],
        default=None,
        help="peers: the node counts Prometheus metrics (on, as a deployed node does) or "
        "not (off, the default); compare: only the throughput phase, run with metrics off "
        "and on in turn (twice each), wakes/s of both",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="providers: 200 documents and a 10 s pushback; scale: at most 20,000 parked "
        "and a 30 s window; embedded: 100 requests per path (a check that it works)",
    )
    parser.add_argument(
        "--server",
        choices=["own", "shared"],
        default=None,
        help="scale: a PostgreSQL server of the bench's own with the default settings "
        "(own, the default: autovacuum on) or FLOWPARK_BENCH_PG_URL's (shared)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        from bench.compare import main as compare

        return compare(argv[1:])
    args = parse(argv)
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    module_name, default_n = SCENARIOS[args.scenario]
    module = importlib.import_module(module_name)
    n = args.n or default_n
    if args.quick and hasattr(module, "QUICK_N"):  # the scenario's size for --quick
        n = min(n, module.QUICK_N)
    options = {
        k: v
        for k, v in vars(args).items()
        if k not in ("scenario", "store", "n", "json", "keep", "server") and v is not None
    }
    kind = args.store or DEFAULT_STORE.get(args.scenario, "sqlite")
    own = kind == "postgres" and (args.server or OWN_SERVER.get(args.scenario)) == "own"
    with ExitStack() as stack:
        if own:
            from bench.ownserver import own_server

            os.environ["FLOWPARK_BENCH_PG_URL"] = stack.enter_context(own_server())
            err_console.print(f"[dim]own server: {os.environ['FLOWPARK_BENCH_PG_URL']}[/dim]")
        with bench_store(kind, keep=args.keep) as store:
            err_console.print(f"[bold]{args.scenario}[/bold] on {kind}, n={n}")
            result = run(module.run(store, n, **options))
            result.machine = machine(store)
            result.params["server"] = "own (default settings)" if own else "shared"
    result.emit(as_json=args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
