"""``tests/durations.json``: what each test module costs, for ordering the parallel run.

``pytest -n auto`` hands whole modules to its workers in collection order
(``--dist loadscope --no-loadscope-reorder``); ``tests/conftest.py`` orders them costliest
first from this file. Refresh it after a module's cost changed much (only the order matters)::

    pytest tests/e2e --junitxml=/tmp/e2e.xml
    python -m tests.support.durations /tmp/e2e.xml [more.xml ...]

Each report's modules are written with the sum of their tests' times (setup, call and
teardown: pytest's junit ``time``); modules absent from the reports keep their figures.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

__all__ = ["FILE", "module_seconds", "update"]

ROOT = Path(__file__).resolve().parents[2]
FILE = ROOT / "tests" / "durations.json"


def _module_path(classname: str) -> str:
    """``tests.e2e.test_chaos`` (or ``...test_chaos.TestX``) as ``tests/e2e/test_chaos.py``."""
    parts = classname.split(".")
    while parts:
        path = "/".join(parts) + ".py"
        if (ROOT / path).exists():
            return path
        parts.pop()
    raise ValueError(f"no test module for {classname!r}")


def module_seconds(report: Path) -> dict[str, float]:
    """Seconds per test module path in a junit XML ``report``."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):
        seconds[_module_path(case.get("classname", ""))] += float(case.get("time", 0))
    return seconds


def update(reports: list[Path]) -> dict[str, float]:
    """Merge the reports' module times into :data:`FILE`; returns what was written."""
    known: dict[str, float] = json.loads(FILE.read_text()) if FILE.exists() else {}
    for report in reports:
        known.update({m: round(s, 1) for m, s in module_seconds(report).items()})
    ordered = dict(sorted(known.items(), key=lambda kv: (-kv[1], kv[0])))
    FILE.write_text(json.dumps(ordered, indent=1) + "\n")
    return ordered


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m tests.support.durations REPORT.xml [REPORT.xml ...]")
    update([Path(a) for a in sys.argv[1:]])
