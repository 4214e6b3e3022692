"""The ``scale`` bench's table figures: bytes per parked instance by relation, the server's
autovacuum, and each flowpark table's ``pg_stat_user_tables`` counters and size before and
after the wake window (printed as tables on stderr)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import BenchStore, err_console, flowpark_tables, sql

__all__ = [
    "autovacuum",
    "print_relations",
    "print_tables",
    "relation_options",
    "table_stats",
    "tables_detail",
]

PAGE = 8192
#: the tables are wider than the 80 columns rich gives a stderr that is not a terminal
_wide = Console(stderr=True, width=max(err_console.width, 132))

_STATS = (
    "n_live_tup",
    "n_dead_tup",
    "n_tup_ins",
    "n_tup_upd",
    "n_tup_hot_upd",
    "n_tup_del",
    "autovacuum_count",
    "autoanalyze_count",
    "vacuum_count",
)


def table_stats(store: BenchStore) -> dict[str, dict[str, int]]:
    """Per flowpark table: its ``pg_stat_user_tables`` counters and ``bytes``
    (``pg_total_relation_size``: heap, TOAST and indexes), once no other session is
    connected to the database: a backend flushes its counters as it exits, before it
    leaves ``pg_stat_activity`` (up to 30 s; then as they are)."""
    end = time.monotonic() + 30
    while (
        time.monotonic() < end
        and sql(
            store,
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )[0][0]
    ):
        time.sleep(0.1)
    rows = sql(
        store,
        f"SELECT relname, {', '.join(_STATS)}, pg_total_relation_size(relid) "
        "FROM pg_stat_user_tables WHERE schemaname = 'public'",
    )
    known = set(flowpark_tables())
    out = {}
    for row in rows:
        if row[0] in known:
            out[row[0]] = {
                **dict(zip(_STATS, map(int, row[1:-1]), strict=True)),
                "bytes": int(row[-1]),
            }
    return out


def autovacuum(store: BenchStore) -> str:
    """The server's ``autovacuum`` setting (``on`` or ``off``)."""
    return str(sql(store, "SHOW autovacuum")[0][0])


def relation_options(store: BenchStore) -> dict[str, list[str]]:
    """Storage options (``reloptions``: autovacuum, fillfactor ...) set on any table or index
    of the schema, by name: none unless a migration or an operator set one."""
    rows = sql(
        store,
        "SELECT c.relname, c.reloptions FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind IN ('r', 'i') "
        "AND c.reloptions IS NOT NULL",
    )
    return {name: list(opts) for name, opts in rows}


def tables_detail(
    before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]
) -> dict[str, Any]:
    out = {}
    for name in sorted(after):
        b, a = before.get(name, {}), after[name]
        if not (a["bytes"] - b.get("bytes", 0) or a["n_live_tup"] or a["n_dead_tup"]):
            continue
        out[name] = {
            "bytes_before": b.get("bytes", 0),
            "bytes_after": a["bytes"],
            "live_after": a["n_live_tup"],
            "dead_before": b.get("n_dead_tup", 0),
            "dead_after": a["n_dead_tup"],
            "inserted": a["n_tup_ins"] - b.get("n_tup_ins", 0),
            "updated": a["n_tup_upd"] - b.get("n_tup_upd", 0),
            "hot_updated": a["n_tup_hot_upd"] - b.get("n_tup_hot_upd", 0),
            "deleted": a["n_tup_del"] - b.get("n_tup_del", 0),
            "autovacuums": a["autovacuum_count"] - b.get("autovacuum_count", 0),
            "autoanalyzes": a["autoanalyze_count"] - b.get("autoanalyze_count", 0),
        }
    return out


def print_relations(sizes: dict[str, int], parked: int) -> None:
    table = Table(title=f"bytes per parked instance by relation (n={parked:,})")
    table.add_column("relation")
    table.add_column("bytes per parked", justify="right")
    table.add_column("MiB", justify="right")
    small = {k: v for k, v in sizes.items() if v <= PAGE}
    for name, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        if name not in small:
            table.add_row(name, f"{size / parked:,.1f}", f"{size / 2**20:,.1f}")
    if small:
        total = sum(small.values())
        table.add_row(
            f"{len(small)} relations of one page", f"{total / parked:,.1f}", f"{total / 2**20:,.1f}"
        )
    table.add_row(
        "all", f"{sum(sizes.values()) / parked:,.1f}", f"{sum(sizes.values()) / 2**20:,.1f}"
    )
    _wide.print(table)


def print_tables(tables: dict[str, Any]) -> None:
    table = Table(title="flowpark tables over the wake window (pg_stat_user_tables)")
    for col in (
        "table",
        "MiB before",
        "MiB after",
        "live",
        "dead before",
        "dead after",
        "ins",
        "upd",
        "hot",
        "del",
        "autovac",
    ):
        table.add_column(col, justify="left" if col == "table" else "right")
    for name, t in tables.items():
        table.add_row(
            name,
            f"{t['bytes_before'] / 2**20:,.1f}",
            f"{t['bytes_after'] / 2**20:,.1f}",
            f"{t['live_after']:,}",
            f"{t['dead_before']:,}",
            f"{t['dead_after']:,}",
            f"{t['inserted']:,}",
            f"{t['updated']:,}",
            f"{t['hot_updated']:,}",
            f"{t['deleted']:,}",
            str(t["autovacuums"]),
        )
    _wide.print(table)
