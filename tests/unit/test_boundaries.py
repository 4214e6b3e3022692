"""Architecture pins: the engine and the authoring API import no framework or driver, and
public packages export a sorted, pinned ``__all__``."""

from __future__ import annotations

import ast
import importlib
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


@pytest.mark.parametrize("package", ["app/engine", "app/flows"])
def test_core_imports_no_framework_or_driver(package: str) -> None:
    offenders = []
    for path in (ROOT / package).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [
                f"{path.name}: {n}"
                for n in names
                if n.split(".")[0] in FORBIDDEN
                or n.startswith("app.store")
                or n.startswith("app.api")
            ]
    assert offenders == []


EXPORTS = {
    "app.flows": [
        "Backoff",
        "Bag",
        "Block",
        "Capability",
        "CapabilityOptions",
        "Catalog",
        "Complete",
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
        "to_timedelta",
    ],
    "app.testing": ["FlowHarness", "Scripted", "substitute"],
    "flowpark": [
        "AsyncClient",
        "Backoff",
        "Bag",
        "Block",
        "Capability",
        "CapabilityOptions",
        "Client",
        "Complete",
        "Decision",
        "DefinitionError",
        "Deps",
        "Fail",
        "Finding",
        "Flow",
        "FlowFailure",
        "FlowsUnloadable",
        "GitHubWebhook",
        "HmacWebhook",
        "HttpTrigger",
        "Profile",
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
    ],
    "flowpark.testing": ["FlowHarness", "Scripted", "substitute"],
    "app.runtime.loading": [
        "Deps",
        "FlowSource",
        "check_targets",
        "findings_of",
        "is_path",
        "load_flows",
        "register_flows",
        "resolve_target",
    ],
    "app.ui": ["build_console_router", "install_console"],
    "app.engine": [
        "Claims",
        "Clock",
        "Engine",
        "EngineConfig",
        "InstanceRecord",
        "InstanceState",
        "Journal",
        "JournalWrites",
        "Mailbox",
        "ReadModel",
        "RunOutcome",
        "Snapshot",
        "StartResult",
        "StepRow",
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
        for package in ("app", "samples", "flowpark")
        for path in (ROOT / package).rglob("*.py")
    }
    assert len(sizes) > 50  # the walk found the packages
    assert {p: n for p, n in sizes.items() if n > MAX_MODULE_LINES} == {}
