"""Loading a stored-journal fixture (``tests/golden/stored/*.json``, written by
:mod:`tests.golden.record`) into a store, as the release that recorded it left it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from flowpark.store.migrate import upgrade
from flowpark.testing import FlowHarness
from tests.golden.record import SECRETS, STORED, TABLES, flows_of, stand_ins

__all__ = ["fixture_names", "journal_rows", "load_fixture", "resumed_harness"]


def fixture_names(*, must_fail: bool = False) -> list[str]:
    """The recorded fixtures' names (without ``.json``): those that resume, or (with
    ``must_fail``) those whose resume must fail (``must_fail_*``)."""
    names = sorted(p.stem for p in STORED.glob("*.json"))
    return [n for n in names if n.startswith("must_fail_") == must_fail]


def load_fixture(name: str) -> dict[str, Any]:
    """The fixture ``name`` as JSON data."""
    data: dict[str, Any] = json.loads((STORED / f"{name}.json").read_text(encoding="utf-8"))
    return data


def journal_rows(fixture: dict[str, Any]) -> int:
    """The journal's rows at the recorded point, as read back: ``journalRows`` (fixtures
    recorded once deadlines could be carried inside other rows, 0024), else one per
    ``flow_step`` row (every row was its own before)."""
    return int(fixture.get("journalRows", len(fixture["stored"]["flow_step"])))


def _raw(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"$bytes"}:
        return bytes.fromhex(value["$bytes"])
    return value


def write_stored(path: Path, fixture: dict[str, Any]) -> str:
    """Create a SQLite store at ``path`` at the fixture's schema revision, insert its raw
    rows, then migrate it to head. Returns the store's URL."""
    url = f"sqlite:///{path}"
    upgrade(url, fixture["recordedWith"]["schemaRevision"])
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            for table in TABLES:  # a table recorded before it existed holds nothing
                for row in fixture["stored"].get(table, []):
                    cols = list(row)
                    names = ", ".join(f'"{c}"' for c in cols)
                    marks = ", ".join(f":p{i}" for i in range(len(cols)))
                    conn.execute(
                        text(f"INSERT INTO {table} ({names}) VALUES ({marks})"),  # noqa: S608
                        {f"p{i}": _raw(row[c]) for i, c in enumerate(cols)},
                    )
    finally:
        engine.dispose()
    upgrade(url)
    return url


@asynccontextmanager
async def resumed_harness(
    fixture: dict[str, Any], folder: Path, flow: dict[str, Any] | None = None
) -> AsyncIterator[FlowHarness]:
    """A harness on the fixture's store (migrated to head), its clock at the recorded point,
    the flow registered with the scripts' remaining outcomes. ``flow``: another flow spec
    (a changed plan) instead of the recorded one."""
    url = write_stored(folder / "stored.db", fixture)
    subs = stand_ins(fixture["scriptsAfter"])
    point = datetime.fromisoformat(fixture["point"])
    flows = flows_of(flow or fixture["flow"])
    async with FlowHarness.open(
        flows, database_url=url, substitutes=subs, start=point, signal_secrets=SECRETS
    ) as h:
        yield h
