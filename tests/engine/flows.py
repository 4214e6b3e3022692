"""Small flows for engine tests: every capability is a stand-in scripted per test."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

from pydantic import BaseModel

from flowpark.flows import (
    Backoff,
    Bag,
    Capability,
    CapabilityOptions,
    Flow,
    HttpTrigger,
    Profile,
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
) -> Flow:
    """start (undo) -> poll check until done, every minute, 10 min budget -> after.

    on_timeout: "fail" (escalate + fail), "rejoin" (escalate, then after), "none".
    """
    flow = Flow(
        "t.poll",
        version,
        input=Order,
        trigger=HttpTrigger("POST", "/api/v1/t-poll"),
        deadline=deadline,
    )
    flow.step(Start()).compensate_with(Undo())
    flow.poll_until(
        CheckWithRetry() if retry else Check(),
        until=done,
        interval=interval,
        timeout=budget,
        reads=(Status,),
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
