"""Architecture pins: the engine and the authoring API import no framework or driver, and
public packages export a sorted, pinned ``__all__``."""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "sqlmodel",
    "apscheduler",
    "httpx",
    "uvicorn",
    "psycopg",
    "aiosqlite",
    "alembic",
)


@cache
def _imports_of(path: Path) -> tuple[ast.ImportFrom | ast.Import, ...]:
    """Every import statement in ``path``, inside functions and type-only blocks too
    (parsed once for the module's tests; only the statements are kept)."""
    tree = ast.parse(path.read_text(), str(path))
    return tuple(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom | ast.Import))


@pytest.mark.parametrize("package", ["flowpark/engine", "flowpark/flows"])
def test_core_imports_no_framework_or_driver(package: str) -> None:
    offenders = []
    for path in (ROOT / package).rglob("*.py"):
        for node in _imports_of(path):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in FORBIDDEN
                or n.startswith("flowpark.store")
                or n.startswith("flowpark.api")
            ]
    assert offenders == []


EXPORTS = {
    "flowpark.embedding": ["Flowpark", "LocalClient", "Role", "Transaction", "client_error"],
    "flowpark.flows": [
        "Backoff",
        "Bag",
        "Block",
        "Capability",
        "CapabilityOptions",
        "Catalog",
        "Complete",
        "Correlate",
        "Decision",
        "Fail",
        "Finding",
        "Flow",
        "FlowFailure",
        "GitHubWebhook",
        "HmacWebhook",
        "HttpTrigger",
        "Plan",
        "Profile",
        "Provider",
        "ProviderPushback",
        "RecoveryError",
        "RetryPolicy",
        "Severity",
        "Signal",
        "SignalMatch",
        "SignedWebhook",
        "StepContext",
        "Stream",
        "StripeWebhook",
        "WebhookDelivery",
        "bag_key",
        "check_flow",
        "compile_flow",
        "retry_after_instant",
        "to_timedelta",
    ],
    "flowpark.testing": [
        "FlowHarness",
        "Scripted",
        "substitute",
        "webhook_body",
        "webhook_headers",
    ],
    "flowpark.migrations": [
        "TABLES",
        "VERSION_TABLE",
        "current_revision",
        "downgrade",
        "head_revision",
        "include_name",
        "upgrade",
    ],
    "flowpark": [
        "AsyncClient",
        "Backoff",
        "Bag",
        "Block",
        "Capability",
        "CapabilityOptions",
        "Client",
        "Complete",
        "Correlate",
        "Decision",
        "DefinitionError",
        "Deps",
        "Fail",
        "Finding",
        "Flow",
        "FlowFailure",
        "Flowpark",
        "FlowsUnloadable",
        "GitHubWebhook",
        "HmacWebhook",
        "HttpTrigger",
        "LocalClient",
        "Profile",
        "Provider",
        "ProviderPushback",
        "RecoveryError",
        "RetryPolicy",
        "Severity",
        "Signal",
        "SignalMatch",
        "SignedWebhook",
        "StepContext",
        "Stream",
        "StripeWebhook",
        "WebhookDelivery",
        "bag_key",
        "check_flow",
        "retry_after_instant",
    ],
    "flowpark.runtime.loading": [
        "Deps",
        "FlowSource",
        "check_targets",
        "findings_of",
        "is_path",
        "load_flows",
        "register_flows",
        "resolve_target",
    ],
    "flowpark.ui": ["build_console_router", "install_console"],
    "flowpark.engine": [
        "Clock",
        "Commit",
        "Engine",
        "EngineConfig",
        "InstanceRecord",
        "InstanceState",
        "Intake",
        "Mailbox",
        "Park",
        "ReadModel",
        "RunOutcome",
        "RunStore",
        "Snapshot",
        "StartResult",
        "StepRow",
        "Store",
        "Streams",
        "SweepReport",
        "SystemClock",
        "VirtualClock",
    ],
}


@pytest.mark.parametrize("module", sorted(EXPORTS))
def test_public_exports_are_pinned_and_sorted(module: str) -> None:
    exported = importlib.import_module(module).__all__
    assert exported == EXPORTS[module]
    assert list(exported) == sorted(exported)  # ruff RUF022 order: capitals first


