"""Loading flows: the ``--flows`` / ``FLOWPARK_FLOWS`` targets become flows on a catalog.

A *target* is one of:

* a module path (``mycompany.flows``), imported with the normal import system, or from the
  working directory when its package (or module) is there (``app.flows`` beside
  ``app/__init__.py``), as ``python -m`` finds it;
* a ``.py`` file: its folder goes first on ``sys.path`` and the file is imported as a
  top-level module named after it (``ci_build.py`` -> ``ci_build``), so it can import the
  modules beside it; a file inside a package (``app/flows.py`` beside ``app/__init__.py``)
  is imported by its dotted name (``app.flows``), the package's parent folder first on
  ``sys.path`` too, so it imports ``app.clients`` as well;
* a folder: it goes first on ``sys.path`` and each ``*.py`` file in it is imported the same
  way, by name order, except ``conftest.py``, ``test_*.py``, ``*_test.py`` and names
  starting with ``_`` (tests and helpers may sit beside the flows).

A module's flows are every module-level :class:`~flowpark.flows.Flow` object plus what its
``flows`` function returns: ``flows(deps)`` receives the node's :class:`Deps` (its shared
outbound HTTP client and settings), ``flows()`` without parameters is called bare. A flow
object found twice counts once. A folder whose modules define no flow, or a module target
that defines none, cannot be loaded.

Errors (one line each, never a traceback, in the CLI):

* :class:`~flowpark.errors.FlowsUnloadable` (code ``flows_unloadable``): a target that does not
  import, or whose ``flows`` raised (e.g. on a negative duration), or that defines no flow.
* :class:`~flowpark.errors.DefinitionError` (code ``definition_invalid``): a rule error in
  any flow, or two flows with one name and version; ``.findings`` holds every finding.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import sysconfig
import traceback
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from flowpark.errors import DefinitionError, FlowsUnloadable
from flowpark.flows.builder import Flow
from flowpark.flows.catalog import Catalog
from flowpark.flows.plan import Plan
from flowpark.flows.rules import (
    Finding,
    Severity,
    check_flow,
    compile_flow,
    provider_clashes,
)
from flowpark.settings import ApiToken, Settings

if TYPE_CHECKING:
    import httpx
    from fastapi import APIRouter

__all__ = [
    "Deps",
    "FlowSource",
    "check_targets",
    "findings_of",
    "is_path",
    "load_flows",
    "register_flows",
    "resolve_target",
]

#: A flow source given in code instead of a target string: ``source(deps) -> flows``.
FlowSource = Callable[["Deps"], Iterable[Flow]]

_SKIPPED_FILES = ("conftest.py",)


@dataclass
class Deps:
    """What a node hands to a flows module's ``flows(deps)`` factory.

    Attributes:
        http: the node's one pooled outbound ``httpx.AsyncClient`` (cookie-less, environment
            proxies honoured, timeout ``FLOWPARK_HTTP_TIMEOUT_SECONDS``); pass your own
            ``timeout=`` per call when a provider needs another. Closed by the node when it
            stops: never close it yourself.
        settings: the node's :class:`~flowpark.settings.Settings`.
        serving: True on a node that serves HTTP (``flowpark serve``); False on a worker and
            in ``flowpark flows check``, where :meth:`mount` has no effect.
        state: objects a flows module wants reachable from the app (``app.state.flows``),
            e.g. a fake provider a test inspects.
    """

    http: httpx.AsyncClient
    settings: Settings
    serving: bool = False
    state: dict[str, Any] = field(default_factory=dict)
    routers: list[tuple[APIRouter, list[str]]] = field(default_factory=list, repr=False)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list, repr=False)
    credentials: list[ApiToken] = field(default_factory=list, repr=False)
    instance_credentials: list[Callable[[str, str], ApiToken | None]] = field(
        default_factory=list, repr=False
    )

    def mount(self, router: APIRouter, *, tags: Sequence[str] = ()) -> None:
        """Serve ``router``'s routes on this node (only when :attr:`serving`).

        Args:
            router: a FastAPI ``APIRouter`` (its paths appear in the node's OpenAPI).
            tags: OpenAPI tags added to its routes.
        """
        if self.serving:
            self.routers.append((router, list(tags)))

    def accept(self, credential: ApiToken) -> None:
        """Accept ``credential`` on this node's API besides ``FLOWPARK_API_TOKENS``, with
        its own (narrow) scopes: e.g. the token a provider's webhook carries. Register its
        value with :func:`flowpark.redaction.register_secrets` too."""
        self.credentials.append(credential)

    def accept_for_instance(self, check: Callable[[str, str], ApiToken | None]) -> None:
        """Accept, on the routes of one instance (``.../{instance_id}/...``), the tokens
        ``check(token, instance_id)`` answers a credential for: e.g. a provider's
        callback token made for the instance that created its job, which opens no other
        instance. ``check`` must compare in constant time (:func:`hmac.compare_digest`)."""
        self.instance_credentials.append(check)

    def on_close(self, close: Callable[[], Awaitable[None]]) -> None:
        """Await ``close()`` when the node stops (after its sweep stopped, before the HTTP
        client closes); closers run in reverse order of registration."""
        self.closers.append(close)


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _why(exc: BaseException, target: str | None = None) -> str:
    where = _where(exc)
    text = f"{type(exc).__name__}: {exc}" + (f" (at {where})" if where else "")
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        text += f"; {_import_hint(exc.name.split('.')[0], target)}"
    return _one_line(text)


def _import_hint(top: str, target: str | None) -> str:
    """What to do about a module ``top`` the flows import but Python cannot find: name the
    folder holding a package or module of that name near the target (its folder and the
    folders above it, then the working directory), which is not on the import path."""
    places: list[Path] = []
    if target is not None and is_path(target):
        start = Path(target).expanduser().resolve()
        places.extend(start.parents if start.suffix == ".py" else (start, *start.parents))
    places.append(Path.cwd())
    for folder in places:
        if (folder / top / "__init__.py").is_file() or (folder / f"{top}.py").is_file():
            return (
                f"hint: {top} is in {folder}, which is not on the import path: set "
                f"PYTHONPATH={folder} (or install {top})"
            )
    return (
        f"hint: install {top}, or run from the folder holding the package {top} with "
        "PYTHONPATH set to that folder"
    )


def _where(exc: BaseException) -> str | None:
    """``file:line`` of the innermost frame of ``exc``'s traceback in the author's code (not
    flowpark's, the standard library's or an installed package's), or None."""
    if isinstance(exc, SyntaxError):
        return None  # its message already names the file and the line
    skipped = {Path(p).resolve() for p in sysconfig.get_paths().values()}
    skipped.add(Path(__file__).resolve().parents[1])  # flowpark's own package
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith("<"):
            continue
        path = Path(frame.filename).resolve()
        if not any(path.is_relative_to(root) for root in skipped):
            return f"{frame.filename}:{frame.lineno}"
    return None


def _dotted_name(path: Path) -> tuple[str, Path]:
    """The module name of the file ``path`` and the folder it is imported from: inside a
    package (folders holding ``__init__.py``), ``app/flows.py`` is ``app.flows`` from the
    package's parent folder; elsewhere it is its stem from its own folder."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def _import_beside(path: Path, target: str) -> ModuleType:
    """Import the file ``path``, its folder first on ``sys.path`` (so its sibling imports
    work): as the top-level module named after it, or, inside a package, by its dotted name
    with the package's parent folder on ``sys.path`` too (so ``app/flows.py`` may import
    ``app.clients`` and use relative imports)."""
    name, root = _dotted_name(path)
    for folder in (str(root), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    module = importlib.import_module(name)
    origin = getattr(module, "__file__", None)
    if origin is None or Path(origin).resolve() != path:
        raise FlowsUnloadable(
            f"cannot load {target}: the module name {name!r} is already taken by "
            f"{origin or 'a built-in module'}; rename the file",
            target=target,
        )
    return module


def _flow_files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.glob("*.py")
        if not p.name.startswith(("_", "test_"))
        and not p.name.endswith("_test.py")
        and p.name not in _SKIPPED_FILES
    )


#: The target that names the bundled sample flows (module ``flowpark.samples``).
SAMPLES = "samples"


def is_path(target: str) -> bool:
    """Whether ``target`` names a path (it ends in ``.py`` or holds a separator or ``~``)."""
    return target.endswith(".py") or any(c in target for c in "/\\") or target.startswith("~")


def resolve_target(target: str) -> list[ModuleType]:
    """Import ``target`` (module path, ``.py`` file or folder; see the module docstring).

    A target ending in ``.py`` or holding a path separator is a path; any other is a module
    path first, and a file or folder of that name in the working directory only when no
    such module exists. ``samples`` names the bundled sample flows (``flowpark.samples``),
    even beside a ``samples/`` folder.

    Returns:
        The imported modules (one, or a folder's files in name order).

    Raises:
        FlowsUnloadable: code ``flows_unloadable``; the message says why in one line.
    """
    if target == SAMPLES:
        target = "flowpark.samples"
    try:
        if not is_path(target):
            try:
                module = importlib.import_module(target)
                if getattr(module, "__file__", None) is not None or not Path(target).is_dir():
                    return [module]
                # a folder of flows found as a namespace package (its parent folder on
                # PYTHONPATH): it holds no code of its own; load its files, as a folder
            except ModuleNotFoundError as exc:
                top = target.split(".")[0]
                if exc.name != top:
                    raise
                if not Path(target).exists() and _in_working_directory(top):
                    return [importlib.import_module(target)]
                if not Path(target).exists():
                    raise FlowsUnloadable(
                        f"cannot load {target}: no module, .py file or folder of that name",
                        target=target,
                    ) from exc
        return _import_path(target)
    except FlowsUnloadable:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure to import is the user's to see
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise FlowsUnloadable(f"cannot load {target}: {_why(exc, target)}", target=target) from exc


def _in_working_directory(top: str) -> bool:
    """Whether the working directory holds the package or module ``top`` (as ``python -m``
    and uvicorn find it); if so, the working directory goes first on ``sys.path``."""
    here = Path.cwd()
    if not ((here / top / "__init__.py").is_file() or (here / f"{top}.py").is_file()):
        return False
    if str(here) not in sys.path:
        sys.path.insert(0, str(here))
    importlib.invalidate_caches()
    return True


def _import_path(target: str) -> list[ModuleType]:
    path = Path(target).expanduser()
    if path.is_dir():
        files = _flow_files(path.resolve())
        if not files:
            raise FlowsUnloadable(
                f"cannot load {target}: the folder holds no .py file", target=target
            )
        return [_import_beside(f, target) for f in files]
    if path.is_file() and path.suffix == ".py":
        return [_import_beside(path.resolve(), target)]
    raise FlowsUnloadable(f"cannot load {target}: no such .py file or folder", target=target)


def _call_factory(factory: Callable[..., Any], deps: Deps) -> Iterable[Any]:
    try:
        takes_deps = bool(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # a builtin or C callable: try with deps
        takes_deps = True
    result = factory(deps) if takes_deps else factory()
    return list(result or [])


def _flows_of(module: ModuleType, deps: Deps) -> list[Flow]:
    found: list[Any] = [v for v in vars(module).values() if isinstance(v, Flow)]
    factory = getattr(module, "flows", None)
    if callable(factory):
        found.extend(_call_factory(factory, deps))
    return [f for f in found if isinstance(f, Flow)]


def load_flows(targets: Sequence[str | FlowSource], deps: Deps) -> list[Flow]:
    """Import every target and collect its flows (each flow object once, in target order).

    Args:
        targets: target strings (see the module docstring) or :data:`FlowSource` callables.
        deps: handed to every ``flows(deps)`` factory.

    Returns:
        The flows, not yet checked (see :func:`register_flows`).

    Raises:
        FlowsUnloadable: code ``flows_unloadable``: a target does not import, its
            ``flows`` raised, or it defines no flow; or no target was given.
    """
    if not targets:
        raise FlowsUnloadable("no flows to load: give --flows or set FLOWPARK_FLOWS", target="")
    flows: dict[int, Flow] = {}
    for target in targets:
        name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        try:
            if isinstance(target, str):
                found = [f for m in resolve_target(target) for f in _flows_of(m, deps)]
            else:
                found = [f for f in _call_factory(target, deps) if isinstance(f, Flow)]
        except FlowsUnloadable:
            raise
        except Exception as exc:  # noqa: BLE001 - building a flow raised: the user's to see
            why = _why(exc, name if isinstance(target, str) else None)
            raise FlowsUnloadable(f"cannot load {name}: {why}", target=name) from exc
        if not found:
            raise FlowsUnloadable(
                f"cannot load {name}: it defines no flow (module-level Flow objects or a "
                "flows(deps) function)",
                target=name,
            )
        for flow in found:
            flows.setdefault(id(flow), flow)
    return list(flows.values())


def _duplicate(flow: Flow) -> Finding:
    return Finding(
        "flow.duplicate_version",
        Severity.ERROR,
        f"{flow.name}@{flow.version}",
        "flow",
        "another flow has the same name and version",
    )


def findings_of(flows: Sequence[Flow]) -> list[tuple[Flow, list[Finding]]]:
    """Every flow with its findings, a second flow of one name and version included."""
    seen: set[tuple[str, str]] = set()
    out = []
    plans: list[Plan] = []
    for flow in flows:
        findings = check_flow(flow)
        key = (flow.name, flow.version)
        if key in seen:
            findings.append(_duplicate(flow))
        seen.add(key)
        if not any(f.severity is Severity.ERROR for f in findings):
            # a provider declared with other limits by an earlier flow of the node
            plan = compile_flow(flow)[0]
            clashes = provider_clashes([*plans, plan])
            findings.extend(clashes)
            if not clashes:
                plans.append(plan)
        out.append((flow, findings))
    return out


def register_flows(catalog: Catalog, flows: Sequence[Flow]) -> list[Finding]:
    """Check every flow first, then register them all, or none.

    Returns:
        The warnings (also logged by the catalog).

    Raises:
        DefinitionError: code ``definition_invalid``: at least one rule error;
            ``.findings`` lists every error finding of every flow (flow, node, rule code).
    """
    errors = [
        f for _, findings in findings_of(flows) for f in findings if f.severity is Severity.ERROR
    ]
    if errors:
        raise DefinitionError(
            f"{len(errors)} definition error(s): " + "; ".join(map(str, errors)), errors
        )
    warnings: list[Finding] = []
    for flow in flows:
        warnings.extend(catalog.register(flow))
    return warnings


#: ``flowpark flows check`` exit codes.
EXIT_OK, EXIT_ERRORS, EXIT_CANNOT_LOAD = 0, 1, 2


def check_targets(
    targets: Sequence[str],
    echo: Callable[[str], object] = print,
    *,
    settings: Settings | None = None,
) -> int:
    """``flowpark flows check``: load ``targets`` and print every finding, one per line.

    Args:
        targets: target strings (see the module docstring).
        echo: prints one line.
        settings: handed to ``flows(deps)`` factories (default: from ``FLOWPARK_*``).

    Returns:
        0 when no finding is an error (``ok: name@version`` per clean flow), 1 when one is,
        2 when a target cannot be loaded (one line ``error: flows_unloadable: ...``).
    """
    from flowpark.runtime.http import outbound_client

    settings = settings or Settings()
    # never used for a call here, so it opens no connection and needs no closing
    http = outbound_client(settings.http_timeout_seconds)
    try:
        flows = load_flows(targets, Deps(http, settings))
    except FlowsUnloadable as exc:
        echo(f"error: {exc.code}: {exc.message}")
        return EXIT_CANNOT_LOAD
    errors = 0
    for flow, findings in findings_of(flows):
        for finding in findings:
            echo(str(finding))
        errors += sum(1 for f in findings if f.severity is Severity.ERROR)
        if not findings:
            echo(f"ok: {flow.name}@{flow.version}")
    return EXIT_ERRORS if errors else EXIT_OK
