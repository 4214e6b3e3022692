"""``list``: the operator's list over N instances (default 1,000,000): first-page answer time
per filter, and the query plan each filter's first page uses.

PostgreSQL only. The rows are inserted in bulk with SQL (``generate_series``, 100,000 per
statement), not through the engine: six flows (two versions of the first),
created over the last 30 days; 60 % suspended (poll 85 %, retry 5 %, signal 8 %,
deadline 2 %; wakes within an hour either side of now, so some are overdue), 25 %
completed, 8 % failed (five error codes), 6.9 % cancelled, 0.1 % running (instances in
flight: 1,000 of a million is ~30 nodes with every run slot busy; a seventh of them with an
expired lease: stuck, a filter that reads every running row, since the lease expiry is
not indexed so that a renewal stays a HOT update); 30 % carry an instance key. Then ``ANALYZE``.

The server (its own process, no sweep) answers ``GET /api/v1/instances?<filter>&limit=50``
``--repeat`` times per filter (default 50) to one client, one request at a time. Figures:
``<filter>_p50_ms`` and ``<filter>_p99_ms`` (wall time at the client). Target: every
first page under 50 ms p99 on PostgreSQL. Each filter's plan (``EXPLAIN ANALYZE`` of the
page's statement as the store builds it) is printed on stderr first;
``<filter>_store_p99_ms`` is the same page read through the store in-process (no HTTP).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.dialects import postgresql

from bench.common import API_TOKEN, BenchStore, Result, err_console, percentiles, spawn_server
from bench.compat import name_of

InstanceFilter = name_of("flowpark.engine.ports.operator", "InstanceFilter")
sync_url = name_of("flowpark.store.db", "sync_url")
SqlOperatorReads = name_of("flowpark.store.listing", "SqlOperatorReads")

__all__ = ["FILTERS", "run"]

TARGET_MS = 50.0

#: filter name -> query parameters of GET /api/v1/instances
FILTERS: dict[str, dict[str, Any]] = {
    "none": {},
    "flow": {"flow": "flow.c"},
    "flow_version": {"flow": "document.process", "version": "2.0.0"},
    "state": {"state": "failed"},
    "states": {"state": ["running", "cancelled"]},
    "overdue": {"overdue": 600},
    "stuck": {"stuck": "true"},
    "error_code": {"errorCode": "provider.rejected"},
    "waiting_poll": {"waiting": "poll"},
    "waiting_deadline": {"waiting": "deadline"},
    "instance_key": {"instanceKey": "key-123451"},
    "created_before": {"createdBefore": "CREATED_BEFORE"},
}

_PG_INSERT = """
INSERT INTO flow_instance (id, flow_name, flow_version, state, input, created_at,
    updated_at, wake_at, wake_step_id, wake_scope, wake_kind, lease_owner,
    lease_expires_at, fencing_token, cancel_requested, error_code, error_message,
    instance_key)
SELECT gen_random_uuid(),
    CASE WHEN g.f < 70 THEN 'document.process'
        ELSE 'flow.' || chr(CAST(97 + g.f % 5 AS int)) END,
    CASE WHEN g.f < 70 AND g.i % 3 = 0 THEN '2.0.0' ELSE '1.0.0' END,
    g.state, '{}'::json,
    g.created, g.created,
    CASE WHEN g.state = 'suspended'
        THEN CAST(:now AS timestamptz)
            + make_interval(secs => CAST((g.i % 7200) - 3600 AS float8)) END,
    CASE WHEN g.state = 'suspended' THEN 1 END,
    CASE WHEN g.state = 'suspended' THEN g.i % 20 END,
    CASE WHEN g.state <> 'suspended' THEN NULL
        WHEN g.k < 85 THEN 'poll' WHEN g.k < 90 THEN 'retry'
        WHEN g.k < 98 THEN 'signal' ELSE 'deadline' END,
    CASE WHEN g.state = 'running' THEN 'node-' || (g.i % 4) END,
    CASE WHEN g.state = 'running' AND g.i % 7 = 0
            THEN CAST(:now AS timestamptz) - interval '5 minutes'
         WHEN g.state = 'running' THEN CAST(:now AS timestamptz) + interval '1 day' END,
    1, false,
    CASE WHEN g.state = 'failed' THEN (ARRAY['flow.step_failed', 'provider.rejected',
            'flow.poll_not_satisfied', 'flow.deadline_exceeded',
            'document.not_read_in_time'])[1 + g.i % 5]
         WHEN g.state = 'cancelled' THEN 'flow.cancelled' END,
    CASE WHEN g.state IN ('failed', 'cancelled') THEN 'bench' END,
    CASE WHEN g.i % 10 < 3 THEN 'key-' || g.i END
