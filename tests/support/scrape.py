"""Reading a Prometheus text exposition in tests (prometheus-client's own parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape"]


class Scrape:
    """One scrape: samples by name and labels.

    Args:
        text: the body of ``GET /metrics``.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` whose labels include ``labels`` (0.0 when
        none matches)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def series(self, name: str) -> list[dict[str, str]]:
        """The label sets of the samples called ``name``."""
        return [dict(s.labels) for s in self.samples if s.name == name]

    def histograms(self) -> list[str]:
        """The names of the histogram families."""
        return sorted(n for n, f in self.families.items() if f.type == "histogram")
