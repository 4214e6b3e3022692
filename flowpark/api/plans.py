"""JSON of a compiled plan (``GET /api/v1/flows/{name}``): its steps as data, for the CLI's
tree and any other reader. Durations are seconds; targets are step indexes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from flowpark.api.models import PlanView
from flowpark.flows.durations import Backoff, RetryPolicy
from flowpark.flows.plan import (
    AwaitSignalStep,
    CapabilityStep,
    EmitStep,
    FailStep,
    Plan,
    PollStep,
    Step,
)

__all__ = ["plan_view"]


def _seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def _backoff(backoff: Backoff) -> dict[str, Any]:
    return {
        "initialSeconds": _seconds(backoff.initial),
        "maximumSeconds": _seconds(backoff.maximum),
        "multiplier": backoff.multiplier,
        "jitter": backoff.jitter,
    }


def _retry(policy: RetryPolicy | None) -> dict[str, Any] | None:
    if policy is None:
        return None
    return {
        "initialIntervalSeconds": _seconds(policy.initial_interval),
        "backoffCoefficient": policy.backoff_coefficient,
        "maximumIntervalSeconds": _seconds(policy.maximum_interval),
        "maximumTries": policy.maximum_tries,
        "totalDurationSeconds": _seconds(policy.total_duration),
    }


def _step(step: Step) -> dict[str, Any]:
    if isinstance(step, CapabilityStep):
        return {
            "index": step.index,
            "kind": "capability",
            "capabilityId": step.capability.id,
            "idempotent": step.capability.idempotent,
            "retry": _retry(step.capability.options.retry),
            "compensation": step.compensation.id if step.compensation is not None else None,
            "next": step.next,
            "onFailure": step.failure_target,
            "pollIndex": step.poll_index,
        }
    if isinstance(step, PollStep):
        return {
            "index": step.index,
            "kind": "poll",
            "body": step.body_index,
            "interval": _backoff(step.interval),
            "timeoutSeconds": _seconds(step.timeout),
            "signal": step.signal.name if step.signal is not None else None,
            "satisfied": step.satisfied_target,
            "onTimeout": step.timeout_target,
            "onWarning": step.warning_target,
        }
    if isinstance(step, AwaitSignalStep):
        return {
            "index": step.index,
            "kind": "await",
            "signal": step.signal.name,
            "timeoutSeconds": _seconds(step.timeout),
            "satisfied": step.satisfied_target,
            "onTimeout": step.timeout_target,
            "onWarning": step.warning_target,
        }
    if isinstance(step, FailStep):
        return {"index": step.index, "kind": "fail", "code": step.code, "message": step.message}
    assert isinstance(step, EmitStep)
    return {"index": step.index, "kind": "emit", "name": step.name, "next": step.next}


def plan_view(plan: Plan) -> PlanView:
    """The plan: ``name``, ``version``, ``profile``, ``route``, ``deadlineSeconds``,
    ``signals``, ``streams``, ``providers``, ``end`` and ``steps``; each step has ``index``
    and ``kind`` (``capability``, ``poll``, ``await``, ``fail``, ``emit``) and its own fields;
    ``end`` is the index meaning "the flow completes"."""
    return PlanView(
        name=plan.name,
        version=plan.version,
        profile=plan.profile,
        route=plan.trigger.route if plan.trigger is not None else None,
        deadline_seconds=_seconds(plan.deadline),
        signals=sorted(plan.signals),
        streams=sorted(plan.streams),
        providers=[provider.name for provider in plan.providers],
        end=plan.end,
        steps=[_step(n) for n in plan.steps],
    )
