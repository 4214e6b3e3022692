"""``retention``: bytes per completed ``document.process`` before and after a purge.

Setup: the ``signal`` scenario's run (N documents started over HTTP, their OCR jobs
completed, each ended by its ``ocr.completed`` signal), so every instance is completed
with the rows a real one leaves: journal (with its deadline row), signal, outbox event.
Then the store's size is read (``bytes_per_document``), the retention purge deletes every
ended instance (:class:`flowpark.store.retention.SqlRetention`, batches of 500, cutoff in the
future), and the size is read again after a plain ``VACUUM`` (space reusable, files not
shrunk: ``bytes_per_document_after_purge``) and after ``VACUUM FULL`` (files rewritten:
``bytes_per_document_after_vacuum_full``). Also ``purge_s`` and ``instances_per_s``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, text

from bench import signal as signal_bench
from bench.common import BenchStore, Result, store_size_bytes
from bench.compat import name_of

make_async_engine = name_of("flowpark.store.db", "make_async_engine")
sync_url = name_of("flowpark.store.db", "sync_url")
SqlRetention = name_of("flowpark.store.retention", "SqlRetention")

__all__ = ["run"]


def _vacuum(store: BenchStore, full: bool) -> None:
    if store.kind != "postgres":
        eng = create_engine(sync_url(store.url))
        try:
            with eng.connect() as conn:
                conn.exec_driver_sql("VACUUM")
        finally:
            eng.dispose()
        return
    eng = create_engine(sync_url(store.url), isolation_level="AUTOCOMMIT")
    try:
        with eng.connect() as conn:
            conn.execute(text("VACUUM FULL" if full else "VACUUM"))
    finally:
        eng.dispose()


async def run(store: BenchStore, n: int, *, concurrency: int = 32, **_: Any) -> Result:
    await signal_bench.run(store, n, concurrency=concurrency)
    before = store_size_bytes(store)
    db = make_async_engine(store.url)
    try:
        t0 = time.perf_counter()
        deleted = await SqlRetention(db).purge(datetime.now(UTC) + timedelta(days=1), 500)
        purge_s = time.perf_counter() - t0
    finally:
        await db.dispose()
    assert deleted == n, (deleted, n)
    _vacuum(store, full=False)
    after = store_size_bytes(store)
    _vacuum(store, full=True)
    after_full = store_size_bytes(store)
    figures = {
        "bytes_per_document": round(sum(before.values()) / n, 1),
        "bytes_per_document_after_purge": round(sum(after.values()) / n, 1),
        "bytes_per_document_after_vacuum_full": round(sum(after_full.values()) / n, 1),
        "purge_s": round(purge_s, 2),
        "instances_per_s": round(n / purge_s, 1),
    }
    return Result(
        "retention",
        store.kind,
        n,
        figures,
        {"batch": 500, "setup": "signal scenario (completed documents)"},
        details={
            "bytes_before": before,
            "bytes_after_purge": after,
            "bytes_after_vacuum_full": after_full,
        },
    )
