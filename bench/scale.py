"""``scale``: what N parked ``document.process`` instances (default 1,000,000) cost, and how
the engine claims, wakes and starts among them. PostgreSQL only.

Phases (each timed, in ``details.phases_s``; progress on stderr):

1. **Load.** A few instances are parked through the engine (:mod:`bench.scaleload`) and
   cloned with SQL into N parked instances of exactly their shape (100,000 per statement),
   created over the 50 minutes before, due 1 to 3 hours after; the journal's key index is
   rebuilt at the leaf density the engine's concurrent starts leave; then ``ANALYZE``.
   Figures:
   ``bytes_per_parked`` (``pg_relation_size`` of every table, TOAST table and index of the
   schema / N; ``details.bytes_by_relation`` per relation).
2. **Claims.** The K = min(N/4, 60,000) instances due first are moved into the past, then
   ``--nodes`` flowpark servers (``create_app`` under uvicorn, each its own process, the
   production sweeper at ``--scan-interval``, default the server's 10 s; the sample's OCR
   limit lifted, as every engine figure does) claim them. Each claim runs the instance to
   its end: the fake OCR (its own process) answers a cloned job ``completed``, so attempt 1
   is followed by the extraction, the event and the completion. ``claims_per_s``: claims
   counted from the first 2 % of K until K or ``--claim-seconds`` (default 25 s) later.
   Instances not claimed by then are parked again (later), and the nodes stopped.
3. **Wakes.** The next instances in due order are given ``wake_at`` instants spread so
   that ``due_per_s`` (``--rate``; default half of ``claims_per_s``) fall due per second
   over ``--duration`` seconds (default 300), from a few seconds after the nodes are
   spawned again (twice phase 2's spawn time plus 2 s, at least 4 s: their first sweep
   reads the first of those instants). Wake lag = the first journal row the claimed run
   wrote (its ``started_at``, the engine's clock: real UTC) - the ``wake_at`` the bench
   set; ``wake_lag_p50_ms``, ``wake_lag_p99_ms``, ``wake_lag_max_ms`` over the instances
   due in the window (``wakes_unclaimed``: not claimed at all by the end of the drain).
4. **Starts, meanwhile.** ``--concurrency`` callers (32) ``POST /api/v1/documents`` to the
   nodes over the same window, paced at ``--start-rate`` (default a tenth of
   ``due_per_s``); each answers 202 once the new instance uploaded, ran attempt 0 and
   parked. ``start_p50_ms``, ``start_p99_ms``, ``start_max_ms``. The fake OCR reads a
   started job ``completed`` on its second read, so each start adds one wake 2.5-5 s
   later.
5. **Dead tuples and growth.** ``pg_stat_user_tables`` and sizes of the flowpark tables
   before the window and after its drain, with the nodes stopped (their statistics
   flushed): ``dead_tuples``, ``live_tuples``, ``autovacuum_runs``, ``autoanalyze_runs``,
   ``growth_bytes``; per table in ``details.tables``. ``autovacuum`` is the server's
   setting (``SHOW autovacuum``); the scenario leaves no storage option on any table or
   index (``details.relation_options`` lists any found at the end).

The hardware is the JSON's ``machine``. ``--quick``: at most 20,000 parked and a 30 s
window, a check that it works, not a figure.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import AsyncExitStack, ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from bench.common import (
    BenchStore,
    CpuMeter,
    Result,
    Server,
    api_client,
    err_console,
    machine,
    percentiles,
    progress,
    spawn_fake_ocr,
    spawn_server,
    sql,
)
from bench.compat import name_of
from bench.figures import relation_sizes
from bench.flows import document_input
from bench.scaleload import WAKE_FROM, WAKE_SPAN, Template, check_shape, clone, park_templates
from bench.scalestats import (
    autovacuum,
    print_relations,
    print_tables,
    relation_options,
    table_stats,
    tables_detail,
)

make_async_engine = name_of("flowpark.store", "make_async_engine")

__all__ = ["run"]

#: the most instances phase 2 makes due at once
CLAIM_SLICE_MAX = 60_000
#: phase 2's instances are due in 2000 (before this marker), in their due order
PAST = datetime(2000, 1, 1, tzinfo=UTC)
MARKER = datetime(2001, 1, 1, tzinfo=UTC)
#: seconds at least from moving the wakes of phase 3 to its first one (the nodes start
#: meanwhile: the lead is also twice the time phase 2's nodes took to answer, plus 2 s)
LEAD_S = 4.0
#: at most this many parked with ``--quick`` (``python -m bench`` reads it too)
QUICK_N = 20_000
QUICK_DURATION = 30.0
UNLIMITED = 1_000_000.0


def _phase(name: str, seconds: float, phases: dict[str, float]) -> None:
    phases[name] = round(seconds, 1)
    err_console.print(f"[bold]{name}[/bold]: {seconds:,.1f} s")


@contextmanager
def _nodes(
    store: BenchStore, ocr_url: str, count: int, scan_interval: float, concurrency: int | None
) -> Iterator[list[Server]]:
    env = {
        "FLOWPARK_PROVIDER_LIMITS": json.dumps(
            {"ocr": {"rate_per_second": UNLIMITED, "burst": UNLIMITED}}
        )
    }
    if concurrency:
        env["FLOWPARK_CONCURRENCY"] = str(concurrency)
    with ExitStack() as stack:
        yield [
            stack.enter_context(
                spawn_server(
                    store.url,
                    ocr_url,
                    sweeper=True,
                    scan_interval=scan_interval,
                    extra_env={**env, "FLOWPARK_NODE_ID": f"bench-scale-{k}"},
                )
            )
            for k in range(count)
        ]


async def _scalar(db: Any, statement: str, **params: Any) -> Any:
    async with db.connect() as conn:
        return (await conn.execute(text(statement), params)).scalar_one()


async def _until_idle(db: Any, *, before: datetime, timeout: float) -> bool:
    """Wait until no instance runs and none is due before ``before`` (True), or ``timeout``."""
    end = time.perf_counter() + timeout
    while time.perf_counter() < end:
        busy = await _scalar(
            db,
            "SELECT (SELECT count(*) FROM flow_instance WHERE state = 'running') + "
            "(SELECT count(*) FROM flow_instance WHERE state = 'suspended' AND wake_at < :b)",
            b=before,
        )
        if not busy:
            return True
        await asyncio.sleep(0.25)
    return False


# -- phase 2: claims ---------------------------------------------------------------------
async def _claims(
    store: BenchStore,
    ocr: Server,
    parked: int,
    *,
    nodes: int,
    scan_interval: float,
    engine_concurrency: int | None,
    claim_seconds: float,
    park_until: datetime,
) -> dict[str, Any]:
    k = min(parked // 4, CLAIM_SLICE_MAX)
    sql(
        store,
        "WITH pick AS (SELECT id, row_number() OVER (ORDER BY wake_at, id) AS r "
        "FROM flow_instance WHERE state = 'suspended' ORDER BY wake_at, id LIMIT :k) "
        "UPDATE flow_instance f SET wake_at = CAST(:past AS timestamptz) "
        "+ make_interval(secs => pick.r / 1000.0) FROM pick WHERE f.id = pick.id",
        {"k": k, "past": PAST},
    )
    db = make_async_engine(store.url, pool_size=2)
    samples: list[tuple[float, int]] = []
    try:
        spawn0 = time.perf_counter()
        with _nodes(store, ocr.base_url, nodes, scan_interval, engine_concurrency) as servers:
            spawn_s = time.perf_counter() - spawn0
            meter = CpuMeter(
                store, {"fake_ocr": ocr.pid, **{f"node{i}": s.pid for i, s in enumerate(servers)}}
            )
            begin: tuple[float, int] | None = None
            with progress() as bar:
                task = bar.add_task(f"claims of {k:,} due", total=k)
                deadline = time.perf_counter() + claim_seconds + 120
                while time.perf_counter() < deadline:
                    left = await _scalar(
                        db,
                        "SELECT count(*) FROM flow_instance "
                        "WHERE state = 'suspended' AND wake_at < :m",
                        m=MARKER,
                    )
                    now, claimed = time.perf_counter(), k - int(left)
                    samples.append((now, claimed))
                    bar.update(task, completed=claimed)
                    if begin is None and claimed >= max(1, k // 50):
                        begin = (now, claimed)
                        meter.start()
                    if begin is not None and (claimed >= k or now - begin[0] >= claim_seconds):
                        break
                    await asyncio.sleep(0.25)
            if begin is None:
                raise RuntimeError(f"no claims within {claim_seconds + 120:.0f} s: {samples[-3:]}")
            end = samples[-1]
            cpu = meter.stop()
            # the rest waits for later, with the population; the runs in flight finish
            sql(
                store,
                "UPDATE flow_instance SET wake_at = CAST(:until AS timestamptz) "
                "+ (wake_at - CAST(:past AS timestamptz)) "
                "WHERE state = 'suspended' AND wake_at < :m",
                {"until": park_until, "past": PAST, "m": MARKER},
            )
            if not await _until_idle(db, before=MARKER, timeout=120):
                raise RuntimeError("the claimed instances did not finish within 120 s")
    finally:
        await db.dispose()
    claims = end[1] - begin[1]
    seconds = end[0] - begin[0]
    return {
        "k": k,
        "claims": claims,
        "seconds": seconds,
        "claims_per_s": claims / seconds if seconds > 0 else float("nan"),
        "claimed_in_all": end[1],
        "spawn_s": round(spawn_s, 2),
        "cpu_busy": {n: round(v / meter.wall, 3) for n, v in cpu.items()},
        "cpu_ms_per_claim": {n: round(v * 1000 / claims, 2) for n, v in cpu.items()}
        if claims
        else {},
    }


# -- phase 3 and 4: wakes and starts -------------------------------------------------------
def _set_wakes(
    store: BenchStore, count: int, due_per_s: float, t0: datetime, below: datetime
) -> int:
    sql(store, "CREATE SCHEMA IF NOT EXISTS bench_scale")
    sql(store, "DROP TABLE IF EXISTS bench_scale.due")
    sql(store, "CREATE TABLE bench_scale.due (id uuid PRIMARY KEY, wake_at timestamptz NOT NULL)")
    return int(
        sql(
            store,
            "WITH pick AS (SELECT id, row_number() OVER (ORDER BY wake_at, id) - 1 AS r "
            "FROM flow_instance WHERE state = 'suspended' AND wake_at < :below "
            "ORDER BY wake_at, id LIMIT :m), "
            "moved AS (UPDATE flow_instance f SET wake_at = CAST(:t0 AS timestamptz) "
            "+ make_interval(secs => pick.r / CAST(:rate AS float8)) FROM pick "
            "WHERE f.id = pick.id RETURNING f.id, f.wake_at) "
            "INSERT INTO bench_scale.due SELECT id, wake_at FROM moved",
            {"m": count, "t0": t0, "rate": due_per_s, "below": below},
        )
    )


async def _starts(
    servers: list[Server], rate: float, seconds: float, began: float, concurrency: int
) -> dict[str, Any]:
    """``concurrency`` callers, the i-th start sent at ``began + i / rate`` (perf_counter),
    to the nodes in turn; each start's latency from its send to its answer."""
    run = uuid.uuid4().hex[:6]
    total = int(rate * seconds)
    counter = iter(range(total))
    latencies: list[float] = []
    errors: list[str] = []

    async def caller(client: httpx.AsyncClient) -> None:
        for i in counter:
            delay = began + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = time.perf_counter()
            resp = await client.post(
                "/api/v1/documents",
                json=document_input(i, run),
                headers={"Idempotency-Key": f"{run}-{i}"},
            )
            latencies.append(time.perf_counter() - t)
            if resp.status_code != 202:
                errors.append(f"{resp.status_code} {resp.text[:200]}")

    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(api_client(s.base_url, concurrency)) for s in servers
        ]
        await asyncio.gather(*(caller(clients[c % len(clients)]) for c in range(concurrency)))
    return {"latencies": latencies, "errors": errors, "sent": total}


