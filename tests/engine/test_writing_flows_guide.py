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


async def test_the_guides_webhook_finds_its_instance_by_the_run_id_not_the_commit(
    guide_folder: Path,
) -> None:
    import httpx

    from flowpark.testing import FlowHarness

    sys.path.insert(0, str(guide_folder / "flows"))
    import ci_build

    runs = iter(("r-1", "r-2"))

    def ci(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(201, json={"id": next(runs)})
        return httpx.Response(200, json={"state": "running"})

    http = httpx.AsyncClient(transport=httpx.MockTransport(ci))
    signal = ci_build.BUILD_FINISHED
    assert signal.correlate is not None and signal.correlate.provider == "ci"
    assert signal.instance_key is None  # a commit names no instance
    async with FlowHarness.open([ci_build.build_flow(ci_build.CiClient(http, "http://ci"))]) as h:
        first = (await h.start("ci.build", {"repo": "shop", "commit": "abc"})).instance
        rerun = (await h.start("ci.build", {"repo": "shop", "commit": "abc"})).instance
        held = [
            [(c.provider, c.key) for c in await h.store.correlations.held(i.id)]
            for i in (first, rerun)
        ]
        assert held == [[("ci", "r-1")], [("ci", "r-2")]]
        # the re-run's webhook (its own run id) is no match for the first instance's wait
        answer = await h.signal(first.id, "ci.finished", {"build": "r-2", "state": "passed"})
        assert answer.matched is False and answer.state == "suspended"
    await http.aclose()
