"""The engine's rules, pinned: no control flow by exception (no exception class of the
engine derives from ``BaseException`` to cut through a capability's handlers), and no
``NotImplementedError`` stands in for an abstract method anywhere in ``app/``: a port or
a base class says what its subclasses owe with ``abc`` (or a ``Protocol``)."""

from __future__ import annotations

import ast
import inspect
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowpark.store.base import Dialect
from flowpark.store.dialects.postgres import PostgresDialect
from flowpark.store.dialects.sqlite import SqliteDialect

ROOT = Path(__file__).resolve().parents[2]


def _trees(package: str, name: str) -> Iterator[tuple[Path, ast.Module]]:
    """The modules of ``package`` that may use ``name``, parsed: a module whose text (as the
    parser reads identifiers, NFKC-normalised) lacks ``name`` has no node that names it."""
    for path in sorted((ROOT / package).rglob("*.py")):
        text = path.read_text()
        if name in (text if text.isascii() else unicodedata.normalize("NFKC", text)):
            yield path, ast.parse(text)


def _names(package: str, wanted: str) -> list[str]:
    found = []
    for path, tree in _trees(package, wanted):
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == wanted:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_nothing_in_app_raises_not_implemented_error() -> None:
    assert _names("flowpark", "NotImplementedError") == []


def test_no_engine_exception_derives_from_base_exception() -> None:
    # asyncio's cancellation is how a try is stopped (a limit, a cancel learned at a
    # heartbeat); the engine makes no exception of its own that handlers cannot catch
    found = []
    for path, tree in _trees("flowpark/engine", "BaseException"):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(base, ast.Name) and base.id == "BaseException" for base in node.bases
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert found == []


def test_the_dialect_base_is_abstract_over_what_each_database_says_itself() -> None:
    assert inspect.isabstract(Dialect)
    assert Dialect.__abstractmethods__ == {"claim_due", "deliver", "insert", "load"}
    with pytest.raises(TypeError, match="abstract"):
        Dialect()  # type: ignore[abstract]
    assert PostgresDialect().name == "postgresql" and SqliteDialect().name == "sqlite"
