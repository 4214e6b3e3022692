"""``sweep``: N ``document.process`` instances due at once, each needing K=3 polls of the
fake OCR (zero time per page: a job answers ``pending`` to its first K status reads, then
``completed``), moved by ``Engine.sweep()`` alone. Reports attempts per second.

Setup (untimed): N starts (each uploads and runs poll attempt 0, then parks). Then K rounds:
every parked instance's ``wake_at`` is moved to the past (one UPDATE, untimed), and one
``engine.sweep()`` claims them all in batches and advances each by one attempt (timed).
The last round's attempt sees ``completed`` and the instance runs to its end (extract,
emit, complete) inside the timed sweep.

Baseline, same run, same database, same driver and pool: 32 tasks each committing
single-row ``UPDATE`` transactions (one row per task) through SQLAlchemy/psycopg (or
aiosqlite) for ``BASELINE_SECONDS``. ``ratio = attempts_per_s / baseline_tps``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from sqlalchemy import text

from bench.common import (
    BenchStore,
    CpuMeter,
    Result,
    progress,
    run_concurrently,
    spawn_fake_ocr,
    sql,
)
from bench.compat import name_of
from bench.flows import document_input, node_engine

make_async_engine = name_of("flowpark.store", "make_async_engine")

__all__ = ["run", "baseline_tps"]

BASELINE_SECONDS = 5.0


async def baseline_tps(
    url: str, *, concurrency: int = 32, pool_size: int = 20, seconds: float = BASELINE_SECONDS
) -> float:
    """Single-row UPDATE commits per second, ``concurrency`` writers, one row each."""
    db = make_async_engine(url, pool_size=pool_size)
    lock = asyncio.Lock() if db.dialect.name == "sqlite" else None
    try:
        async with db.begin() as conn:
            await conn.execute(
                text("CREATE TABLE bench_baseline (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
            )
            for i in range(concurrency):
                await conn.execute(text("INSERT INTO bench_baseline VALUES (:i, 0)"), {"i": i})
        stmt = text("UPDATE bench_baseline SET n = n + 1 WHERE id = :i")
        count = 0
        stop = time.perf_counter() + seconds

        async def writer(i: int) -> None:
            nonlocal count
            while time.perf_counter() < stop:
                if lock is not None:  # the store queues SQLite writers the same way
                    async with lock, db.begin() as conn:
                        await conn.execute(stmt, {"i": i})
                else:
                    async with db.begin() as conn:
                        await conn.execute(stmt, {"i": i})
                count += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(writer(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - t0
        async with db.begin() as conn:
            await conn.execute(text("DROP TABLE bench_baseline"))
        return count / elapsed
    finally:
        await db.dispose()


async def run(
    store: BenchStore,
    n: int,
    *,
    polls: int = 3,
    concurrency: int = 32,
    engine_concurrency: int = 32,
    **_: Any,
) -> Result:
    run_id = uuid.uuid4().hex[:6]
    with spawn_fake_ocr(pending_reads=polls) as ocr:
        async with node_engine(
            store.url, ocr_url=ocr.base_url, concurrency=engine_concurrency
        ) as engine:
            plan = engine.catalog.latest("document.process")

            async def start(i: int) -> None:
                started = await engine.start(
                    plan, document_input(i, run_id), idempotency_key=f"{run_id}-{i}"
                )
                assert started.instance.state == "suspended"

            await run_concurrently(n, concurrency, start, label="setup: start")
            elapsed = 0.0
            attempts = 0
            meter = CpuMeter(store, {"fake_ocr": ocr.pid})
            cpu: dict[str, float] = {}
            rounds = []
            with progress() as bar:
                task = bar.add_task("sweep attempts", total=n * polls)
                for _round in range(polls):
                    moved = sql(
                        store,
                        "UPDATE flow_instance SET wake_at = :t WHERE state = 'suspended'",
                        {"t": engine.clock.now().replace(year=2000)},
                    )
                    done = bar.tasks[task].completed
                    meter.start()
                    t0 = time.perf_counter()
                    report = await engine.sweep()
                    took = time.perf_counter() - t0
                    for k, v in meter.stop().items():
                        cpu[k] = cpu.get(k, 0.0) + v
                    elapsed += took
                    attempts += report.advanced
                    rounds.append(
                        {
                            "due": moved,
                            "advanced": report.advanced,
                            "failed": report.failed_runs,
                            "seconds": round(took, 2),
                        }
                    )
                    bar.update(task, completed=done + moved)
    completed = sql(store, "SELECT count(*) FROM flow_instance WHERE state = 'completed'")[0][0]
    if completed != n:
        raise RuntimeError(f"expected {n} completed instances, found {completed}: {rounds}")
    base = await baseline_tps(store.url)
    per_s = attempts / elapsed
    ratio = per_s / base
    figures = {
        "attempts_per_s": round(per_s, 1),
        "baseline_tps": round(base, 1),
        "ratio": round(ratio, 3),
        "attempts": attempts,
        "sweep_seconds": round(elapsed, 2),
    }
    targets = {}
    if store.kind == "postgres":
        targets["ratio"] = (">= 0.30 of baseline (PostgreSQL)", ratio >= 0.30)
    return Result(
        "sweep",
        store.kind,
        n,
        figures,
        {
            "polls": polls,
            "sweep_batch": engine.config.sweep_batch,
            "engine_concurrency": engine.config.concurrency,
            "pool_size": 20,
            "baseline_writers": 32,
        },
        targets=targets,
        details={
            "rounds": rounds,
            "cpu_ms_per_attempt": {k: round(v * 1000 / attempts, 2) for k, v in cpu.items()},
        },
    )
