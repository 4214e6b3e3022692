"""``python -m bench compare --against REV [--scenarios ...] [--rounds N]``: the same
figures for REV and for this tree, measured interleaved in one sitting, as ratios.

REV is checked out in a temporary git worktree. Each figure group (:mod:`bench.figures`)
runs in its own process for each side in turn (A B, then B A in the next round, and so
on), with ``PYTHONPATH`` = a copy of this tree's ``bench/`` (the harness, the same for
both sides) then the side's tree (its ``flowpark`` package, or ``app`` and ``samples``
before the one-package move: the harness imports through :mod:`bench.compat`, which picks
the side's layout, and its migrations); each process reports the commit whose engine it
imported, and the table prints both. Both trees and
the harness are byte-compiled first (:func:`compile_tree`), as an installed node is. The
fake OCR provider runs from this tree for both sides. Every round also runs the pgbench baseline
(:mod:`bench.pgbase`: 1-client single-row UPDATE commits/s on the same server), and the
ratios that the targets name are computed per round against it.

Each figure prints as median [min-max] over the rounds for each side, and the ratio of the
medians HEAD/REV. ``--json`` prints everything (every round's raw figures) as one object.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import REPO, err_console
from bench.pgbase import pgbench_tps

__all__ = ["compare"]

ALIASES = {
    "peers": ["start", "start1", "lag", "restart"],
    "all": ["start", "start1", "lag", "restart", "park", "http", "sweep"],
}
DEFAULT = ["start", "start1", "lag", "restart", "park", "http", "sweep"]

#: (key, label, better): the rows of the table, in order; better = "higher" or "lower"
ROWS = [
    ("starts_per_s", "starts/s, 32 callers (peers flow)", "higher"),
    ("starts_over_pgbench", "  ÷ same-run pgbench 1-client TPS", "higher"),
    ("starts_per_s_1", "starts/s, 1 caller", "higher"),
    ("wakes_per_s", "wakes/s (peers flow, saturated)", "higher"),
    ("node_cpu_ms_per_flow", "node CPU ms per flow (start + 2 wakes + end)", "lower"),
    ("sustained_flows_per_s", "sustained flows/s (1000 / CPU ms per flow)", "higher"),
    ("lag_rate_per_s", "  paced start rate for the lag (half the sustained)", "info"),
    ("wake_lag_p50_ms", "wake lag p50 ms, paced", "lower"),
    ("wake_lag_p99_ms", "wake lag p99 ms, paced", "lower"),
    ("node_ready_s", "restart: node ready s from spawn", "lower"),
    ("resumed_after_ready_s", "restart: 500 overdue resumed s after ready", "lower"),
    ("resumed_from_spawn_s", "restart: 500 overdue resumed s from spawn", "lower"),
    ("node_ready_cpu_s", "  node CPU s up to ready", "lower"),
    ("resume_cpu_s", "  node CPU s from ready until the 500 resumed", "lower"),
    ("bytes_per_parked", "bytes per parked document.process", "lower"),
    ("park_statements_per_start", "  SQL statements per document.process start", "lower"),
    ("park_starts_per_s", "document.process starts/s (engine, 32 callers)", "higher"),
    ("http_server_cpu_ms", "HTTP start: server CPU ms per request", "lower"),
    ("http_ceiling_cpu_ms", "  bare FastAPI route: server CPU ms per request", "info"),
    ("http_cpu_over_ceiling", "  ÷ the bare route's", "lower"),
    ("http_starts_per_s", "HTTP starts/s (raw client, 32 connections)", "higher"),
    ("sweep_attempts_per_s", "sweep attempts/s", "higher"),
    ("sweep_update_tps", "  same-run single-row UPDATE commits/s (32 writers)", "info"),
    ("sweep_over_update", "  sweep ÷ UPDATE", "higher"),
    ("pgbench_tps", "pgbench 1-client single-row UPDATE TPS (per round)", "info"),
]


def _git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


@contextmanager
def rev_tree(rev: str) -> Iterator[tuple[Path, Path]]:
    """A detached worktree of ``rev`` and a copy of this tree's harness, both temporary."""
    sha = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    folder = Path(tempfile.mkdtemp(prefix="flowpark-compare-"))
    tree = folder / "rev"
    harness = folder / "harness"
    _git("worktree", "add", "--detach", "--quiet", str(tree), sha)
    shutil.copytree(REPO / "bench", harness / "bench", ignore=shutil.ignore_patterns("__pycache__"))
    try:
        yield tree, harness
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)])
        shutil.rmtree(folder, ignore_errors=True)