MAX_MODULE_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    """A module past this size holds more than one topic: split it by what its parts do."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in ("app", "flowpark")
        for path in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the packages
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}


ENGINE = ROOT / "flowpark" / "engine"
MAX_ENGINE_MODULE_LINES = 400


def _engine_imports(path: Path) -> set[str]:
    """The ``flowpark.engine`` modules ``path`` imports: every ``import`` and ``from`` statement
    anywhere in it (inside functions and ``if TYPE_CHECKING:`` blocks too)."""
    found: set[str] = set()
    for node in _imports_of(path):
        if isinstance(node, ast.ImportFrom) and node.module:
            base = node.module
            if base == "flowpark.engine" or base.startswith("flowpark.engine."):
                found.add(base)  # and each name, in case it is a module (from ... import sweeps)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("flowpark.engine."))
    return found


def _engine_graph() -> dict[str, set[str]]:
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts): p
        for p in ENGINE.rglob("*.py")
        if p.stem != "__init__"
    }
    return {name: _engine_imports(path) & set(modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (or a module importing
    itself): each holds an import cycle (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in sorted(graph[name]):
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == name:
                    break
            if len(group) > 1 or name in graph[name]:
                groups.append(sorted(group))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return groups


def test_the_engine_has_no_import_cycle() -> None:
    """No module of ``flowpark.engine`` imports (directly or around a circle, type-only imports
    and imports inside functions included) a module that imports it back: each part
    depends on the parts below it and on protocols, never on the engine above it."""
    graph = _engine_graph()
    assert len(graph) > 15 and "flowpark.engine.execute.executor" in graph
    assert (
        "flowpark.engine.decide.decisions" in graph["flowpark.engine.execute.executor"]
    )  # the walk finds imports
    assert _cycles(graph) == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _flowpark_imports(path: Path, modules: set[str], name: str | None = None) -> set[str]:
    """The ``flowpark`` modules (and packages) ``path`` (the module ``name``) imports,
    anywhere in it (inside functions and ``if TYPE_CHECKING:`` blocks too), relative
    imports resolved."""
    name = name or _module_name(path)
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _imports_of(path):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        else:
            found.update(alias.name for alias in node.names)
    return (found & modules) - {name}


def _flowpark_graph() -> dict[str, set[str]]:
    """Every module and package of ``flowpark`` (the samples aside: they import only the
    public names) with the ones it imports."""
    paths = [
        p
        for p in (ROOT / "flowpark").rglob("*.py")
        if "samples" not in p.relative_to(ROOT / "flowpark").parts
    ]
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _flowpark_imports(p, modules) for p in paths}


def test_no_package_has_an_import_cycle() -> None:
    """No module of ``flowpark`` imports (directly or around a circle, type-only imports and
    imports inside functions included) a module that imports it back: in every package
    each module builds on the ones below it."""
    graph = _flowpark_graph()
    assert len(graph) > 150
    assert "flowpark.store.base" in graph["flowpark.store.claims"]  # the walk finds imports
    assert "flowpark.store.base" in graph["flowpark.store.dialects.postgres"]
    assert _cycles(graph) == []


def test_the_import_walk_sees_function_type_only_and_relative_imports(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from flowpark.store.base import SqlRole\n"
        "def f():\n    from flowpark.store import claims\n"
        "from .fencing import fenced\n"
    )
    modules = set(_flowpark_graph())
    found = _flowpark_imports(planted, modules, "flowpark.store.planted")
    assert found == {
        "flowpark.store",
        "flowpark.store.base",
        "flowpark.store.claims",
        "flowpark.store.fencing",
    }


#: The engine's folders, each allowed to import only those after it (and the engine's root
#: modules): a node's work feeds runs, a run carries out decisions, a decision is pure.
ENGINE_FOLDERS = ("node", "execute", "decide")


def test_the_engine_folders_import_downward_only() -> None:
    graph = _engine_graph()
    found = []
    for name, imports in graph.items():
        parts = name.split(".")
        root_module = len(parts) == 3
        for other in imports:
            other_folder = other.split(".")[2] if len(other.split(".")) == 4 else None
            if other_folder is None:
                continue
            if root_module and other_folder in ENGINE_FOLDERS:
                found.append(f"{name} -> {other}")  # a root module imports no folder
            elif not root_module and parts[2] in ENGINE_FOLDERS:
                allowed = ENGINE_FOLDERS[ENGINE_FOLDERS.index(parts[2]) :]
                if other_folder in ENGINE_FOLDERS and other_folder not in allowed:
                    found.append(f"{name} -> {other}")
    assert found == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_engine_module_is_over_400_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in ENGINE.glob("*.py")}
    assert {p: n for p, n in sizes.items() if n > MAX_ENGINE_MODULE_LINES} == {}


def test_the_decider_imports_no_store_runtime_asyncio_or_io() -> None:
    """The decider and the modules it is built from are pure: no store, runtime, asyncio,
    clock or I/O; a test of the decider needs no database, no clock and no event loop."""
    pure = sorted(p.stem for p in (ENGINE / "decide").glob("*.py") if p.stem != "__init__")
    assert "decider" in pure and "try_walk" in pure
    allowed = {f"flowpark.engine.decide.{m}" for m in pure} | {
        f"flowpark.engine.{m}" for m in ["records", "values", "context", "observe"]
    }
    for name in pure:
        imported: set[str] = set()
        for node in _imports_of(ENGINE / "decide" / f"{name}.py"):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
        engine = {m for m in imported if m.startswith("flowpark.engine")}
        assert engine <= allowed, (name, engine - allowed)
        outside = {
            m
            for m in imported
            if m.startswith(("flowpark.store", "flowpark.runtime", "flowpark.api"))
        }
        assert outside == set(), name
        io = {m for m in imported if m.split(".")[0] in {"asyncio", "socket", "time", "threading"}}
        assert io == set(), name


LAYERS = ("flowpark.api", "flowpark.runtime", "flowpark.ui")


def _layer_of(module: str) -> str | None:
    return next(
        (layer for layer in LAYERS if module == layer or module.startswith(layer + ".")), None
    )


def _layer_graph() -> dict[str, set[str]]:
    """Which of flowpark.api, .runtime and .ui each of them imports (any module of it)."""
    graph: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for layer in LAYERS:
        for path in (ROOT / Path(*layer.split("."))).rglob("*.py"):
            for node in _imports_of(path):
                names = [node.module] if isinstance(node, ast.ImportFrom) else []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                for name in names:
                    other = _layer_of(name or "")
                    if other is not None and other != layer:
                        graph[layer].add(other)
    return graph


def test_the_api_imports_nothing_of_the_runtime() -> None:
    """The API layer is wired by the runtime, never the other way round: no ``flowpark.api``
    module imports ``flowpark.runtime`` (the OpenAPI dump lives in ``flowpark.runtime.openapi``)."""
    graph = _layer_graph()
    assert "flowpark.api" in graph["flowpark.runtime"]  # the walk sees the runtime's imports
    assert "flowpark.runtime" not in graph["flowpark.api"]


def test_api_runtime_and_console_import_no_circle() -> None:
    graph = _layer_graph()
    assert _cycles(graph) == [], graph


def test_the_console_imports_no_private_name_of_another_package() -> None:
    """``flowpark.ui`` reads the API's views through their public names only."""
    private = []
    for path in (ROOT / "flowpark" / "ui").rglob("*.py"):
        for node in _imports_of(path):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and not node.module.startswith("flowpark.ui")
            ):
                hidden = [a.name for a in node.names if a.name.startswith("_")]
                private += [f"{path.name}: {node.module}.{name}" for name in hidden]
    assert private == []


