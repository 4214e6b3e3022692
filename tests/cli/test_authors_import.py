"""``import flowpark`` in a fresh interpreter (what a flows module does) loads no web
framework, HTTP client or database driver."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.test_boundaries import FORBIDDEN, ROOT


def test_the_authors_package_imports_no_framework_or_driver() -> None:
    """``import flowpark`` (what a flows module does) loads no web framework, HTTP client or
    database driver; only ``flowpark.testing`` brings the store."""
    probe = (
        "import sys, flowpark\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
