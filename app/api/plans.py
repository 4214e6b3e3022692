"""JSON of a compiled plan (``GET /api/v1/flows/{name}``): its nodes as data, for the CLI's
tree and any other reader. Durations are seconds; targets are node indexes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from app.flows.durations import Backoff, RetryPolicy
from app.flows.plan import AwaitSignalNode, EmitNode, FailNode, Node, Plan, PollNode, StepNode

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


def _node(node: Node) -> dict[str, Any]:
    if isinstance(node, StepNode):
        return {
            "index": node.index,
            "kind": "step",
            "capabilityId": node.capability.id,
            "idempotent": node.capability.idempotent,
            "retry": _retry(node.capability.options.retry),
            "compensation": node.compensation.id if node.compensation is not None else None,
            "next": node.next,
            "onFailure": node.failure_target,
            "pollIndex": node.poll_index,
        }
    if isinstance(node, PollNode):
        return {
            "index": node.index,
            "kind": "poll",
            "body": node.body_index,
            "interval": _backoff(node.interval),
            "timeoutSeconds": _seconds(node.timeout),
            "signal": node.signal.name if node.signal is not None else None,
            "satisfied": node.satisfied_target,
            "onTimeout": node.timeout_target,
        }
    if isinstance(node, AwaitSignalNode):
        return {
            "index": node.index,
            "kind": "await",
            "signal": node.signal.name,
            "timeoutSeconds": _seconds(node.timeout),
            "satisfied": node.satisfied_target,
            "onTimeout": node.timeout_target,
        }
    if isinstance(node, FailNode):
        return {"index": node.index, "kind": "fail", "code": node.code, "message": node.message}
    assert isinstance(node, EmitNode)
    return {"index": node.index, "kind": "emit", "name": node.name, "next": node.next}


def plan_view(plan: Plan) -> dict[str, Any]:
    """``{"name", "version", "profile", "route", "deadlineSeconds", "signals", "streams",
    "end", "nodes": [...]}``; each node has ``index`` and ``kind`` (``step``, ``poll``,
    ``await``, ``fail``, ``emit``) and its own fields; ``end`` is the index meaning "the
    flow completes"."""
    return {
        "name": plan.name,
        "version": plan.version,
        "profile": str(plan.profile),
        "route": plan.trigger.route if plan.trigger is not None else None,
        "deadlineSeconds": _seconds(plan.deadline),
        "signals": sorted(plan.signals),
        "streams": sorted(plan.streams),
        "end": plan.end,
        "nodes": [_node(n) for n in plan.nodes],
    }
