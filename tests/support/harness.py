"""The SQL store under a :class:`~flowpark.testing.FlowHarness` opened on a database, for the
tests that look at its tables or count its statements."""

from __future__ import annotations

from flowpark.store import SqlStore
from flowpark.testing import FlowHarness


def sql_of(h: FlowHarness) -> SqlStore:
    """``h``'s store, a :class:`SqlStore` (the harness was opened with a ``database_url``)."""
    assert isinstance(h.store, SqlStore), "open the harness with a database_url"
    return h.store
