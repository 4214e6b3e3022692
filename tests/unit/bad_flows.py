"""One flow per definition rule, each broken in exactly that way (used by the rules tests
and by `flowpark flows check`); ``flow.duplicate_version`` takes two (DUPLICATE_VERSION)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel

from flowpark.flows import (
    Backoff,
    Capability,
    CapabilityOptions,
    Flow,
    HttpTrigger,
    Profile,
    RetryPolicy,
    Signal,
    StepContext,
)


class In(BaseModel):
    x: int = 0


class Seen(BaseModel):
    ok: bool = False


class Other(BaseModel):
    y: int = 0


class _Cap(Capability):
    async def execute(self, ctx: StepContext) -> None:
        return None


class Good(_Cap):
    id = "c.good"
    idempotent = True
    puts = (Seen,)


class NotIdem(_Cap):
    id = "c.not_idempotent"
    puts = (Seen,)


class Undo(_Cap):
    id = "c.undo"
    idempotent = True


class Dup(_Cap):
    id = "c.good"  # same id as Good, different class


class ReadsOther(_Cap):
    id = "c.reads_other"
    reads = (Other,)


class Heart(_Cap):
    id = "c.heart"
    options = CapabilityOptions(
        heartbeat_timeout=timedelta(seconds=30),
        poll_interval=timedelta(seconds=15),
        call_timeout=timedelta(seconds=10),
    )


class Forever(_Cap):
    id = "c.forever"
    options = CapabilityOptions(retry=RetryPolicy())


class NotAsync(Capability):
    id = "c.not_async"

    def execute(self, ctx: StepContext) -> None:  # type: ignore[override]  # the mistake
        return None


FIVE = Backoff.fixed("PT5S")


def _f(name: str, **kw: object) -> Flow:
    return Flow(name, "1.0.0", input=In, **kw)  # type: ignore[arg-type]


def _seen(bag: object) -> bool:
    return True


BAD = {
    "poll.requires_durable": _f("bad.ephemeral_poll", profile=Profile.EPHEMERAL)
    .poll_until(Good(), until=_seen, interval=FIVE, timeout="PT1M")
    .fail("x"),
    "wait.requires_durable": _f("bad.ephemeral_wait", profile=Profile.EPHEMERAL).await_signal(
        Signal("s.x", Other)
    ),
    "poll.body_not_single_capability": _f("bad.body").poll_until(
        [Good(), Good()],  # type: ignore[arg-type]
        until=_seen,
        interval=FIVE,
        timeout="PT1M",
    ),
    "poll.body_not_idempotent": _f("bad.not_idempotent")
    .poll_until(NotIdem(), until=_seen, interval=FIVE, timeout="PT1M")
    .step(Undo()),
    "poll.body_has_compensation": _f("bad.compensated_poll")
    .poll_until(Good(), until=_seen, interval=FIVE, timeout="PT1M")
    .compensate_with(Undo())
    .step(Undo()),
    "poll.first_interval_exceeds_timeout": _f("warn.interval")
    .poll_until(
        Good(),
        until=_seen,
        interval=Backoff.exponential("PT10M", "PT30M"),
        timeout=timedelta(minutes=5),
    )
    .step(Undo()),
    "capability.duplicate_id": _f("bad.duplicate").step(Good()).step(Dup()),
    "value.read_before_put": _f("bad.read").step(ReadsOther()),
    "on_timeout.falls_through_to_end": _f("warn.fallthrough")
    .poll_until(Good(), until=_seen, interval=FIVE, timeout="PT1M")
    .on_timeout(lambda b: b.step(Undo())),
    "step.unreachable": _f("bad.unreachable").fail("x.y").step(Undo()),
    "builder.modifier_misplaced": _f("bad.modifier").fail("x.y").compensate_with(Undo()),
    "signal.conflicting_model": _f("bad.signal")
    .await_signal(Signal("s.a", Other))
    .await_signal(Signal("s.a", Seen)),
    "heartbeat.window_too_small": _f("warn.heartbeat").step(Heart()),
    "failure_route.unbounded_retry": _f("warn.route")
    .step(Forever())
    .on_failure(lambda b: b.fail("x.y")),
    "flow.deadline_not_positive": _f("bad.deadline", deadline=timedelta(0)).step(Undo()),
    "flow.name_invalid": _f("bad.name\nwith a line feed").step(Undo()),
    "trigger.route_invalid": _f("bad.route", trigger=HttpTrigger("POST", "no-slash")).step(Undo()),
    "capability.execute_not_async": _f("bad.not_async").step(NotAsync()),
    "poll.timeout_exceeds_deadline": _f("warn.past_deadline", deadline=timedelta(minutes=30))
    .poll_until(Good(), until=_seen, interval=FIVE, timeout="PT1H")
    .step(Undo()),
}

WARNINGS = {
    "poll.first_interval_exceeds_timeout",
    "on_timeout.falls_through_to_end",
    "heartbeat.window_too_small",
    "failure_route.unbounded_retry",
    "poll.timeout_exceeds_deadline",
}

#: ``flow.duplicate_version``: two flows, each valid alone, with one name and version (a
#: rule of ``flowpark flows check``, which sees every flow of the module).
DUPLICATE_VERSION = (_f("bad.twice").step(Undo()), _f("bad.twice").step(Good()))


def flows() -> list[Flow]:
    return [*BAD.values(), *DUPLICATE_VERSION]
