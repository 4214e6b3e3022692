"""``docs/writing-flows.md`` as written: its flows module loads (``flows check``), and its
harness tests pass on the virtual clock."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.runtime.loading import check_targets

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "writing-flows.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), flags=re.S)


@pytest.fixture
def guide_folder(tmp_path: Path) -> Iterator[Path]:
    """The guide's ``flows/ci_build.py`` and ``tests/test_ci_build.py``, written out."""
    module, tests = _python_blocks()
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "ci_build.py").write_text(module)
    (tmp_path / "test_ci_build.py").write_text(tests)
    modules, path = set(sys.modules), list(sys.path)
    yield tmp_path
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def test_the_guides_flows_module_checks_clean(guide_folder: Path) -> None:
    lines: list[str] = []
    assert check_targets([str(guide_folder / "flows")], lines.append) == 0
    assert lines == ["ok: ci.build@1.0.0"]


async def test_the_guides_harness_tests_pass(guide_folder: Path) -> None:
    sys.path.insert(0, str(guide_folder / "flows"))
    namespace: dict[str, object] = {"__name__": "test_ci_build"}
    source = (guide_folder / "test_ci_build.py").read_text()
    exec(compile(source, "docs/writing-flows.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        await test()  # type: ignore[operator]