def compile_tree(tree: Path, harness: Path) -> None:
    """Byte-compile the side's ``app`` and ``samples`` and the harness once, as installing
    the wheel does: with ``PYTHONDONTWRITEBYTECODE`` set (as on this machine and in the
    image) every process spawned from a source tree would otherwise compile each module
    it imports again (~0.1 s of the ~0.65 s of CPU a node spent up to its ready line),
    which a deployed node never spends."""
    folders = [
        str(p)
        for p in (tree / "app", tree / "flowpark", tree / "samples", harness / "bench")
        if p.is_dir()
    ]
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *folders], check=True, capture_output=True
    )


#: Where a side's process imports its engine from: ``flowpark.engine`` in this tree, ``app.engine``
#: in a revision from before the one-package move (:mod:`bench.compat` picks).
_PROBE = "from bench.compat import module; print(module('flowpark.engine.clock').__file__)"


def _env(harness: Path, tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(harness), str(tree)])
    env["FLOWPARK_BENCH_PROVIDER_PATH"] = str(REPO)
    env.pop("BENCH_PROGRESS", None)
    return env


def run_group(
    harness: Path, tree: Path, group: str, n: int | None, rate: float | None
) -> dict[str, Any]:
    """One figure group for the side at ``tree`` in its own process; its JSON object."""
    cmd = [sys.executable, "-m", "bench.figures", group]
    if n:
        cmd += ["--n", str(n)]
    if rate:
        cmd += ["--rate", f"{rate:.1f}"]
    for attempt in range(3):  # a shared server may refuse a connection for a moment
        done = subprocess.run(
            cmd, cwd=harness, env=_env(harness, tree), capture_output=True, text=True, timeout=1800
        )
        if done.returncode == 0:
            return dict(json.loads(done.stdout.strip().splitlines()[-1]))
        if "too many clients" not in done.stderr or attempt == 2:
            break
        err_console.print(f"  {group}: the server had no connection free; again in 10 s")
        time.sleep(10)
    raise RuntimeError(f"{group} on {tree} failed:\n{done.stderr[-4000:]}")