FROM (
    SELECT i, (i * 7919) % 100 AS f, (i * 104729) % 100 AS k,
        CAST(:start AS timestamptz) + make_interval(secs => i * CAST(:step AS float8)) AS created,
        CASE WHEN (i * 31) % 1000 < 600 THEN 'suspended'
             WHEN (i * 31) % 1000 < 850 THEN 'completed'
             WHEN (i * 31) % 1000 < 930 THEN 'failed'
             WHEN (i * 31) % 1000 < 999 THEN 'cancelled'
             ELSE 'running' END AS state
    FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i
) AS g
"""


def _populate(store: BenchStore, n: int, now: datetime) -> float:
    if store.kind != "postgres":
        raise SystemExit("the list scenario bulk-inserts with PostgreSQL SQL: --store postgres")
    start = now - timedelta(days=30)
    step = timedelta(days=30).total_seconds() / n
    eng = create_engine(sync_url(store.url))
    t0 = time.perf_counter()
    try:
        chunk = 100_000
        for first in range(0, n, chunk):
            with eng.begin() as conn:
                conn.execute(
                    text(_PG_INSERT),
                    {
                        "now": now,
                        "start": start,
                        "step": step,
                        "first": first,
                        "last": min(n, first + chunk) - 1,
                    },
                )
            err_console.print(f"[dim]inserted {min(n, first + chunk):,}[/dim]")
        with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE flow_instance"))
    finally:
        eng.dispose()
    return time.perf_counter() - t0


def _where(params: dict[str, Any], now: datetime) -> InstanceFilter:
    state = params.get("state")
    states = tuple(state if isinstance(state, list) else [state] if state else [])
    before = params.get("createdBefore")
    return InstanceFilter(
        flow=params.get("flow"),
        version=params.get("version"),
        states=states,  # type: ignore[arg-type]
        overdue_seconds=params.get("overdue"),
        stuck=bool(params.get("stuck")),
        error_code=params.get("errorCode"),
        waiting=params.get("waiting"),
        instance_key=params.get("instanceKey"),
        created_before=datetime.fromisoformat(before) if before else None,
        now=now,
    )


def _plans(store: BenchStore, now: datetime, filters: dict[str, dict[str, Any]]) -> dict[str, str]:
    """EXPLAIN of each filter's first-page statement (as the store builds it)."""
    from sqlalchemy import select

    _SUMMARY = name_of("flowpark.store.listing", "_SUMMARY")
    filter_clauses = name_of("flowpark.store.listing", "filter_clauses")
    INSTANCE = name_of("flowpark.store.mapping", "INSTANCE")

    assert SqlOperatorReads  # the statement below is list_instances' first page
    eng = create_engine(sync_url(store.url))
    plans: dict[str, str] = {}
    try:
        with eng.connect() as conn:
            for name, params in filters.items():
                query = (
                    select(*_SUMMARY)
                    .where(*filter_clauses(_where(params, now)))
                    .order_by(INSTANCE.c.created_at.desc(), INSTANCE.c.id.desc())
                    .limit(51)
                )
                compiled = query.compile(
                    dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
                )
                rows = conn.execute(text(f"EXPLAIN (ANALYZE, COSTS OFF) {compiled}")).all()
                plans[name] = "\n".join(r[0] for r in rows)
    finally:
        eng.dispose()
    return plans


async def _measure_store(
    store: BenchStore, now: datetime, filters: dict[str, dict[str, Any]], repeat: int
) -> dict[str, list[float]]:
    """The same first pages through the store's read model in this process (no HTTP)."""
    SqlStore = name_of("flowpark.store", "SqlStore")
    make_async_engine = name_of("flowpark.store", "make_async_engine")

    db = make_async_engine(store.url)
    reads = SqlStore(db).reads
    timings: dict[str, list[float]] = {}
    try:
        for params in filters.values():  # warm-up
            await reads.list_instances(_where(params, now), limit=50)
        for _ in range(repeat):
            for name, params in filters.items():
                t0 = time.perf_counter()
                await reads.list_instances(_where(params, now), limit=50)
                timings.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
    finally:
        await db.dispose()
    return timings


def _measure(base_url: str, filters: dict[str, dict[str, Any]], repeat: int) -> dict[str, Any]:
    timings: dict[str, list[float]] = {}
    rows: dict[str, int] = {}
    with httpx.Client(
        base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {API_TOKEN}"}
    ) as client:
        for params in filters.values():  # warm-up: pools open, caches primed
            client.get("/api/v1/instances", params={**params, "limit": 50}).raise_for_status()
        for _ in range(repeat):
            for name, params in filters.items():
                t0 = time.perf_counter()
                resp = client.get("/api/v1/instances", params={**params, "limit": 50})
                elapsed = (time.perf_counter() - t0) * 1000
                if resp.status_code != 200:
                    raise RuntimeError(f"{name}: {resp.status_code} {resp.text[:200]}")
                timings.setdefault(name, []).append(elapsed)
                rows[name] = len(resp.json()["instances"])
    return {"timings": timings, "rows": rows}


async def run(store: BenchStore, n: int, *, repeat: int = 50, **_: Any) -> Result:
    now = datetime.now(UTC).replace(microsecond=0)
    setup = _populate(store, n, now)
    filters = {
        name: {
            k: ((now - timedelta(days=15)).isoformat() if v == "CREATED_BEFORE" else v)
            for k, v in params.items()
        }
        for name, params in FILTERS.items()
    }
    plans = _plans(store, now, filters)
    with spawn_server(store.url, "http://127.0.0.1:9") as server:
        measured = _measure(server.base_url, filters, repeat)
    in_store = await _measure_store(store, now, filters, repeat)
    figures: dict[str, Any] = {}
    targets: dict[str, tuple[str, bool]] = {}
    for name, values in measured["timings"].items():
        points = percentiles(values)
        store_points = percentiles(in_store[name])
        figures[f"{name}_p50_ms"] = round(points["p50"], 1)
        figures[f"{name}_p99_ms"] = round(points["p99"], 1)
        figures[f"{name}_store_p99_ms"] = round(store_points["p99"], 2)
        targets[f"{name}_p99_ms"] = (f"< {TARGET_MS:g} ms", points["p99"] < TARGET_MS)
    for name, plan in plans.items():
        err_console.print(f"[bold]{name}[/bold]\n{plan}", markup=True, highlight=False)
    return Result(
        scenario="list",
        store=store.kind,
        n=n,
        figures=figures,
        params={"repeat": repeat, "limit": 50, "run": uuid.uuid4().hex[:6]},
        targets=targets,
        details={
            "setup_s": round(setup, 1),
            "rows_on_first_page": measured["rows"],
            "client": "one httpx client, one request at a time, server in its own process "
            "(uvicorn, no sweep)",
        },
    )
