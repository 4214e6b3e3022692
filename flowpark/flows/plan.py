"""Compiled plans: the immutable step lists the engine runs.

Every target in a plan points strictly forward (a test and :func:`Plan.__post_init__` pin
it): a poll re-enters its body, the step right after it, once per attempt, and the number
of attempts is bounded by the poll's budget, so every run of a plan ends.

Layout conventions (implied, not stored):
- a poll's body is at ``index + 1``; its ``on_timeout`` block starts at ``index + 2``;
- an await-signal's ``on_timeout`` block starts at ``index + 1``;
- a step's ``on_failure`` block starts at ``index + 1``; success continues at ``next``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from flowpark.flows.capability import Bag, Capability, Signal, SignalMatch, Stream
from flowpark.flows.durations import Backoff
from flowpark.flows.providers import Provider

__all__ = [
    "AwaitSignalStep",
    "EmitStep",
    "FailStep",
    "HttpTrigger",
    "Step",
    "Plan",
    "PollStep",
    "Profile",
    "CapabilityStep",
]


class Profile(StrEnum):
    """``durable``: journaled, can wait. ``ephemeral``: runs inside the request, no rows."""

    DURABLE = "durable"
    EPHEMERAL = "ephemeral"


@dataclass(frozen=True)
class HttpTrigger:
    """Start a flow over HTTP.

    Attributes:
        method: HTTP method (``POST``).
        route: path, e.g. ``/api/v1/documents``; signal routes hang below it.
        idempotent: when True an ``Idempotency-Key`` header is required.
    """

    method: str
    route: str
    idempotent: bool = True


@dataclass(frozen=True)
class CapabilityStep:
    """Run one capability.

    Attributes:
        next: where success goes (``None`` for a poll's body: the poll decides).
        failure_target: start of the ``on_failure`` block, or None (failure fails the flow).
        poll_index: the owning poll's index when this is a poll body.
    """

    index: int
    capability: Capability
    compensation: Capability | None = None
    next: int | None = None
    failure_target: int | None = None
    poll_index: int | None = None

    @property
    def label(self) -> str:
        """A short human name of the step (logs, findings, the flow graph)."""
        return self.capability.id


@dataclass(frozen=True)
class PollStep:
    """Run the body (at ``index + 1``) until ``until`` holds, parking between attempts.

    Attributes:
        until: predicate over the state bag.
        interval: schedule of waits between attempts.
        timeout: the budget, from attempt 0's start instant.
        satisfied_target: where control goes when satisfied (or a signal ended the wait).
        timeout_target: start of the ``on_timeout`` block; None = fail with
            ``flow.poll_not_satisfied``.
        signal: a signal that ends the wait early, or None.
        match: which signals belong to the wait (``match(bag, payload)``), or None for all.
        warn_before: how long before the budget's end its warning comes, or None.
        warning_target: the capability step run once at the warning (``on_warning``, at
            ``index + 2``), or None.
    """

    index: int
    until: Callable[[Bag], bool]
    interval: Backoff
    timeout: timedelta
    satisfied_target: int
    timeout_target: int | None = None
    signal: Signal | None = None
    match: SignalMatch | None = None
    warn_before: timedelta | None = None
    warning_target: int | None = None

    @property
    def body_index(self) -> int:
        """The plan index of the poll's body capability."""
        return self.index + 1

    @property
    def label(self) -> str:
        """A short human name of the step (logs, findings, the flow graph)."""
        return "poll"


@dataclass(frozen=True)
class AwaitSignalStep:
    """Park until ``signal`` arrives, or until ``timeout`` (from reaching the step) runs out.

    The arrival instant is recorded by the park; the budget end is stored as ``wake_at``.
    ``match`` (``match(bag, payload)``, or None for all) says which signals belong to it;
    ``warn_before``: how long before the timeout's end its warning comes, or None;
    ``warning_target``: the capability step run once at the warning (``on_warning``, at
    ``index + 1``), or None.
    """

    index: int
    signal: Signal
    timeout: timedelta | None
    satisfied_target: int
    timeout_target: int | None = None
    match: SignalMatch | None = None
    warn_before: timedelta | None = None
    warning_target: int | None = None

    @property
    def label(self) -> str:
        """A short human name of the step (logs, findings, the flow graph)."""
        return f"await {self.signal.name}"


@dataclass(frozen=True)
class FailStep:
    """End the flow as failed with ``code``; compensations unwind."""

    index: int
    code: str
    message: str

    @property
    def label(self) -> str:
        """A short human name of the step (logs, findings, the flow graph)."""
        return f"fail {self.code}"


@dataclass(frozen=True)
class EmitStep:
    """Write a domain event to the outbox (one journal row, same transaction)."""

    index: int
    name: str
    factory: Callable[[Bag], BaseModel | dict[str, Any]]
    next: int = 0

    @property
    def label(self) -> str:
        """A short human name of the step (logs, findings, the flow graph)."""
        return f"emit {self.name}"


Step = CapabilityStep | PollStep | AwaitSignalStep | FailStep | EmitStep


@dataclass(frozen=True)
class Plan:
    """A compiled flow: immutable, registered by (name, version).

    Attributes:
        name / version: identity, e.g. ``document.process`` / ``1.0.0``.
        input_model / output_model: pydantic models of the input and the result.
        profile: durable or ephemeral.
        trigger: HTTP trigger, or None.
        deadline: bound on the whole instance from its start, or None.
        steps: the step list; index == position.
        returns: builds the result from the bag at the end, or None (result is None).
        signals: every signal the flow can take, by name.
        streams: streams its capabilities declare, by name.
        providers: the providers its capabilities (compensations included) call, by name.
    """

    name: str
    version: str
    input_model: type[BaseModel]
    output_model: type[BaseModel] | None
    profile: Profile
    trigger: HttpTrigger | None
    deadline: timedelta | None
    steps: tuple[Step, ...]
    returns: Callable[[Bag], Any] | None = None
    signals: dict[str, Signal] = field(default_factory=dict)
    streams: dict[str, Stream] = field(default_factory=dict)
    #: the input field (JSON name) that names an instance to people, or None
    display_key: str | None = None
    providers: tuple[Provider, ...] = ()

    def __post_init__(self) -> None:
        for step in self.steps:
            for target in _targets(step):
                if target <= step.index:
                    raise ValueError(
                        f"{self.name}: step {step.index} targets {target}: targets must point "
                        "strictly forward"
                    )

    @property
    def key(self) -> tuple[str, str]:
        """``(name, version)``: the catalog key."""
        return (self.name, self.version)

    @property
    def end(self) -> int:
        """The index one past the last step: reaching it completes the instance."""
        return len(self.steps)

    def provider_of(self, capability_id: str) -> Provider | None:
        """The provider the capability ``capability_id`` of this plan calls, or None."""
        for step in self.steps:
            if isinstance(step, CapabilityStep):
                for cap in (step.capability, step.compensation):
                    if cap is not None and cap.id == capability_id:
                        return cap.provider
        return None

    def compensable_steps(self) -> list[CapabilityStep]:
        """The capability steps that declare a compensation, in plan order."""
        return [
            n for n in self.steps if isinstance(n, CapabilityStep) and n.compensation is not None
        ]


def _targets(step: Step) -> list[int]:
    if isinstance(step, CapabilityStep):
        return [t for t in (step.next, step.failure_target) if t is not None]
    if isinstance(step, PollStep):
        extra = [step.timeout_target] if step.timeout_target is not None else []
        return [step.body_index, step.satisfied_target, *extra]
    if isinstance(step, AwaitSignalStep):
        extra = [step.timeout_target] if step.timeout_target is not None else []
        return [step.satisfied_target, *extra]
    if isinstance(step, EmitStep):
        return [step.next]
    return []