async def _warm_up(servers: list[Server], count: int) -> None:
    """A few starts on each node before the window (pools opened, code paths warm)."""
    run = uuid.uuid4().hex[:6]
    for k, server in enumerate(servers):
        async with api_client(server.base_url) as client:
            for i in range(count):
                resp = await client.post(
                    "/api/v1/documents",
                    json=document_input(i, f"{run}{k}"),
                    headers={"Idempotency-Key": f"{run}-{k}-{i}"},
                )
                resp.raise_for_status()


async def _watch(
    db: Any, seconds: float, began: float, due: int, samples: list[tuple[float, int, int]]
) -> None:
    """Every second of the window: instances due and not claimed (the backlog), running."""
    with progress() as bar:
        task = bar.add_task("wake window (s)", total=round(seconds))
        while (elapsed := time.perf_counter() - began) < seconds:
            async with db.connect() as conn:
                row = (
                    await conn.execute(
                        text(
                            "SELECT (SELECT count(*) FROM flow_instance "
                            "WHERE state = 'suspended' AND wake_at <= now()), "
                            "(SELECT count(*) FROM flow_instance WHERE state = 'running')"
                        )
                    )
                ).one()
            samples.append((elapsed, int(row[0]), int(row[1])))
            bar.update(
                task,
                completed=min(round(elapsed), round(seconds)),
                description=f"wake window (s): {due:,} due, backlog {row[0]:,}, running {row[1]:,}",
            )
            await asyncio.sleep(1.0)


