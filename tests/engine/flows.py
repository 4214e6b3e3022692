"""Small flows for engine tests: every capability is a stand-in scripted per test."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel

from flowpark.flows import (
    Backoff,
    Bag,
    Capability,
    CapabilityOptions,
    Correlate,
    Flow,
    HmacWebhook,
    HttpTrigger,
    Profile,
    Provider,
    RetryPolicy,
    Signal,
    StepContext,
)


class Job(BaseModel):
    job_id: str


class Status(BaseModel):
    done: bool = False
    n: int = 0


class Ready(BaseModel):
    job_id: str


class Order(BaseModel):
    order_id: str = "o-1"


class _Nothing(Capability):
    async def execute(self, ctx: StepContext) -> None:
        return None


class Start(_Nothing):
    id = "t.start"
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Job,)


class Undo(_Nothing):
    id = "t.undo"
    idempotent = True


class Check(_Nothing):
    id = "t.check"
    idempotent = True
    reads = (Job,)
    puts = (Status,)


class CheckWithRetry(_Nothing):
    id = "t.check"
    idempotent = True
    reads = (Job,)
    puts = (Status,)
    options = CapabilityOptions(
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=10),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(minutes=1),
            maximum_tries=4,
        )
    )


class Escalate(_Nothing):
    id = "t.escalate"
    idempotent = True


class After(_Nothing):
    id = "t.after"
    idempotent = True


READY = Signal("t.ready", Ready)
#: the provider's signed webhook, routed by the job id ``t.start`` records for ``t.vendor``
DONE = Signal(
    "t.done",
    Ready,
    verify=HmacWebhook("t.hooks", "X-Signature", id_header="X-Delivery"),
    correlate=Correlate("t.vendor", key=lambda ready: ready.job_id),
)
INTERVAL = Backoff.fixed(timedelta(minutes=1))
BUDGET = timedelta(minutes=10)


def done(bag: Bag) -> bool:
    return bag.get(Status).done


def poll_flow(
    *,
    on_timeout: str = "fail",
    retry: bool = False,
    signal: bool = True,
    deadline: timedelta | None = None,
    version: str = "1.0.0",
    interval: Backoff = INTERVAL,
    budget: timedelta = BUDGET,
    warn_before: Any = None,
    provider_every: float | None = None,
) -> Flow:
    """start (undo) -> poll check until done, every minute, 10 min budget -> after.

    on_timeout: "fail" (escalate + fail), "rejoin" (escalate, then after), "none".
    warn_before: the poll's warning before its budget ends (``budget.warning``).
    provider_every: the check calls the provider ``t.vendor``, one call every so many
        seconds (burst 1): an attempt falling due sooner is deferred.
    """
    check: Capability = CheckWithRetry() if retry else Check()
    if provider_every is not None:
        check = _with_provider(check, Provider("t.vendor", 1 / provider_every, burst=1))
    flow = Flow(
        "t.poll",
        version,
        input=Order,
        trigger=HttpTrigger("POST", "/api/v1/t-poll"),
        deadline=deadline,
    )
    flow.step(Start()).compensate_with(Undo())
    flow.poll_until(
        check,
        until=done,
        interval=interval,
        timeout=budget,
        reads=(Status,),
        warn_before=warn_before,
    )
    if signal:
        flow.or_signal(READY)
    if on_timeout == "fail":
        flow.on_timeout(lambda b: b.step(Escalate()).fail("t.not_done", "never finished"))
    elif on_timeout == "rejoin":
        flow.on_timeout(lambda b: b.step(Escalate()))
    flow.step(After())
    flow.returns(lambda bag: {"done": (bag.find(Status) or Status()).done})
    return flow


def _with_provider(capability: Capability, provider: Provider) -> Capability:
    """``capability`` (a fresh one of its class) calling ``provider``."""
    capability.provider = provider  # type: ignore[misc]
    return capability


def correlated_flow() -> Flow:
    """start (it records the job id for ``t.vendor``) -> await the provider's signed
    webhook ``t.done`` (one hour), found by that id -> after."""
    flow = Flow("t.correlated", "1.0.0", input=Order)
    flow.step(Start())
    flow.await_signal(DONE, timeout=timedelta(hours=1))
    flow.step(After())
    flow.returns(lambda bag: bag.get(Ready).model_dump())
    return flow


def await_flow() -> Flow:
    flow = Flow("t.await", "1.0.0", input=Order)
    flow.step(Start()).compensate_with(Undo())
    flow.await_signal(READY, timeout=timedelta(hours=1))
    flow.on_timeout(lambda b: b.fail("t.no_callback", "no callback"))
    flow.step(After())
    flow.returns(lambda bag: bag.get(Ready).model_dump())
    return flow


def ephemeral_flow() -> Flow:
    flow = Flow(
        "t.quick",
        "1.0.0",
        input=Order,
        profile=Profile.EPHEMERAL,
        trigger=HttpTrigger("POST", "/api/v1/t-quick", idempotent=False),
    )
    flow.step(Start()).step(After())
    flow.returns(lambda bag: {"job": bag.get(Job).job_id}, reads=(Job,))
    return flow
