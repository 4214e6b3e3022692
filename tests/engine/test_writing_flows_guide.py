"""``docs/writing-flows.md`` as written: its flows folder (``flows/ci_build.py`` beside the
fake CI) loads and checks clean (``flows check``), and its harness tests pass on the virtual
clock. ``tests/e2e/test_writing_flows_served.py`` runs its commands against a served node."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from flowpark.runtime.loading import check_targets
from tests.support.guide import guide_blocks, write_files


@pytest.fixture
def guide_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The guide's files, written out as the reader writes them."""
    write_files(tmp_path, guide_blocks())
    for knob in ("CI_BASE_URL", "CI_BUILD_BUDGET", "CI_POLL_FIRST"):
        monkeypatch.delenv(knob, raising=False)
    modules, path = set(sys.modules), list(sys.path)
    yield tmp_path
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


def test_every_block_of_the_page_is_marked_and_named() -> None:
    blocks = guide_blocks()
    files = sorted(name for name, b in blocks.items() if b.kind == "file")
    assert files == [
        "flows/ci_build.py",
        "flows/fake_ci.py",
        "pytest.ini",
        "tests/test_ci_build.py",
    ]
    assert {"check", "serve", "pass", "timeout-serve", "timeout-start", "timeout-read"} <= {
        name for name, b in blocks.items() if b.kind == "shell"
    }


def test_the_guides_flows_folder_checks_clean(guide_folder: Path) -> None:
    lines: list[str] = []
    assert check_targets([str(guide_folder / "flows")], lines.append) == 0
    assert lines == ["ok: ci.build@1.0.0"]


async def test_the_guides_harness_tests_pass(guide_folder: Path) -> None:
    sys.path.insert(0, str(guide_folder / "flows"))
    namespace: dict[str, object] = {"__name__": "test_ci_build"}
    source = (guide_folder / "tests" / "test_ci_build.py").read_text()
    exec(compile(source, "docs/writing-flows.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        await test()  # type: ignore[operator]
