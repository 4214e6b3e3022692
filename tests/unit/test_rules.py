"""Definition rules: each bad shape gives its stable code, naming the flow and the node."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from flowpark.errors import DefinitionError
from flowpark.flows import Catalog, Severity, check_flow, compile_flow
from flowpark.flows.plan import CapabilityStep, Plan
from flowpark.runtime.loading import check_targets
from flowpark.samples.document_processing import OcrClient, build_document_flow
from tests.unit.bad_flows import BAD, DUPLICATE_VERSION, WARNINGS


@pytest.mark.parametrize("code", sorted(BAD))
def test_each_bad_shape_reports_its_rule_code(code: str) -> None:
    flow = BAD[code]
    findings = check_flow(flow)
    matching = [f for f in findings if f.code == code]
    assert matching, findings
    expected = Severity.WARNING if code in WARNINGS else Severity.ERROR
    assert matching[0].severity is expected
    assert flow.name in matching[0].flow and matching[0].step


@pytest.mark.parametrize("code", sorted(set(BAD) - WARNINGS))
def test_registration_refuses_a_flow_with_an_error(code: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        Catalog().register(BAD[code])
    assert caught.value.code == "definition_invalid"
    assert code in str(caught.value) and BAD[code].name in str(caught.value)


def test_warnings_do_not_stop_registration() -> None:
    catalog = Catalog()
    findings = catalog.register(BAD["poll.first_interval_exceeds_timeout"])
    assert [f.code for f in findings] == ["poll.first_interval_exceeds_timeout"]


def test_the_sample_compiles_with_every_target_pointing_forward() -> None:
    plan, findings = compile_flow(build_document_flow(OcrClient(httpx.AsyncClient(), "x")))
    assert findings == []
    assert [n.label for n in plan.steps] == [
        "ocr.upload",
        "poll",
        "ocr.status",
        "document.escalate",
        "fail document.not_read_in_time",
        "document.extract",
        "emit document.processed",
    ]
    assert plan.steps[1].satisfied_target == 5  # type: ignore[union-attr]
    first = plan.steps[0]
    assert isinstance(first, CapabilityStep)
    with pytest.raises(ValueError, match="strictly forward"):
        Plan(
            name="p",
            version="1",
            input_model=plan.input_model,
            output_model=None,
            profile=plan.profile,
            trigger=None,
            deadline=None,
            steps=(CapabilityStep(0, first.capability, next=0),),
        )


def test_flows_check_reports_a_duplicate_version_that_registration_refuses(tmp_path: Path) -> None:
    first, second = DUPLICATE_VERSION
    assert check_flow(first) == [] and check_flow(second) == []  # each is valid alone
    catalog = Catalog()
    catalog.register(first)
    with pytest.raises(ValueError, match="already registered"):
        catalog.register(second)

    module = tmp_path / "twice.py"
    module.write_text(
        "from tests.unit.bad_flows import DUPLICATE_VERSION\n\n"
        "def flows():\n    return list(DUPLICATE_VERSION)\n"
    )
    lines: list[str] = []
    assert check_targets([str(module)], lines.append) == 1
    assert lines == [
        "ok: bad.twice@1.0.0",
        "error: flow.duplicate_version: bad.twice@1.0.0 [flow]: another flow has "
        "the same name and version",
    ]


def test_flows_check_counts_a_flow_found_twice_once(tmp_path: Path) -> None:
    module = tmp_path / "once.py"
    module.write_text(
        "from tests.unit.bad_flows import DUPLICATE_VERSION\n\n"
        "FLOW = DUPLICATE_VERSION[0]\n\n"
        "def flows():\n    return [FLOW]\n"
    )
    lines: list[str] = []
    assert check_targets([str(module)], lines.append) == 0
    assert lines == ["ok: bad.twice@1.0.0"]


def test_a_signals_payload_is_a_put_of_the_wait_that_takes_it() -> None:
    from datetime import timedelta

    from pydantic import BaseModel

    from flowpark.flows import Backoff, Capability, Flow, Signal, StepContext

    class Order(BaseModel):
        order_id: str

    class Approved(BaseModel):
        by: str

    class Status(BaseModel):
        done: bool

    class Check(Capability):
        id = "s.check"
        idempotent = True
        puts = (Status,)

        async def execute(self, ctx: StepContext) -> None:
            ctx.put(Status(done=False))

    class Ship(Capability):
        id = "s.ship"
        reads = (Approved,)

        async def execute(self, ctx: StepContext) -> None:
            ctx.get(Approved)

    approved = Signal("s.approved", Approved)

    def codes(flow: Flow) -> list[str]:
        return [f.code for f in check_flow(flow)]

    waits = Flow("s.await", "1.0.0", input=Order).await_signal(approved).step(Ship())
    assert codes(waits) == []
    fails = Flow("s.await", "1.1.0", input=Order).await_signal(approved, timeout="PT1H")
    fails.on_timeout(lambda b: b.fail("s.late", "no approval")).step(Ship())
    assert codes(fails) == []
    polls = Flow("s.poll", "1.0.0", input=Order).poll_until(
        Check(),
        until=lambda bag: bag.get(Status).done,
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(hours=1),
    )
    assert codes(polls.or_signal(approved).step(Ship())) == []
    # a timeout path that rejoins the flow runs without the payload: still refused
    rejoins = Flow("s.await", "2.0.0", input=Order).await_signal(approved, timeout="PT1H")
    rejoins.on_timeout(lambda b: b.step(Check())).step(Ship())
    assert codes(rejoins) == ["value.read_before_put"]
    # ... and so is a read of it before the wait
    early = Flow("s.await", "3.0.0", input=Order).step(Ship()).await_signal(approved)
    assert codes(early) == ["value.read_before_put"]
