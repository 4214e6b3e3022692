"""The examples of the docs, run: if one of these breaks, the docs are wrong.

The harness test of ``docs/testing-flows.md`` is the first test below, verbatim (a test checks
that the page shows exactly its text); the README's flow example is executed from the README.
"""

import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark.flows import Flow
from flowpark.samples.document_processing import (
    ExtractedFields,
    OcrClient,
    OcrJob,
    OcrStatus,
    build_document_flow,
)
from flowpark.testing import FlowHarness, Scripted
from tests.support.guide import guide_blocks, write_files


async def test_a_document_waits_in_one_row_then_completes() -> None:
    flow = build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))
    status = Scripted(
        OcrStatus(job_id="j", status="pending"),
        OcrStatus(job_id="j", status="completed", text="a: 1"),
    )
    async with FlowHarness.open(
        [flow],
        substitutes={
            "ocr.upload": Scripted(OcrJob(job_id="j")),
            "ocr.status": status,
            "document.extract": Scripted(ExtractedFields(values={"a": "1"})),
        },
    ) as h:
        started = await h.start("document.process", {"documentId": "d1", "pages": 1})
        assert started.instance.state == "suspended"
        assert not await h.holds_lease(started.instance.id)  # waiting holds nothing
        await h.advance_to_next_wake(started.instance.id)  # attempt 1: completed
        done = await h.instance(started.instance.id)
        assert done.state == "completed"
        assert done.result == {"documentId": "d1", "fieldCount": 1}
        assert status.calls == 2  # one call per attempt


ROOT = Path(__file__).resolve().parents[2]


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_the_testing_page_shows_the_harness_test_verbatim() -> None:
    block = _python_blocks(ROOT / "docs" / "testing-flows.md")[0]
    this_test = inspect.getsource(test_a_document_waits_in_one_row_then_completes)
    assert this_test in block
    assert "from flowpark.testing import FlowHarness, Scripted" in block


async def test_the_testing_pages_review_and_business_failure_tests_pass() -> None:
    blocks = _python_blocks(ROOT / "docs" / "testing-flows.md")
    assert len(blocks) == 3
    (block,) = [b for b in blocks if "request_review" in b or "never_read" in b]
    namespace: dict[str, Any] = {"__name__": "testing_page"}
    exec(compile(block, "docs/testing-flows.md", "exec"), namespace)
    tests = [v for k, v in namespace.items() if k.startswith("test_")]
    assert len(tests) == 2
    for test in tests:
        await test()


class _FakeCi:
    """A ``ci`` client for the README's ``build_flow``: answers ``running`` twice, then
    ``passed``."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def state(self, build_id: str) -> str:
        self.asked.append(build_id)
        return "passed" if len(self.asked) > 2 else "running"


async def test_the_readme_flow_parks_between_checks_then_returns_the_build_state() -> None:
    block = _python_blocks(ROOT / "README.md")[0]  # the second is the client's
    assert len(block.strip().splitlines()) <= 55
    ci = _FakeCi()
    # the block defines every name it uses: nothing is given to it
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(block, "README.md", "exec"), namespace)
    readme_flow = namespace["build_flow"](ci)
    assert isinstance(readme_flow, Flow), readme_flow
    async with FlowHarness.open([readme_flow]) as h:
        started = await h.start("build.await", {"build_id": "b-7"})
        assert started.instance.state == "suspended"
        assert not await h.holds_lease(started.instance.id)
        await h.advance_to_next_wake(started.instance.id)
        assert (await h.instance(started.instance.id)).state == "suspended"
        await h.advance_to_next_wake(started.instance.id)
        done = await h.instance(started.instance.id)
        assert done.state == "completed"
        assert done.result == {"state": "passed"}
        assert ci.asked == ["b-7", "b-7", "b-7"]


@pytest.fixture
def guide_flows(tmp_path: Path) -> Iterator[Path]:
    """``docs/writing-flows.md``'s files, written out; its ``flows`` folder on the path."""
    write_files(tmp_path, guide_blocks())
    modules, path = set(sys.modules), list(sys.path)
    sys.path.insert(0, str(tmp_path / "flows"))
    yield tmp_path / "flows"
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.path[:] = path


async def test_the_testing_pages_provider_webhook_tests_pass(guide_flows: Path) -> None:
    """The page's webhook block, beside the guide's ``ci_build``: a signed GitHub delivery
    ends the CI-wait; with a start step that records no run id it finds no instance."""
    (block,) = [b for b in _python_blocks(ROOT / "docs" / "testing-flows.md") if "ci_build" in b]
    namespace: dict[str, Any] = {"__name__": "testing_page_webhooks"}
    exec(compile(block, "docs/testing-flows.md", "exec"), namespace)
    tests = {k: v for k, v in namespace.items() if k.startswith("test_")}
    assert sorted(tests) == [
        "test_a_start_step_that_forgets_the_run_id_leaves_the_webhook_no_instance",
        "test_the_ci_webhook_finds_the_build_by_its_run_id_and_ends_the_wait",
    ]
    for test in tests.values():
        await test()