def _lags(store: BenchStore, loaded_sequence: int) -> tuple[list[float], int, list[float]]:
    """Each window instance's lag in ms (its first new journal row's ``started_at`` minus the
    ``wake_at`` set), how many have no new row (never claimed), and the p99 lag of each
    tenth of the window (by ``wake_at``)."""
    rows = sql(
        store,
        "SELECT ntile(10) OVER (ORDER BY d.wake_at), "
        "extract(epoch FROM (SELECT min(s.started_at) FROM flow_step s "
        "WHERE s.instance_id = d.id AND s.sequence > :seq) - d.wake_at) FROM bench_scale.due d",
        {"seq": loaded_sequence},
    )
    lags = [float(r[1]) * 1000 for r in rows if r[1] is not None]
    tenths = [
        percentiles([float(r[1]) * 1000 for r in rows if r[0] == k and r[1] is not None])["p99"]
        for k in range(1, 11)
    ]
    return lags, sum(1 for r in rows if r[1] is None), [round(t, 1) for t in tenths]


async def _window(
    store: BenchStore,
    ocr: Server,
    *,
    claims_per_s: float,
    due_per_s: float,
    start_rate: float,
    duration: float,
    nodes: int,
    scan_interval: float,
    engine_concurrency: int | None,
    concurrency: int,
    park_until: datetime,
    idle_before: datetime,
    lead_s: float,
    loaded_sequence: int,
    phases: dict[str, float],
) -> dict[str, Any]:
    count = int(due_per_s * duration)
    t0 = datetime.now(UTC) + timedelta(seconds=lead_s)
    due = _set_wakes(store, count, due_per_s, t0, park_until)
    stats_before = table_stats(store)
    db = make_async_engine(store.url, pool_size=2)
    samples: list[tuple[float, int, int]] = []
    try:
        w0 = time.perf_counter()
        with _nodes(store, ocr.base_url, nodes, scan_interval, engine_concurrency) as servers:
            await _warm_up(servers, 8)
            began = time.perf_counter() + (t0 - datetime.now(UTC)).total_seconds()
            late_s = time.perf_counter() - began
            if late_s > 0:
                err_console.print(
                    f"[yellow]the nodes were up {late_s:.1f} s after the first wake[/yellow]"
                )
            else:
                await asyncio.sleep(-late_s)
            _phase("nodes up, warm-up", time.perf_counter() - w0 + min(late_s, 0), phases)
            meter = CpuMeter(
                store, {"fake_ocr": ocr.pid, **{f"node{i}": s.pid for i, s in enumerate(servers)}}
            )
            meter.start()
            started, _ = await asyncio.gather(
                _starts(servers, start_rate, duration, began, concurrency),
                _watch(db, duration, began, due, samples),
            )
            cpu = meter.stop()
            d0 = time.perf_counter()
            drained = await _until_idle(db, before=idle_before, timeout=max(60.0, duration / 2))
            drain_s = time.perf_counter() - d0
    finally:
        await db.dispose()
    stats_after = table_stats(store)
    lags, unclaimed, by_tenth = _lags(store, loaded_sequence)
    return {
        "due": due,
        "lags": lags,
        "unclaimed": unclaimed,
        "lag_by_tenth": by_tenth,
        "starts": started,
        "drained": drained,
        "drain_s": drain_s,
        "late_s": max(late_s, 0.0),
        "backlog_max": max((b for _, b, _ in samples), default=0),
        "running_max": max((r for _, _, r in samples), default=0),
        "stats_before": stats_before,
        "stats_after": stats_after,
        "cpu_busy": {name: round(used / meter.wall, 3) for name, used in cpu.items()},
        "claims_per_s_measured": claims_per_s,
    }


