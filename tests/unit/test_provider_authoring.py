"""Declaring providers: the ``Provider`` value, the definition rules about it, the plan's
providers, ``Retry-After`` parsing and what counts as a pushback."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel

from flowpark import Capability, DefinitionError, Flow, Provider, ProviderPushback, StepContext
from flowpark import retry_after_instant as exported
from flowpark.flows.catalog import Catalog
from flowpark.flows.providers import pushback_of, retry_after_instant
from flowpark.flows.rules import check_flow, compile_flow
from flowpark.runtime.loading import findings_of

NOW = datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC)


class In(BaseModel):
    doc: str = "d"


def cap(cap_id: str, provider: Provider | None) -> Capability:
    class Cap(Capability):
        id = cap_id
        idempotent = True

        async def execute(self, ctx: StepContext) -> None:
            return None

    Cap.provider = provider
    return Cap()


OCR = Provider("ocr", rate_per_second=20, burst=2)


def flow(name: str, *caps: Capability, undo: Capability | None = None) -> Flow:
    f = Flow(name, "1.0.0", input=In)
    for c in caps:
        f = f.step(c)
    if undo is not None:
        f = f.compensate_with(undo)
    return f


def test_the_plan_lists_each_provider_once_compensations_included() -> None:
    billing = Provider("billing.api", rate_per_second=1.5)
    plan, _ = compile_flow(
        flow(
            "p.one", cap("ocr.submit", OCR), cap("ocr.status", OCR), undo=cap("bill.undo", billing)
        )
    )
    assert plan.providers == (OCR, billing)
    assert plan.provider_of("bill.undo") is billing
    assert plan.provider_of("ocr.status") is OCR


def test_a_provider_that_is_no_provider_is_a_definition_error() -> None:
    odd = cap("c.odd", None)
    type(odd).provider = "ocr"  # type: ignore[assignment]
    assert [f.code for f in check_flow(flow("p.odd", odd))] == ["provider.name_invalid"]


@pytest.mark.parametrize("name", ["OCR", "", "a b", "x" * 65, "ocr/1", ".ocr", "-x"])
def test_a_malformed_provider_name_is_a_definition_error(name: str) -> None:
    codes = [f.code for f in check_flow(flow("p.bad", cap("c.one", Provider(name, 1.0))))]
    assert codes == ["provider.name_invalid"]


def test_two_declarations_under_one_name_are_a_definition_error() -> None:
    other = Provider("ocr", rate_per_second=5)
    findings = check_flow(flow("p.two", cap("a.one", OCR), cap("a.two", other)))
    assert [f.code for f in findings] == ["provider.conflicting_declaration"]
    # equal declarations are one provider
    assert check_flow(flow("p.eq", cap("b.one", OCR), cap("b.two", Provider("ocr", 20, 2)))) == []


def test_a_clash_across_the_flows_of_a_node_is_refused() -> None:
    catalog = Catalog()
    catalog.register(flow("f.one", cap("c.one", OCR)))
    with pytest.raises(DefinitionError) as refused:
        catalog.register(flow("f.two", cap("c.two", Provider("ocr", 99))))
    assert "provider.conflicting_declaration" in [f.code for f in refused.value.findings]
    assert catalog.providers() == [OCR]
    checked = findings_of(
        [flow("f.one", cap("c.one", OCR)), flow("f.two", cap("c.two", Provider("ocr", 9)))]
    )
    assert [f.code for f in checked[1][1]] == ["provider.conflicting_declaration"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"rate_per_second": 0},
        {"rate_per_second": 1e300},  # a grant of a tenth of a second of it fits no column
        {"burst": 0},
        {"burst": 10**12},
        {"max_in_flight": 0},
        {"floor_ratio": 0.0},
    ],
)
def test_a_limit_out_of_range_is_refused(kwargs: dict[str, Any]) -> None:
    args: dict[str, Any] = {"name": "p", "rate_per_second": 1.0, **kwargs}
    with pytest.raises(ValueError):
        Provider(**args)


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert exported is retry_after_instant
    assert retry_after_instant("5", NOW) == NOW + timedelta(seconds=5)
    assert retry_after_instant(" 2.5 ", NOW) == NOW + timedelta(seconds=2.5)
    assert retry_after_instant("Sun, 06 Dec 2026 10:01:00 GMT", NOW) == NOW + timedelta(minutes=1)
    assert retry_after_instant("Sun, 06 Dec 2026 09:00:00 GMT", NOW) == NOW  # past: now
    for bad in ("", "soon", "-3", "nan"):
        assert retry_after_instant(bad, NOW) is None


def _status_error(status: int, headers: dict[str, str]) -> Exception:
    error = Exception(f"status {status}")
    error.response = SimpleNamespace(status_code=status, headers=headers)  # type: ignore[attr-defined]
    return error


def test_a_pushback_is_a_429_or_503_or_the_exception() -> None:
    assert pushback_of(_status_error(429, {"Retry-After": "7"}), NOW) == (
        NOW + timedelta(seconds=7),
        429,
        "HTTP 429",
    )
    assert pushback_of(_status_error(503, {}), NOW) == (None, 503, "HTTP 503")
    assert pushback_of(_status_error(500, {"Retry-After": "7"}), NOW) is None
    assert pushback_of(ValueError("x"), NOW) is None
    raised = ProviderPushback(timedelta(seconds=3), status=429, detail="quota")
    assert pushback_of(raised, NOW) == (NOW + timedelta(seconds=3), 429, "quota")
    later = NOW + timedelta(hours=1)
    assert pushback_of(ProviderPushback(later), NOW) == (
        later,
        None,
        "provider pushback (status None)",
    )
    assert pushback_of(ProviderPushback(), NOW) == (None, None, "provider pushback (status None)")
