"""``python -m bench.cpuprofile [--n N] [--folded OUT]``: where a flowpark server's CPU goes
per ``POST /api/v1/documents``, by layer, from a sampler that counts CPU time only.

The server (:mod:`bench.serve` with ``FLOWPARK_BENCH_CPUPROFILE`` set) installs
:func:`install`: ``SIGPROF`` fires after each few milliseconds of the process's own CPU
(``ITIMER_PROF``; the kernel's tick, 4 ms here) and the handler records the Python stack it
interrupted. A process that waits for a core takes no sample, so the samples share the CPU
as ``getrusage`` counts it. (py-spy samples by wall time and takes a process that is
runnable but not running for busy: on this loaded machine it put 27 % of a start on
psycopg's socket send, which ``perf`` puts under 2 %.) Native time is charged to the
Python frame that called it. The collector's own time is taken from ``gc.callbacks``.

After a warm-up of 300 starts, the raw keep-alive client (:mod:`bench.rawclient`, 32
connections) sends N starts; the table gives each layer's share of the samples and its
milliseconds per start (the share of the server's CPU per start measured by
:class:`bench.common.CpuMeter`). A sample belongs to the layer of its innermost frame
that has one (standard-library frames such as ``json`` or ``dataclasses`` belong to the
code that called them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench.compat import name_of

__all__ = ["LAYERS", "install", "layer_table"]

#: (layer, path prefixes): the first layer one of whose prefixes starts a frame's file wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "database: store, SQLAlchemy, psycopg",
        ("psycopg/", "sqlalchemy/", "greenlet", "flowpark/store/"),
    ),
    (
        "outbound calls: httpx, aiohttp, the sample's OCR client",
        ("httpx/", "httpx_aiohttp/", "aiohttp/", "yarl/", "multidict/", "aiohappyeyeballs/")
        + ("samples/", "flowpark/runtime/http.py"),
    ),
    (
        "metrics, logs, traces",
        ("prometheus_client/", "opentelemetry/", "logging/", "flowpark/runtime/observe.py")
        + (
            "flowpark/runtime/metrics.py",
            "flowpark/runtime/logs.py",
            "flowpark/runtime/tracing.py",
        ),
    ),
    ("engine: start, decide, execute, park", ("flowpark/engine/", "flowpark/flows/")),
    (
        "HTTP in and out: uvicorn, Starlette, FastAPI, middleware, auth, body, answer",
        ("uvicorn/", "starlette/", "fastapi/", "flowpark/api/", "flowpark/runtime/app.py"),
    ),
    ("event loop", ("asyncio/", "uvloop/")),
]


def _short(path: str, roots: list[str]) -> str:
    """``path`` from its ``sys.path`` entry on
    (``flowpark/engine/node/engine.py``, ``httpx/_client.py``)."""
    for root in roots:
        if path.startswith(root):
            return path[len(root) :]
    return path


def install(out: str) -> None:
    """In this process: sample the Python stack every ``ITIMER_PROF`` tick between
    ``SIGUSR1`` (start, counters reset) and ``SIGUSR2`` (stop; the folded stacks go to
    ``out``, the collector's figures to ``out + ".gc"`` as JSON)."""
    import gc

    counts: collections.Counter[str] = collections.Counter()
    names: dict[Any, str] = {}
    state: dict[str, Any] = {"on": False, "gc": 0.0, "gc_runs": 0, "t": 0.0}
    roots = sorted(
        {os.path.join(os.path.abspath(p or "."), "") for p in sys.path}, key=len, reverse=True
    )

    def name(frame: FrameType) -> str:
        code = frame.f_code
        found = names.get(code)
        if found is None:
            found = names[code] = f"{code.co_qualname} ({_short(code.co_filename, roots)})"
        return found

    def sample(signum: int, frame: FrameType | None) -> None:
        if not state["on"]:
            return
        stack = []
        while frame is not None:
            stack.append(name(frame))
            frame = frame.f_back
        counts[";".join(reversed(stack))] += 1

    def collected(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            state["t"] = time.process_time()
        elif state["on"]:
            state["gc"] += time.process_time() - state["t"]
            state["gc_runs"] += 1

    def start(signum: int, frame: FrameType | None) -> None:
        counts.clear()
        state.update(on=True, gc=0.0, gc_runs=0)

    def stop(signum: int, frame: FrameType | None) -> None:
        state["on"] = False
        Path(out).write_text("".join(f"{k} {v}\n" for k, v in counts.items()))
        Path(out + ".gc").write_text(json.dumps({"seconds": state["gc"], "runs": state["gc_runs"]}))

    gc.callbacks.append(collected)
    signal.signal(signal.SIGPROF, sample)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    signal.setitimer(signal.ITIMER_PROF, 0.001, 0.001)


def _layer(frames: list[str]) -> str:
    for frame in reversed(frames):
        found = re.search(r"\(([^()]*)\)$", frame)
        path = found.group(1) if found else frame
        for layer, prefixes in LAYERS:
            if path.startswith(prefixes):
                return layer
    return "other"


def layer_table(folded: str, cpu_ms: float) -> list[tuple[str, float, float]]:
    """(layer, share of the samples, ms per start) for the folded stacks in ``folded``,
    largest first; ``cpu_ms`` is the server's CPU per start."""
    counts: collections.Counter[str] = collections.Counter()
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        counts[_layer(stack.split(";"))] += int(n)
    total = sum(counts.values()) or 1
    return [(k, v / total, cpu_ms * v / total) for k, v in counts.most_common()]


async def _profile(n: int, folded_out: str | None) -> None:
    from bench.common import LIFTED_OCR_LIMIT, CpuMeter, bench_store, spawn_fake_ocr, spawn_server
    from bench.rawclient import drive

    out = str(Path(tempfile.mkdtemp(prefix="flowpark-cpuprofile-")) / "stacks")
    env = {"FLOWPARK_BENCH_CPUPROFILE": out, **LIFTED_OCR_LIMIT}
    with (
        bench_store("postgres") as store,
        spawn_fake_ocr() as ocr,
        spawn_server(store.url, ocr.base_url, extra_env=env) as server,
    ):
        port = int(server.base_url.rsplit(":", 1)[1])
        await drive("127.0.0.1", port, 300, first=10 * n)  # warm-up
        os.kill(server.pid, signal.SIGUSR1)
        meter = CpuMeter(store, {"server": server.pid})
        meter.start()
        await drive("127.0.0.1", port, n)
        used = meter.stop()
        os.kill(server.pid, signal.SIGUSR2)
        for _ in range(100):
            if Path(out + ".gc").exists():
                break
            await asyncio.sleep(0.05)
    cpu_ms = used["server"] * 1000 / n
    folded = Path(out).read_text()
    collector = json.loads(Path(out + ".gc").read_text())
    if folded_out:
        Path(folded_out).write_text(folded)
    shutil.rmtree(Path(out).parent, ignore_errors=True)
    print(f"server CPU {cpu_ms:.2f} ms per start (n = {n}, load {os.getloadavg()[0]:.1f})")
    print("| layer | share | ms per start |\n|---|---|---|")
    for layer, share, ms in layer_table(folded, cpu_ms):
        print(f"| {layer} | {share * 100:.1f} % | {ms:.2f} |")
    gc_ms = collector["seconds"] * 1000 / n
    print(
        f"garbage collector (inside the layers above): {gc_ms:.3f} ms per start, "
        f"{collector['runs']} collections"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--folded", default=None, help="also keep the folded stacks here")
    args = parser.parse_args()
    run = name_of("flowpark.runtime.loop", "run")

    run(_profile(args.n, args.folded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
