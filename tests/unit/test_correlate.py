"""The authoring side of correlation keys: ``Correlate``'s provider name, the key's form,
and the catalog's rule that one provider signal has one verifier."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from flowpark import Correlate, Flow, GitHubWebhook, Signal, SignedWebhook
from flowpark.errors import DefinitionError
from flowpark.flows import Catalog
from flowpark.flows.correlation import MAX_CORRELATION_KEY, check_correlation_key


class Run(BaseModel):
    run_id: str


def waiting(name: str, version: str, signal: Signal) -> Flow:
    return Flow(name, version, input=Run).await_signal(signal).returns(lambda bag: None)


@pytest.mark.parametrize("provider", ["ci", "ocr.v2", "a_b-c", "9", "x" * 64])
def test_a_provider_name_is_a_url_segment(provider: str) -> None:
    assert Correlate(provider, key=str).provider == provider


@pytest.mark.parametrize("provider", ["", "CI", "a/b", "-ci", "ci x", "x" * 65, "é"])
def test_a_malformed_provider_name_is_refused(provider: str) -> None:
    with pytest.raises(ValueError, match="provider's name"):
        Correlate(provider, key=str)


def test_a_key_is_a_short_printable_string() -> None:
    assert check_correlation_key("run-17") == "run-17"
    assert check_correlation_key("x" * MAX_CORRELATION_KEY)
    for bad in ("", "x" * (MAX_CORRELATION_KEY + 1), "a\nb", "tab\t", 17):
        with pytest.raises(ValueError):
            check_correlation_key(bad)  # type: ignore[arg-type]


def test_one_provider_signal_has_one_verifier_across_flows_and_versions() -> None:
    github = Signal("ci.done", Run, verify=GitHubWebhook("gh"), correlate=Correlate("ci", str))
    catalog = Catalog()
    catalog.register(waiting("a", "1.0.0", github))
    catalog.register(waiting("a", "1.1.0", github))  # the same verifier: one route
    catalog.register(waiting("b", "1.0.0", Signal("ci.done", Run, correlate=Correlate("cd", str))))
    other = Signal("ci.done", Run, verify=SignedWebhook("ci"), correlate=Correlate("ci", str))
    with pytest.raises(DefinitionError) as refused:
        catalog.register(waiting("c", "1.0.0", other))
    assert [f.code for f in refused.value.findings] == ["signal.correlate_verify_differs"]
    assert "a@1" in refused.value.message
    assert catalog.find("c", "1.0.0") is None
