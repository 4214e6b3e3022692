"""``flowpark flows check``: load flow definitions and print every rule finding."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from app.flows.builder import Flow
from app.flows.rules import Severity, check_flow

__all__ = ["check_target", "flows_in"]


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
    ``flows()`` function if it has one."""
    found = [v for v in vars(module).values() if isinstance(v, Flow)]
    factory = getattr(module, "flows", None)
    if callable(factory):
        found.extend(f for f in factory() if isinstance(f, Flow))
    return found


def check_target(target: str, echo: Callable[[str], object] = print) -> int:
    """Check every flow in ``target`` (module name or .py path).

    Returns:
        0 when no finding is an error, 1 otherwise (2 when nothing could be loaded).
    """
    try:
        module = _load(target)
    except Exception as exc:  # noqa: BLE001 - reported to the user
        echo(f"error: cannot load {target}: {exc}")
        return 2
    flows = flows_in(module)
    if not flows:
        echo(f"error: {target} defines no flows (module-level Flow objects or flows())")
        return 2
    errors = 0
    for flow in flows:
        findings = check_flow(flow)
        for finding in findings:
            echo(str(finding))
        errors += sum(1 for f in findings if f.severity is Severity.ERROR)
        if not findings:
            echo(f"ok: {flow.name}@{flow.version}")
    return 1 if errors else 0
