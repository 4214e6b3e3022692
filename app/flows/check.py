"""``flowpark flows check``: load flow definitions and print every rule finding.

Exit codes (:func:`check_target`'s return value): 0 no error (warnings allowed), 1 at least
one rule error, 2 the target could not be loaded (an import error, or an exception raised
while building a flow, e.g. a negative duration) or defines no flows.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from app.flows.builder import Flow
from app.flows.rules import Finding, Severity, check_flow

__all__ = ["EXIT_CANNOT_LOAD", "EXIT_ERRORS", "EXIT_OK", "check_target", "flows_in"]

EXIT_OK = 0
EXIT_ERRORS = 1
EXIT_CANNOT_LOAD = 2


def _load(target: str) -> ModuleType:
    path = Path(target)
    if path.suffix == ".py" and path.exists():
        spec = importlib.util.spec_from_file_location(f"_flowpark_check_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    return importlib.import_module(target)


def flows_in(module: ModuleType) -> list[Flow]:
    """Flows a module defines: ``Flow`` objects at module level, plus the result of a
    ``flows()`` function if it has one (each object once)."""
    found = [v for v in vars(module).values() if isinstance(v, Flow)]
    factory = getattr(module, "flows", None)
    if callable(factory):
        found.extend(f for f in factory() if isinstance(f, Flow))
    unique: dict[int, Flow] = {}
    for flow in found:
        unique.setdefault(id(flow), flow)
    return list(unique.values())


def _duplicate(flow: Flow) -> Finding:
    return Finding(
        "flow.duplicate_version",
        Severity.ERROR,
        f"{flow.name}@{flow.version}",
        "flow",
        "another flow has the same name and version; Catalog.register refuses the second",
    )


def check_target(target: str, echo: Callable[[str], object] = print) -> int:
    """Check every flow in ``target`` (module name or .py path).

    Returns:
        :data:`EXIT_OK` (0) when no finding is an error, :data:`EXIT_ERRORS` (1) when one
        is, :data:`EXIT_CANNOT_LOAD` (2) when the target could not be loaded (an exception
        while importing it or building its flows) or defines no flows.
    """
    try:
        module = _load(target)
        flows = flows_in(module)
    except Exception as exc:  # noqa: BLE001 - reported to the user
        echo(f"error: cannot load {target}: {type(exc).__name__}: {exc}")
        return EXIT_CANNOT_LOAD
    if not flows:
        echo(f"error: {target} defines no flows (module-level Flow objects or flows())")
        return EXIT_CANNOT_LOAD
    errors = 0
    seen: set[tuple[str, str]] = set()
    for flow in flows:
        findings = check_flow(flow)
        key = (flow.name, flow.version)
        if key in seen:
            findings.append(_duplicate(flow))
        seen.add(key)
        for finding in findings:
            echo(str(finding))
        errors += sum(1 for f in findings if f.severity is Severity.ERROR)
        if not findings:
            echo(f"ok: {flow.name}@{flow.version}")
    return EXIT_ERRORS if errors else EXIT_OK