def _expand(names: list[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        for group in ALIASES.get(name, [name]):
            if group not in out:
                out.append(group)
    if "lag" in out and "start" in out:  # the lag is paced from the same round's start
        out.remove("lag")
        out.insert(out.index("start") + 1, "lag")
    return out


def _spread(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    fmt = _fmt(med)
    if len(values) == 1:
        return fmt
    return f"{fmt} [{_fmt(min(values))}–{_fmt(max(values))}]"


def _fmt(v: float) -> str:
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def compare(
    against: str,
    groups: list[str],
    rounds: int,
    *,
    sizes: dict[str, int],
    once: set[str],
    pgbench_seconds: float,
    lag_rate: float | None,
) -> dict[str, Any]:
    """Run ``groups`` for REV and this tree, ``rounds`` times interleaved; all figures."""
    groups = _expand(groups)
    results: dict[str, list[dict[str, Any]]] = {"REV": [], "HEAD": []}
    commits: dict[str, set[str]] = {"REV": set(), "HEAD": set()}
    baselines: list[float] = []
    with rev_tree(against) as (rev, harness):
        trees = {"REV": rev, "HEAD": REPO}
        for name, tree in trees.items():
            probe = subprocess.run(
                [sys.executable, "-c", _PROBE],
                cwd=harness,
                env=_env(harness, tree),
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if not probe.startswith(str(tree.resolve())):
                raise RuntimeError(f"{name} imports its engine from {probe}, not from {tree}")
            compile_tree(tree, harness)
            err_console.print(f"{name}: {_git('log', '-1', '--format=%h %s', cwd=tree)[:100]}")
        for r in range(rounds):
            tps = pgbench_tps(pgbench_seconds)
            baselines.append(tps)
            err_console.print(f"round {r + 1}/{rounds}: pgbench 1-client UPDATE {tps:,.0f} tps")
            figures: dict[str, dict[str, Any]] = {"REV": {"pgbench_tps": tps}, "HEAD": {}}
            figures["HEAD"]["pgbench_tps"] = tps
            order = ["REV", "HEAD"] if r % 2 == 0 else ["HEAD", "REV"]
            for group in groups:
                if group in once and r > 0:
                    continue
                for name in order:
                    rate = None
                    if group == "lag":
                        sustained = figures[name].get("sustained_flows_per_s")
                        rate = lag_rate or (sustained / 2 if sustained else 300.0)
                    t0 = time.perf_counter()
                    out = run_group(harness, trees[name], group, sizes.get(group), rate)
                    commits[name].add(out["commit"])
                    shown = {
                        k: round(v, 3)
                        for k, v in out.items()
                        if isinstance(v, float) and k not in ("seconds", "bench_rss_mb")
                    }
                    err_console.print(
                        f"  {group:8s} {name:4s} {out['commit']}: {shown} "
                        f"({time.perf_counter() - t0:.0f} s)"
                    )
                    figures[name].update(out)
            for name in figures:
                f = figures[name]
                if "starts_per_s" in f:
                    f["starts_over_pgbench"] = f["starts_per_s"] / tps
                results[name].append(f)
    return {
        "against": against,
        "commits": {k: sorted(v) for k, v in commits.items()},
        "groups": groups,
        "rounds": rounds,
        "pgbench_tps": baselines,
        "results": results,
    }


def table(report: dict[str, Any]) -> str:
    """The Markdown table: figure, REV median [min-max], HEAD median [min-max], HEAD/REV."""
    rev = ", ".join(report["commits"]["REV"])
    head = ", ".join(report["commits"]["HEAD"])
    lines = [
        f"| figure | REV {rev} | HEAD {head} | HEAD/REV |",
        "|---|---|---|---|",
    ]
    for key, label, _better in ROWS:
        a = [r[key] for r in report["results"]["REV"] if key in r]
        b = [r[key] for r in report["results"]["HEAD"] if key in r]
        if not a and not b:
            continue
        ratio = (
            f"{statistics.median(b) / statistics.median(a):.2f}"
            if a and b and statistics.median(a)
            else "-"
        )
        lines.append(f"| {label} | {_spread(a)} | {_spread(b)} | {ratio} |")
    by_rel = [r.get("bytes_by_relation") for r in report["results"]["HEAD"]]
    rev_rel = [r.get("bytes_by_relation") for r in report["results"]["REV"]]
    if any(by_rel) or any(rev_rel):
        a_rel = next((x for x in rev_rel if x), {})
        b_rel = next((x for x in by_rel if x), {})
        lines += ["", "| relation (bytes per parked) | REV | HEAD |", "|---|---|---|"]
        names = sorted(
            set(a_rel) | set(b_rel), key=lambda k: -max(a_rel.get(k, 0), b_rel.get(k, 0))
        )
        small = [k for k in names if max(a_rel.get(k, 0), b_rel.get(k, 0)) < 2]
        for rel in names:
            if rel not in small:
                lines.append(f"| {rel} | {a_rel.get(rel, '-')} | {b_rel.get(rel, '-')} |")
        if small:  # empty tables and indexes: one page each (8 KiB / N)
            a_sum = round(sum(a_rel.get(k, 0) for k in small), 1)
            b_sum = round(sum(b_rel.get(k, 0) for k in small), 1)
            lines.append(f"| {len(small)} empty relations (a page each) | {a_sum} | {b_sum} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench compare", description=__doc__)
    parser.add_argument("--against", required=True, help="the revision to compare with")
    parser.add_argument(
        "--scenarios",
        default=",".join(DEFAULT),
        help="figure groups, comma-separated: start, start1, lag, restart, park, http, "
        f"sweep, sql; peers = {','.join(ALIASES['peers'])}; all (default: {','.join(DEFAULT)})",
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--once",
        default="park",
        help="groups run in the first round only (default: park, whose bytes do not vary)",
    )
    parser.add_argument("--n", action="append", default=[], help="GROUP=N, e.g. park=20000")
    parser.add_argument("--pgbench-seconds", type=float, default=10.0)
    parser.add_argument(
        "--lag-rate", type=float, default=None, help="fixed start rate for the lag run"
    )
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    sizes = {k: int(v) for k, v in (item.split("=", 1) for item in args.n)}
    report = compare(
        args.against,
        [s.strip() for s in args.scenarios.split(",") if s.strip()],
        args.rounds,
        sizes=sizes,
        once={s for s in args.once.split(",") if s},
        pgbench_seconds=args.pgbench_seconds,
        lag_rate=args.lag_rate,
    )
    report["table"] = table(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, default=str))
    if args.json:
        sys.stdout.write(json.dumps(report, default=str) + "\n")
    else:
        print(report["table"])
    return 0