# -- the scenario ------------------------------------------------------------------------
async def run(
    store: BenchStore,
    n: int,
    *,
    quick: bool = False,
    duration: float | None = None,
    rate: float | None = None,
    start_rate: float | None = None,
    nodes: int = 1,
    scan_interval: float | None = None,
    engine_concurrency: int | None = None,
    concurrency: int = 32,
    claim_seconds: float = 25.0,
    **_: Any,
) -> Result:
    if store.kind != "postgres":
        raise SystemExit("the scale scenario bulk-loads with PostgreSQL SQL: --store postgres")
    parked = min(n, QUICK_N) if quick else n
    duration = duration or (QUICK_DURATION if quick else 300.0)
    scan_interval = scan_interval or 10.0
    err_console.print(f"{parked:,} parked, a {duration:g} s window; machine: {machine(store)}")
    setting = autovacuum(store)
    if setting != "on":
        err_console.print(
            f"[yellow]the server's autovacuum is {setting}: the dead tuples below are "
            "what is left without it[/yellow]"
        )
    phases: dict[str, float] = {}
    total0 = time.perf_counter()
    now = datetime.now(UTC)
    park_until = now + WAKE_FROM + WAKE_SPAN  # after the population's last wake
    with spawn_fake_ocr(pending_reads=1, unknown_completed=True) as ocr:
        t = time.perf_counter()
        template: Template = await park_templates(store, ocr.base_url)
        _phase("templates (engine)", time.perf_counter() - t, phases)
        loaded = clone(store, template, parked, now)
        _phase("load (SQL)", loaded["load_s"], phases)
        _phase("reindex journal key", loaded["reindex_s"], phases)
        _phase("analyze", loaded["analyze_s"], phases)
        t = time.perf_counter()
        checked = check_shape(store, template)
        sizes = relation_sizes(store)
        _phase("shape check, sizes", time.perf_counter() - t, phases)
        print_relations(sizes, parked)
        t = time.perf_counter()
        claims = await _claims(
            store,
            ocr,
            parked,
            nodes=nodes,
            scan_interval=scan_interval,
            engine_concurrency=engine_concurrency,
            claim_seconds=claim_seconds,
            park_until=park_until,
        )
        _phase("claims", time.perf_counter() - t, phases)
        err_console.print(f"claims/s: {claims['claims_per_s']:,.1f}")
        due_per_s = rate or claims["claims_per_s"] / 2
        starts_per_s = start_rate or due_per_s / 10
        t = time.perf_counter()
        window = await _window(
            store,
            ocr,
            claims_per_s=claims["claims_per_s"],
            due_per_s=due_per_s,
            start_rate=starts_per_s,
            duration=duration,
            nodes=nodes,
            scan_interval=scan_interval,
            engine_concurrency=engine_concurrency,
            concurrency=concurrency,
            park_until=park_until,
            idle_before=now + WAKE_FROM,
            lead_s=max(LEAD_S, 2 * claims["spawn_s"] + 2),
            loaded_sequence=loaded["max_loaded_sequence"],
            phases=phases,
        )
        _phase("wake window, drain", time.perf_counter() - t, phases)
    failed = int(sql(store, "SELECT count(*) FROM flow_instance WHERE state = 'failed'")[0][0])
    _phase("total", time.perf_counter() - total0, phases)
    tables = tables_detail(window["stats_before"], window["stats_after"])
    print_tables(tables)
    lag = percentiles(window["lags"], (50, 99))
    start = percentiles([x * 1000 for x in window["starts"]["latencies"]], (50, 99))
    after, before = window["stats_after"], window["stats_before"]
    figures: dict[str, Any] = {
        "parked": parked,
        "bytes_per_parked": round(sum(sizes.values()) / parked, 1),
        "claims_per_s": round(claims["claims_per_s"], 1),
        "due_per_s": round(due_per_s, 1),
        "wake_lag_p50_ms": round(lag["p50"], 1),
        "wake_lag_p99_ms": round(lag["p99"], 1),
        "wake_lag_max_ms": round(lag["max"], 1),
        "wakes_measured": len(window["lags"]),
        "wakes_unclaimed": window["unclaimed"],
        "start_rate_per_s": round(starts_per_s, 1),
        "start_p50_ms": round(start["p50"], 1),
        "start_p99_ms": round(start["p99"], 1),
        "start_max_ms": round(start["max"], 1),
        "starts": len(window["starts"]["latencies"]),
        "start_errors": len(window["starts"]["errors"]),
        "dead_tuples": sum(t["n_dead_tup"] for t in after.values()),
        "dead_tuples_before": sum(t["n_dead_tup"] for t in before.values()),
        "live_tuples": sum(t["n_live_tup"] for t in after.values()),
        "autovacuum": setting,
        "autovacuum_runs": sum(t["autovacuums"] for t in tables.values()),
        "autoanalyze_runs": sum(t["autoanalyzes"] for t in tables.values()),
        "growth_bytes": sum(a["bytes"] for a in after.values())
        - sum(b["bytes"] for b in before.values()),
        "failed": failed,
    }
    details = {
        "phases_s": phases,
        "load_s_per_100k": round(loaded["load_s"] * 100_000 / max(parked, 1), 1),
        "relation_options": relation_options(store),
    }
    data = {
        "load_chunks_s": loaded["chunks"],
        "bytes_by_relation": {k: round(v / parked, 1) for k, v in sorted(sizes.items())},
        "tables": tables,
        "claims": {k: v for k, v in claims.items() if k != "claims_per_s"},
        "window": {
            "due": window["due"],
            "backlog_max": window["backlog_max"],
            "running_max": window["running_max"],
            "drained": window["drained"],
            "drain_s": round(window["drain_s"], 1),
            "nodes_late_s": round(window["late_s"], 1),
            "cpu_busy": window["cpu_busy"],
            "start_errors": window["starts"]["errors"][:5],
            "wake_lag_p99_ms_by_tenth": window["lag_by_tenth"],
        },
        "shape_rows_checked": checked,
        "template": {"instances": len(template.ids), "rows": template.rows},
    }
    return Result(
        "scale",
        store.kind,
        parked,
        figures,
        {
            "nodes": nodes,
            "scan_interval_s": scan_interval,
            "duration_s": duration,
            "callers": concurrency,
            "claim_seconds": claim_seconds,
            "engine_concurrency": engine_concurrency or 32,
            "quick": quick,
        },
        details=details,
        data=data,
    )
