"""The store's ports: narrow (no method takes more than six parameters), and every store
(SQL and in memory) implements each port it is wired as, with the port's names, parameters
and defaults; the in-memory store imports no SQL."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import flowpark.engine.ports as ports
from flowpark.store import SqlStore, make_async_engine
from flowpark.store.memory import MemoryStore

MAX_PARAMETERS = 6

#: the Store's attribute -> the port it is typed as
WIRED = {
    "runs": ports.RunStore,
    "intake": ports.Intake,
    "mailbox": ports.Mailbox,
    "streams": ports.Streams,
    "reads": ports.ReadModel,
    "operator": ports.OperatorReads,
    "overview": ports.OverviewReads,
    "correlations": ports.Correlations,
    "providers": ports.ProviderLimits,
    "reviews": ports.Reviews,
}


def _protocols() -> list[type]:
    return [
        obj
        for name in ports.__all__
        if isinstance(obj := getattr(ports, name), type) and getattr(obj, "_is_protocol", False)
    ]


def _methods(protocol: type) -> dict[str, object]:
    return {
        name: member
        for name, member in vars(protocol).items()
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    }


def test_the_ports_are_protocols_with_methods() -> None:
    found = _protocols()
    assert {p.__name__ for p in found} >= {
        "Deliveries",
        "Intake",
        "Store",
        "Mailbox",
        "OperatorReads",
        "OverviewReads",
        "ReadModel",
        "Retention",
        "RunStore",
        "Streams",
    }
    for protocol in found:
        if protocol is not ports.Store:
            assert _methods(protocol), protocol.__name__


@pytest.mark.parametrize("protocol", _protocols(), ids=lambda p: p.__name__)
def test_no_port_method_takes_more_than_six_parameters(protocol: type) -> None:
    """A wider call takes a value (a :class:`~flowpark.engine.ports.Commit`, a
    :class:`~flowpark.engine.ports.NewSignal`), not a list of parameters."""
    wide = {
        name: count
        for name, method in _methods(protocol).items()
        if (count := len(inspect.signature(method).parameters) - 1) > MAX_PARAMETERS  # type: ignore[arg-type]
    }
    assert wide == {}


def test_the_store_port_names_every_wired_port() -> None:
    declared = {name for name, member in vars(ports.Store).items() if isinstance(member, property)}
    assert declared == set(WIRED)


def _stores() -> list[object]:
    return [SqlStore(make_async_engine("sqlite:///unused.db")), MemoryStore()]


@pytest.mark.parametrize("store", _stores(), ids=lambda s: type(s).__name__)
@pytest.mark.parametrize(("attribute", "protocol"), WIRED.items())
def test_each_store_implements_each_port_it_is_wired_as(
    store: object, attribute: str, protocol: type
) -> None:
    """Same names, parameters and defaults as the port (the engine may call by keyword)."""
    implementation = type(getattr(store, attribute))
    for name, method in sorted(_methods(protocol).items()):
        implemented = getattr(implementation, name)
        assert inspect.iscoroutinefunction(implemented), name
        want = inspect.signature(method).parameters  # type: ignore[arg-type]
        got = inspect.signature(implemented).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], name


def test_the_sql_store_composes_its_ports_as_objects_of_their_own() -> None:
    journal = SqlStore(make_async_engine("sqlite:///unused.db"))
    for attribute in WIRED:
        assert not issubclass(SqlStore, type(getattr(journal, attribute))), attribute


@pytest.mark.parametrize("module", ["memory", "memory_reads", "memory_reviews", "memory_state"])
def test_the_memory_store_imports_no_sql(module: str) -> None:
    path = Path(__file__).resolve().parents[2] / "flowpark" / "store" / f"{module}.py"
    tree = ast.parse(path.read_text())
    imported = [
        name
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    ]
    assert [n for n in imported if n.split(".")[0] in ("sqlalchemy", "sqlmodel", "alembic")] == []
    assert [n for n in imported if n.startswith("flowpark.store") and "memory" not in n] == []
