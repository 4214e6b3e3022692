"""Where a deferred try parks: the instant (never past the deadline that bounds the try),
the wait it parks on, and the jittered instant of a pushback (pure functions).

A deferral (no provider budget, or the provider pushed back) writes no journal row and is
neither a try nor an attempt: the instance parks at the same (step, scope) its decision
named, and the decider, woken, decides the same try again - or, when a bound ended
meanwhile, what that bound's end decides (a poll's ``on_timeout``, the retry window's final
failure, the flow deadline's failure), on time.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from flowpark.engine.decide.decisions import Execute, Suspend
from flowpark.engine.execute.tries import PushedBack
from flowpark.engine.records import InstanceRecord, StepKind, WakeKind
from flowpark.flows.plan import CapabilityStep, Plan, PollStep

__all__ = [
    "DEFAULT_PUSHBACK",
    "MIN_DEFERRAL",
    "PUSHBACK_JITTER",
    "deferral_bound",
    "deferral_park",
    "pushback_reason",
    "pushback_until",
]

#: A pushback without ``Retry-After`` parks this long.
DEFAULT_PUSHBACK = timedelta(seconds=5)
#: A deferral parks at least this long (a wake that would come at once would spin).
MIN_DEFERRAL = timedelta(milliseconds=10)
#: A pushback's park is lengthened by up to this share of its interval (at most
#: :data:`MAX_PUSHBACK_JITTER`), so instances pushed back together come back spread apart.
PUSHBACK_JITTER = 0.2
MAX_PUSHBACK_JITTER = timedelta(seconds=10)


def deferral_bound(
    plan: Plan, instance: InstanceRecord, decision: Execute, now: datetime
) -> datetime | None:
    """The earliest deadline after ``now`` bounding the try ``decision`` names: the poll's
    budget end, the retry window's end (for a retry of a step), the flow deadline; None when
    none is ahead. A deadline already past bounds nothing more: the decider has acted on it
    (a compensation deferred while the flow unwinds after its deadline parks until its
    provider's instant, not at the passed deadline again and again)."""
    bounds = [decision.budget_ends_at, instance.deadline_at]
    step = plan.steps[decision.step]
    if isinstance(step, CapabilityStep) and decision.kind is StepKind.STEP:
        retry = step.capability.options.retry
        total = retry.total_duration if retry is not None else None
        if total is not None and decision.try_number > 1 and decision.retry_from is not None:
            bounds.append(decision.retry_from + total)
    ahead = [b for b in bounds if b is not None and b > now]
    return min(ahead) if ahead else None


def deferral_park(
    plan: Plan,
    instance: InstanceRecord,
    decision: Execute,
    until: datetime,
    now: datetime,
    kind: WakeKind,
) -> Suspend:
    """The park of a deferred try: at ``until`` (at least :data:`MIN_DEFERRAL` from
    ``now``), capped at :func:`deferral_bound`, on the wait the try belongs to (a poll's
    attempt parks on the poll, accepting its signal; a compensation parks while
    unwinding)."""
    wake = max(until, now + MIN_DEFERRAL)
    bound = deferral_bound(plan, instance, decision, now)
    if bound is not None:
        wake = min(wake, bound)
    accept = None
    step = decision.step
    if decision.poll is not None:
        step = decision.poll
        poll = plan.steps[step]
        if isinstance(poll, PollStep) and poll.signal is not None:
            accept = poll.signal.name
    return Suspend(
        wake,
        step,
        decision.scope,
        kind,
        accept_signal=accept,
        unwinding=decision.kind is StepKind.COMPENSATION,
    )


def pushback_until(until: datetime | None, now: datetime, seed: str) -> datetime:
    """When a pushed-back try comes back: the provider's instant (``now`` +
    :data:`DEFAULT_PUSHBACK` when it named none), lengthened by a jitter drawn from
    ``seed`` (never earlier than the provider asked)."""
    base = until if until is not None and until > now else now + DEFAULT_PUSHBACK
    if until is not None and until <= now:
        base = now + MIN_DEFERRAL
    spread = min((base - now) * PUSHBACK_JITTER, MAX_PUSHBACK_JITTER)
    return base + spread * random.Random(seed).random()


def pushback_reason(pushed: PushedBack, decision: Execute, now: datetime) -> str:
    """Why the provider's effective rate is lowered, for people: ``"429 from ocr.status at
    2026-12-06T10:00:00+00:00; Retry-After 5 s"`` (at most 500 characters): the instant to
    the second, the delay to a tenth of a second (the header's ``2``, read a moment ago, is not
    ``1.99991``)."""
    what = str(pushed.status) if pushed.status is not None else "pushback"
    text = f"{what} from {decision.capability_id} at {now.isoformat(timespec='seconds')}; "
    if pushed.until is None:
        text += f"no Retry-After (backoff {DEFAULT_PUSHBACK.total_seconds():g} s)"
    else:
        text += f"Retry-After {round((pushed.until - now).total_seconds(), 1):g} s"
    if pushed.detail and pushed.detail != f"HTTP {pushed.status}":
        text += f"; {pushed.detail}"
    return text[:500]