def _type_names(path: Path) -> set[str]:
    """The classes ``path`` defines and its module-level type aliases (``Name = A | B``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
    for node in ast.parse(path.read_text(), str(path)).body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.BinOp)
            and isinstance(node.value.op, ast.BitOr)
        ):
            names.update(
                t.id for t in node.targets if isinstance(t, ast.Name) and t.id[0].isupper()
            )
    return names


def _defined_twice() -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for path in sorted((ROOT / "flowpark").rglob("*.py")):
        if "samples" in path.relative_to(ROOT).parts:
            continue  # flowpark/samples links to samples/: flows a user could have written
        for name in _type_names(path):
            where.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_class_name_is_defined_twice() -> None:
    """One name, one meaning: no two classes (or type aliases) under ``flowpark/`` share a
    name. The only pairs are the client's errors: each is the node's error of the same
    problem ``code`` as a caller receives it (the client maps the code to it)."""
    from flowpark import errors
    from flowpark.client import errors as client_errors

    twice = _defined_twice()
    assert "FlowparkError" not in twice  # the walk sees the error tree
    mirrored = {
        name: paths
        for name, paths in twice.items()
        if paths == ["flowpark/client/errors.py", "flowpark/errors.py"]
    }
    assert {n: p for n, p in twice.items() if n not in mirrored} == {}
    for name in mirrored:
        code = str(getattr(errors, name).code)
        assert client_errors._BY_CODE.get(code) is getattr(client_errors, name), name


def test_the_twice_defined_check_sees_a_class_and_an_alias(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Park:\n    pass\n\nDecision = int | str\n")
    assert _type_names(tmp_path / "a.py") == {"Park", "Decision"}


@pytest.mark.parametrize("package", ["flowpark/api", "flowpark/ui"])
def test_the_api_and_the_console_import_ports_and_models_never_a_store_module(
    package: str,
) -> None:
    """The HTTP API and the console reach storage through the engine's ports (the runtime
    wires the store behind them): no module of theirs imports ``flowpark.store``."""
    found = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in (ROOT / package).rglob("*.py")
        for name in _flowpark_imports(path, set(_flowpark_graph()))
        if name == "flowpark.store" or name.startswith("flowpark.store.")
    ]
    assert found == []


def test_flowparks_tables_are_not_on_the_applications_sqlmodel_metadata() -> None:
    """A host's ``SQLModel.metadata`` (its ``create_all``, its Alembic autogenerate) holds
    its own tables only, with flowpark and its store imported."""
    import sqlmodel

    import flowpark.store.sql_store  # noqa: F401 - every table of flowpark's
    from flowpark.store.tables import metadata

    assert "flow_instance" in metadata.tables
    assert not any(name.startswith("flow_") for name in sqlmodel.SQLModel.metadata.tables)
