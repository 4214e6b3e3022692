"""Raw reads of a SQLite database with the standard library (what is really stored)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from typing import Any

from sqlalchemy.engine import make_url

__all__ = ["count_instances", "query", "sqlite_path"]


def sqlite_path(url: str) -> str:
    """The file behind ``sqlite:///path`` (any driver suffix)."""
    database = make_url(url).database
    if not database:
        raise ValueError(f"not a SQLite file URL: {url}")
    return database


def query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one read-only statement on the SQLite file behind ``url``; all rows."""
    with closing(sqlite3.connect(f"file:{sqlite_path(url)}?mode=ro", uri=True, timeout=30)) as conn:
        return conn.execute(sql, params).fetchall()


def count_instances(url: str, document_id: str | None = None) -> int:
    """``flow_instance`` rows (of one ``documentId`` when given)."""
    if document_id is None:
        return int(query(url, "SELECT count(*) FROM flow_instance")[0][0])
    return int(
        query(
            url,
            "SELECT count(*) FROM flow_instance WHERE json_extract(input, '$.documentId') = ?",
            (document_id,),
        )[0][0]
    )
