"""Flow versions side by side: which unfinished instances a node can run, and which not.

A node registers every version its flows targets define; an instance always runs on the
version it started with, and a start takes the newest. Instances of a version no node serves
wait (suspended or with an expired lease) until a node serving it starts: the node says so
once at start-up, and ``GET /api/v1/flows`` lists such versions with ``served: false``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from flowpark.engine.ports.operator import OperatorReads
from flowpark.engine.records import InstanceState
from flowpark.flows import Catalog

__all__ = ["UNFINISHED", "log_unserved", "unfinished_by_version", "unserved"]

log = logging.getLogger("flowpark.runtime")  # the name operators filter on

#: The states of an instance that has not ended.
UNFINISHED = frozenset({InstanceState.RUNNING, InstanceState.SUSPENDED})


async def unfinished_by_version(reads: OperatorReads, now: datetime) -> dict[tuple[str, str], int]:
    """Unfinished (running or suspended) instances per ``(flow, version)``.

    Args:
        reads: the operator's queries (``engine.store.operator``).
        now: the engine-clock instant.

    Returns:
        ``{(name, version): count}``, only versions with at least one.
    """
    counts = await reads.count_instances_by(now, 0.0)
    out: dict[tuple[str, str], int] = {}
    for row in counts.by_state:
        if InstanceState(row.state) in UNFINISHED:
            key = (row.flow_name, row.flow_version)
            out[key] = out.get(key, 0) + row.count
    return out


def unserved(
    unfinished: Mapping[tuple[str, str], int], catalog: Catalog
) -> dict[tuple[str, str], int]:
    """The entries of ``unfinished`` whose version ``catalog`` does not hold."""
    return {k: n for k, n in sorted(unfinished.items()) if catalog.find(*k) is None}


async def log_unserved(reads: OperatorReads, catalog: Catalog, now: datetime) -> int:
    """Log one warning line when unfinished instances are of versions this node does not
    serve; returns how many there are (0: nothing logged)."""
    missing = unserved(await unfinished_by_version(reads, now), catalog)
    total = sum(missing.values())
    if total:
        listed = ", ".join(f"{name}@{version} ({n})" for (name, version), n in missing.items())
        log.warning(
            "%d unfinished instance(s) of flow versions this node does not serve: %s; they "
            "wait for a node that serves them (keep the old version in your flows until "
            "they finish)",
            total,
            listed,
        )
    return total
