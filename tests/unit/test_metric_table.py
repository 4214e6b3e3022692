"""docs/observability.md's metric table names every metric a node exposes, with its type,
and nothing else; the provider events of the engine's observer reach their metrics."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import generate_latest

from flowpark.runtime.metrics import Metrics
from flowpark.runtime.observe import NodeObserver
from tests.support.scrape import Scrape

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(r"^\| `(flowpark_[a-z_]+)` \| (counter|gauge|histogram) \|", re.MULTILINE)


def _exposed() -> dict[str, str]:
    names = {}
    for family in Metrics("n").registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        names[name] = family.type
    return names


def test_the_table_lists_every_metric_with_its_type() -> None:
    documented = dict(ROW.findall(DOC.read_text()))
    assert documented == _exposed()


def test_provider_events_count_by_provider() -> None:
    metrics = Metrics("n")
    observer = NodeObserver(metrics)
    observer.providers_declared(["ocr"])
    observer.provider_call("ocr", "ok")
    observer.provider_call("ocr", "ok")
    observer.provider_call("ocr", "pushback")
    observer.provider_deferred("ocr", "budget")
    observer.provider_limit("ocr", 50, 25)
    scrape = Scrape(generate_latest(metrics.registry).decode())
    calls = "flowpark_provider_calls_total"
    assert scrape.value(calls, provider="ocr", outcome="ok") == 2
    assert scrape.value(calls, provider="ocr", outcome="pushback") == 1
    assert scrape.value(calls, provider="ocr", outcome="failed") == 0  # started at zero
    deferrals = "flowpark_provider_deferrals_total"
    assert scrape.value(deferrals, provider="ocr", reason="budget") == 1
    assert scrape.value(deferrals, provider="ocr", reason="pushback") == 0
    assert scrape.value("flowpark_provider_limit", provider="ocr") == 50
    assert scrape.value("flowpark_provider_effective_rate", provider="ocr") == 25
