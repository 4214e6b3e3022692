"""``providers``: N ``document.process`` instances whose polls fall due within the same second,
against the fake OCR (its own process, counting the calls it sees per 100 ms), moved by 3
sweeping nodes on PostgreSQL (1 on SQLite). Three runs, each on fresh documents:

* ``limited``: the provider's limit set to ``--rate`` calls/s (50 by default; burst 2);
* ``pushback``: the same, the provider answering 429 with ``Retry-After: 5`` for 30 s from
  a third of the way in (10 s with ``--quick``);
* ``unlimited``: the limit off (a million calls/s), for comparison: the herd.

Setup (untimed, per run): one node without a sweeper starts N documents over HTTP with the
limit off (each uploads and runs poll attempt 0 against a fake OCR that answers ``pending``
to a job's first status read and ``completed`` after), and stops; every parked instance's
``wake_at`` is moved an hour on, the sweeping nodes start, the limit is set over the API
(``PUT /api/v1/providers/ocr/limit``), the provider's counts are cleared, and every
``wake_at`` is moved to one instant two seconds ahead. Each document then makes 2 calls
(attempt 1 reads ``completed``, ``document.extract`` reads it again).

Figures per run: ``limit_per_s``; ``peak_per_s`` (the most calls the provider saw in any
1 s window); ``mean_per_s_backlog`` (calls per second from the first call once due to the
last call); ``failed`` (documents not completed); ``calls_during_pushback``; ``recovered_s``
(from the pushback's end until the provider's effective rate, sampled from
``GET /api/v1/providers/ocr`` every half second, was back at the limit; null when it never
was); ``recovered_calls_s`` (from the pushback's end to the end of the first 1 s window of
calls at >= 90 % of the limit; null when the backlog drained first,
``drained_after_pushback_s`` then says when it did);
``extra_statements_per_call`` (PostgreSQL: statements that wrote the provider's
``flow_provider`` row, grants and pushbacks, per call the provider served).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import create_engine, func, select, update

from bench.common import (
    BenchStore,
    Result,
    api_client,
    err_console,
    run_concurrently,
    spawn_fake_ocr,
    spawn_server,
)
from bench.flows import document_input
from flowpark.store.db import sync_url
from flowpark.store.tables import FlowInstanceRow

__all__ = ["run"]

INSTANCE = FlowInstanceRow.__table__  # type: ignore[attr-defined]
UNLIMITED = 1_000_000
LEAD_S = 2.0
BUCKET_S = 0.1


def _sync(store: BenchStore) -> Any:
    return create_engine(sync_url(store.url))


def _move_wakes(store: BenchStore, when: datetime) -> int:
    db = _sync(store)
    try:
        with db.begin() as conn:
            done = conn.execute(
                update(INSTANCE).where(INSTANCE.c.state == "suspended").values(wake_at=when)
            )
            return int(done.rowcount)
    finally:
        db.dispose()


def _states(store: BenchStore, since: datetime) -> dict[str, int]:
    """Instances created from ``since`` on (one run's), by state."""
    db = _sync(store)
    try:
        with db.connect() as conn:
            rows = conn.execute(
                select(INSTANCE.c.state, func.count())
                .where(INSTANCE.c.created_at >= since)
                .group_by(INSTANCE.c.state)
            ).all()
            return {str(state): int(n) for state, n in rows}
    finally:
        db.dispose()


def _provider_writes(store: BenchStore) -> int | None:
    """Statements so far that wrote the providers' limits: each grant and each pushback
    updates its provider's ``flow_provider`` row once (a grant's tally of the minute rides
    in the same statement), so PostgreSQL's count of updated rows counts them."""
    if store.kind != "postgres":
        return None
    db = _sync(store)
    try:
        with db.connect() as conn:
            conn.exec_driver_sql("SELECT pg_stat_clear_snapshot()")
            row = conn.exec_driver_sql(
                "SELECT coalesce(sum(n_tup_upd), 0) FROM pg_stat_user_tables "
                "WHERE relname = 'flow_provider'"
            ).scalar_one()
            return int(row)
    finally:
        db.dispose()


async def _set_limit(base_url: str, rate: float, burst: int) -> None:
    """The operator's change of the ``ocr`` limit (none yet before its first call: 404)."""
    async with api_client(base_url) as client:
        resp = await client.put(
            "/api/v1/providers/ocr/limit", json={"ratePerSecond": rate, "burst": burst}
        )
        if resp.status_code != 404:
            resp.raise_for_status()


async def _effective_rate(base_url: str) -> tuple[float, float]:
    """(now, the ``ocr`` provider's effective rate as the API shows it)."""
    async with api_client(base_url) as client:
        resp = await client.get("/api/v1/providers/ocr")
        resp.raise_for_status()
        return time.time(), float(resp.json()["effectiveRate"])


def _recovered(
    rates: list[tuple[float, float]], limit: float, lowered_after: float, end: float
) -> float | None:
    """Seconds from ``end`` (the pushback's) until the effective rate, lowered after
    ``lowered_after``, was back at ``limit``; None when it never was."""
    lowered = [t for t, rate in rates if t >= lowered_after and rate < limit * 0.999]
    if not lowered:
        return None
    back = next((t for t, rate in rates if t > lowered[0] and rate >= limit * 0.999), None)
    return None if back is None else round(max(back - end, 0.0), 1)


async def _setup(store: BenchStore, ocr_url: str, n: int, run_id: str, concurrency: int) -> None:
    env = {
        "FLOWPARK_NODE_ID": f"bench-setup-{run_id}",
        "FLOWPARK_PROVIDER_LIMITS": json.dumps(
            {"ocr": {"rate_per_second": UNLIMITED, "burst": UNLIMITED}}
        ),
    }
    with spawn_server(store.url, ocr_url, sweeper=False, extra_env=env) as node:
        await _set_limit(node.base_url, UNLIMITED, UNLIMITED)  # a previous run's limit
        async with api_client(node.base_url, concurrency) as client:

            async def start(i: int) -> None:
                resp = await client.post(
                    "/api/v1/documents",
                    json=document_input(i, run_id),
                    headers={"Idempotency-Key": f"{run_id}-{i}"},
                )
                resp.raise_for_status()

            await run_concurrently(n, concurrency, start, label=f"setup {run_id}: start")
    _move_wakes(store, datetime.now(UTC) + timedelta(hours=1))


def _windows(buckets: dict[int, tuple[int, int]], first: int, last: int) -> list[tuple[int, int]]:
    """(start bucket, calls in the 10 buckets from it) for every start in [first, last]."""
    out = []
    for start in range(first, last + 1):
        out.append((start, sum(sum(buckets.get(b, (0, 0))) for b in range(start, start + 10))))
    return out


async def _one(
    store: BenchStore,
    ocr_url: str,
    n: int,
    *,
    label: str,
    limit: float | None,
    pushback: tuple[float, float] | None,
    nodes: int,
    concurrency: int,
    timeout_s: float,
) -> dict[str, Any]:
    run_id = f"{label[:2]}{uuid.uuid4().hex[:5]}"
    since = datetime.now(UTC) - timedelta(seconds=1)
    await _setup(store, ocr_url, n, run_id, concurrency)
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                spawn_server(
                    store.url,
                    ocr_url,
                    sweeper=True,
                    scan_interval=1.0,
                    extra_env={"FLOWPARK_NODE_ID": f"bench-{run_id}-{k}"},
                )
            )
            for k in range(nodes)
        ]
        rate = limit if limit is not None else UNLIMITED
        await _set_limit(servers[0].base_url, rate, 2 if limit is not None else UNLIMITED)
        async with httpx.AsyncClient(base_url=ocr_url, timeout=30) as fake:
            (await fake.delete("/fake/ocr/admin/load")).raise_for_status()
            writes_before = _provider_writes(store)
            due = time.time() + LEAD_S
            _move_wakes(store, datetime.fromtimestamp(due, UTC))
            pushed: tuple[float, float] | None = None
            deadline = due + timeout_s
            rates: list[tuple[float, float]] = []  # (instant, the provider's effective rate)
            while True:
                if pushback is not None:
                    rates.append(await _effective_rate(servers[0].base_url))
                now = time.time()
                if pushback is not None and pushed is None and now >= due + pushback[0]:
                    body = {"status": 429, "retryAfterSeconds": 5, "durationSeconds": pushback[1]}
                    (await fake.post("/fake/ocr/admin/pushback", json=body)).raise_for_status()
                    pushed = (now, now + pushback[1])
                states = _states(store, since)
                ended = sum(v for k, v in states.items() if k in ("completed", "failed"))
                if ended >= n or now > deadline:
                    break
                await asyncio.sleep(0.5)
            load = (await fake.get("/fake/ocr/admin/load")).json()
            # the backlog may drain before the shared limit recovered: the API shows the
            # effective rate recovered by its now, so it is followed on (at most 90 s)
            while pushed is not None and time.time() < pushed[1] + 90:
                if _recovered(rates, limit or 0.0, pushed[0], pushed[1]) is not None:
                    break
                await asyncio.sleep(0.5)
                rates.append(await _effective_rate(servers[0].base_url))
        writes_after = _provider_writes(store)
    states = _states(store, since)
    buckets = {b["startMs"] // 100: (int(b["served"]), int(b["refused"])) for b in load["buckets"]}
    served = sum(s for s, _ in buckets.values())
    first_due = int(due * 10)
    last = max(buckets, default=first_due)
    windows = _windows(buckets, min(buckets, default=first_due), last)
    # the backlog: from the first call once due (the next sweep) to the last call
    begun = min((b for b in buckets if b >= first_due), default=first_due)
    span = max((last + 1 - begun) * BUCKET_S, BUCKET_S)
    figures: dict[str, Any] = {
        "limit_per_s": limit,
        "peak_per_s": max((calls for _, calls in windows), default=0),
        "mean_per_s_backlog": round(served / span, 1),
        "failed": n - states.get("completed", 0),
        "calls": served + sum(r for _, r in buckets.values()),
        # a call before the due instant would be a wake before its wake_at
        "calls_before_due": sum(sum(v) for b, v in buckets.items() if b < first_due),
        "backlog_s": round(span, 1),
        "calls_during_pushback": None,
        "recovered_s": None,
        "extra_statements_per_call": None,
    }
    if pushed is not None:
        start_b, end_b = int(pushed[0] * 10), int(pushed[1] * 10)
        figures["calls_during_pushback"] = sum(
            sum(buckets.get(b, (0, 0))) for b in range(start_b, end_b)
        )
        target = 0.9 * (limit or 0)
        after = [
            (s, sum(buckets.get(b, (0, 0))[0] for b in range(s, s + 10)))
            for s in range(end_b, last + 1)
        ]
        # the observed calls: the end of the first 1 s window at >= 90 % of the limit (only
        # while a backlog remains: null when it drained first)
        back = next((s + 10 for s, calls in after if calls >= target), None)
        observed = None if back is None else round((back - end_b) * BUCKET_S, 1)
        figures["recovered_calls_s"] = observed
        # the shared limit: when the effective rate was back at the limit
        figures["recovered_s"] = _recovered(rates, limit or 0.0, pushed[0], pushed[1])
        # when the rate never got back to the limit: how long the backlog lasted after it
        figures["drained_after_pushback_s"] = round(max(last + 1 - end_b, 0) * BUCKET_S, 1)
        figures["effective_rate_per_s"] = [
            (round(t - due, 1), round(rate, 1)) for t, rate in rates[::2]
        ]
    if writes_before is not None and writes_after is not None and served:
        figures["extra_statements_per_call"] = round((writes_after - writes_before) / served, 4)
    err_console.print(f"{label}: {figures}")
    # calls the provider saw in each whole second from the first call once due (details)
    figures.setdefault("effective_rate_per_s", None)
    figures["calls_per_s"] = [
        sum(sum(buckets.get(b, (0, 0))) for b in range(start, start + 10))
        for start in range(begun, last + 1, 10)
    ]
    return figures


async def run(
    store: BenchStore,
    n: int,
    *,
    quick: bool = False,
    rate: float | None = None,
    concurrency: int = 32,
    **_: Any,
) -> Result:
    n = min(n, 200) if quick else n
    limit = rate or 50.0
    nodes = 3 if store.kind == "postgres" else 1
    expected = 2 * n / limit
    timeout_s = expected * 3 + 120
    with spawn_fake_ocr(pending_reads=1) as ocr:
        common: dict[str, Any] = {"nodes": nodes, "concurrency": concurrency}
        common["timeout_s"] = timeout_s
        runs = {
            "limited": await _one(
                store, ocr.base_url, n, label="limited", limit=limit, pushback=None, **common
            )
        }
        window = (max(2.0, expected / 3), 10.0 if quick else 30.0)
        runs["pushback"] = await _one(
            store, ocr.base_url, n, label="pushback", limit=limit, pushback=window, **common
        )
        runs["unlimited"] = await _one(
            store, ocr.base_url, n, label="unlimited", limit=None, pushback=None, **common
        )
    a = runs["limited"]
    targets = {
        "limited_calls_before_due": ("0", a["calls_before_due"] == 0),
        "limited_peak_per_s": (f"<= {1.1 * limit:g}", a["peak_per_s"] <= 1.1 * limit),
        "limited_mean_per_s_backlog": (
            f">= {0.9 * limit:g}",
            a["mean_per_s_backlog"] >= 0.9 * limit,
        ),
        "limited_failed": ("0", a["failed"] == 0),
    }
    b = runs.get("pushback")
    if b is not None:
        targets["pushback_failed"] = ("0", b["failed"] == 0)
        # the instances, plus one probe per Retry-After interval (5 s) per node
        bound = n + nodes * -(-int(window[1]) // 5)
        targets["pushback_calls_during_pushback"] = (
            f"<= {bound}",
            b["calls_during_pushback"] is not None and b["calls_during_pushback"] <= bound,
        )
        recovered = b["recovered_s"]
        targets["pushback_recovered_s"] = ("<= 60", recovered is not None and recovered <= 60)
    flat = {
        f"{name}_{key}": value
        for name, fig in runs.items()
        for key, value in fig.items()
        if key not in ("calls_per_s", "effective_rate_per_s")
    }
    return Result(
        "providers",
        store.kind,
        n,
        flat,
        {"nodes": nodes, "limit_per_s": limit, "burst": 2, "quick": quick, "polls_due": 2},
        targets=targets,
        details={"runs": runs},
    )
