"""Definition rules and compilation: a ``Flow`` becomes a frozen ``Plan`` or is refused.

Rule codes are stable (users match on them; ``flowpark flows check`` prints them):

=======================================  ========  ==============================================
code                                     severity  rule
=======================================  ========  ==============================================
``poll.requires_durable``                error     a poll parks, so its flow must be durable
``wait.requires_durable``                error     any wait (await_signal) needs the durable
                                                   profile
``poll.body_not_single_capability``      error     a poll's body is exactly one capability
``poll.body_not_idempotent``             error     the body repeats after every success
``poll.body_has_compensation``           error     an unbounded compensation stack is refused
``poll.timeout_not_positive``            error     the budget must be > 0
``poll.first_interval_exceeds_timeout``  warning   one call, then escalation: likely a mistake
``poll.timeout_exceeds_deadline``        warning   the flow deadline ends the instance before
                                                   the poll's budget runs out (its
                                                   ``on_timeout`` never runs)
``capability.missing_id``                error     every capability has a stable id
``capability.duplicate_id``              error     two different capabilities share an id
``capability.execute_not_async``         error     ``execute`` must be ``async def`` (the engine
                                                   awaits it)
``value.read_before_put``                error     a declared read that no earlier step puts
``on_timeout.falls_through_to_end``      warning   the block neither fails nor rejoins anything
``step.unreachable``                     error     steps after ``fail`` in the same block
``builder.modifier_misplaced``           error     compensate_with/on_failure/... after the
                                                   wrong step
``signal.conflicting_model``             error     one signal name with two payload models
``heartbeat.window_too_small``           warning   poll_interval + call_timeout > heartbeat - 10 s
``failure_route.unbounded_retry``        warning   a failure route whose retries never end
``flow.deadline_not_positive``           error     a deadline must be > 0
``trigger.route_invalid``                error     trigger routes start with ``/``
``provider.name_invalid``                error     a provider's name is 1 to 64 of ``a-z 0-9 _ .
                                                   -``, starting with a letter or digit
``provider.conflicting_declaration``     error     two different providers under one name (in
                                                   a flow, or across the flows of a node)
``flow.duplicate_version``               error     two flows with one name and version (only
                                                   ``flowpark flows check``, which sees several
                                                   flows; ``Catalog.register`` refuses the
                                                   second with ``ValueError``)
=======================================  ========  ==============================================
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from pydantic import BaseModel

from flowpark.errors import DefinitionError
from flowpark.flows.builder import AwaitItem, EmitItem, FailItem, Flow, Item, PollItem, StepItem
from flowpark.flows.capability import Capability, Signal, Stream, bag_key
from flowpark.flows.plan import (
    AwaitSignalStep,
    CapabilityStep,
    EmitStep,
    FailStep,
    Plan,
    PollStep,
    Profile,
    Step,
)
from flowpark.flows.providers import PROVIDER_NAME, Provider

__all__ = ["Finding", "Severity", "check_flow", "compile_flow", "provider_clashes"]

HEARTBEAT_MARGIN = timedelta(seconds=10)


class Severity(StrEnum):
    """How serious a definition finding is: an error refuses the flow, a warning does not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One rule finding: ``code`` (stable), severity, the flow and step it names."""

    code: str
    severity: Severity
    flow: str
    step: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.code}: {self.flow} [{self.step}]: {self.message}"


class _Checker:
    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.findings: list[Finding] = []
        self.ids: dict[str, type] = {}
        self.signals: dict[str, Signal] = {}
        self.providers: dict[str, Provider] = {}

    def add(self, code: str, severity: Severity, step: str, message: str) -> None:
        ref = f"{self.flow.name}@{self.flow.version}"
        self.findings.append(Finding(code, severity, ref, step, message))

    def error(self, code: str, step: str, message: str) -> None:
        self.add(code, Severity.ERROR, step, message)

    def warn(self, code: str, step: str, message: str) -> None:
        self.add(code, Severity.WARNING, step, message)

    # -- capabilities --------------------------------------------------------------
    def capability(self, cap: Capability, where: str) -> None:
        if not cap.id:
            self.error("capability.missing_id", where, f"{type(cap).__name__} has no id")
            return
        seen = self.ids.setdefault(cap.id, type(cap))
        if seen is not type(cap):
            self.error(
                "capability.duplicate_id",
                where,
                f"id {cap.id!r} is declared by {seen.__name__} and {type(cap).__name__}",
            )
        if not inspect.iscoroutinefunction(getattr(cap, "execute", None)):
            self.error(
                "capability.execute_not_async",
                where,
                f"{type(cap).__name__}.execute must be `async def` (the engine awaits it)",
            )
        self.provider(cap, where)
        opts = cap.options
        hb = opts.heartbeat_timeout
        declared = hb is not None and opts.poll_interval is not None and opts.call_timeout
        if declared and opts.poll_interval + opts.call_timeout > hb - HEARTBEAT_MARGIN:  # type: ignore[operator]
            self.warn(
                "heartbeat.window_too_small",
                where,
                f"poll_interval {opts.poll_interval} + call_timeout {opts.call_timeout} "
                f"exceeds heartbeat_timeout {hb} - 10s",
            )

    def provider(self, cap: Capability, where: str) -> None:
        provider = cap.provider
        if provider is None:
            return
        if not isinstance(provider, Provider):
            self.error(
                "provider.name_invalid",
                where,
                f"{cap.id}.provider must be a Provider (or None), not {provider!r}",
            )
            return
        if not PROVIDER_NAME.fullmatch(provider.name):
            self.error(
                "provider.name_invalid",
                where,
                f"provider name {provider.name!r} of {cap.id} must be 1 to 64 of a-z, 0-9, "
                "'_', '.', '-' starting with a letter or digit",
            )
        known = self.providers.setdefault(provider.name, provider)
        if known != provider:
            self.error(
                "provider.conflicting_declaration",
                where,
                f"provider {provider.name!r} is declared twice with different limits: "
                f"{known} and {provider}",
            )

    def signal(self, sig: Signal, where: str) -> None:
        known = self.signals.setdefault(sig.name, sig)
        if known.model is not sig.model:
            self.error(
                "signal.conflicting_model",
                where,
                f"signal {sig.name!r} declared with two payload models",
            )

    def reads(self, reads: tuple[type[BaseModel], ...], have: set[str], where: str) -> None:
        for model in reads:
            if bag_key(model) not in have:
                self.error(
                    "value.read_before_put",
                    where,
                    f"reads {bag_key(model)} but no earlier step puts it",
                )

    # -- blocks --------------------------------------------------------------------
    def block(self, items: list[Item], have: set[str], path: str) -> tuple[set[str], bool]:
        """Check a block; returns (bag keys surely put after it, whether it ends in fail)."""
        have = set(have)
        for pos, item in enumerate(items):
            where = f"{path}{pos}"
            if isinstance(item, FailItem):
                if pos != len(items) - 1:
                    self.error(
                        "step.unreachable",
                        f"{path}{pos + 1}",
                        f"steps after fail {item.code!r} can never run",
                    )
                return have, True
            if isinstance(item, StepItem):
                have = self.step(item, have, where)
            elif isinstance(item, PollItem):
                have = self.poll(item, have, where, is_last=pos == len(items) - 1, path=path)
            elif isinstance(item, AwaitItem):
                have = self.await_(item, have, where)
            elif isinstance(item, EmitItem):
                self.reads(item.reads, have, f"{where} emit {item.name}")
        return have, False

    def step(self, item: StepItem, have: set[str], where: str) -> set[str]:
        cap = item.capability
        if not isinstance(cap, Capability):
            self.error("capability.missing_id", where, f"{cap!r} is not a Capability")
            return have
        label = f"{where} {cap.id}"
        self.capability(cap, label)
        if item.compensation is not None:
            self.capability(item.compensation, f"{label} compensation")
        self.reads(cap.reads, have, label)
        puts = {bag_key(m) for m in cap.puts}
        if item.on_failure is None:
            return have | puts
        retry = cap.options.retry
        if retry is not None and not retry.bounded:
            self.warn(
                "failure_route.unbounded_retry",
                label,
                "retry has neither maximum_tries nor total_duration: the failure "
                "route can never run",
            )
        after, fails = self.block(item.on_failure, have, f"{where}.on_failure.")
        return have | puts if fails else have | (puts & after)

    def poll(
        self, item: PollItem, have: set[str], where: str, *, is_last: bool, path: str
    ) -> set[str]:
        body = item.body
        if self.flow.profile is not Profile.DURABLE:
            self.error(
                "poll.requires_durable",
                f"{where} poll",
                "a poll parks between attempts; the flow must be durable",
            )
        if not isinstance(body, Capability):
            self.error(
                "poll.body_not_single_capability",
                f"{where} poll",
                "the body of a poll is exactly one capability",
            )
            return have
        label = f"{where} poll {body.id}"
        self.capability(body, label)
        if not body.idempotent:
            self.error(
                "poll.body_not_idempotent",
                label,
                f"{body.id} repeats after every success; declare it idempotent",
            )
        if item.compensation is not None:
            self.error(
                "poll.body_has_compensation",
                label,
                "a poll body runs an unbounded number of times and cannot be compensated",
            )
        if item.timeout <= timedelta(0):
            self.error("poll.timeout_not_positive", label, "timeout must be positive")
        else:
            if item.interval.base_delay(0) > item.timeout:
                self.warn(
                    "poll.first_interval_exceeds_timeout",
                    label,
                    f"first interval {item.interval.base_delay(0)} exceeds timeout "
                    f"{item.timeout}: one call, then the timeout path",
                )
            deadline = self.flow.deadline
            if deadline is not None and timedelta(0) < deadline < item.timeout:
                self.warn(
                    "poll.timeout_exceeds_deadline",
                    label,
                    f"timeout {item.timeout} exceeds the flow deadline {deadline}: the "
                    "deadline fails the instance (flow.deadline_exceeded) before the "
                    "budget runs out, so the timeout path never runs",
                )
        self.reads(body.reads, have, label)
        after_body = have | {bag_key(m) for m in body.puts}
        self.reads(item.reads, after_body, f"{label} until")
        if item.signal is not None:
            self.signal(item.signal, label)
        if item.on_timeout is not None:
            _, fails = self.block(item.on_timeout, after_body, f"{where}.on_timeout.")
            if not fails and is_last and path == "":
                self.warn(
                    "on_timeout.falls_through_to_end",
                    label,
                    "the on_timeout block neither fails nor is followed by anything: "
                    "a timed-out poll would complete the flow",
                )
        if item.signal is not None:  # a put of the poll when the signal ends its wait
            return after_body | {bag_key(item.signal.model)}
        return after_body

    def await_(self, item: AwaitItem, have: set[str], where: str) -> set[str]:
        label = f"{where} await {item.signal.name}"
        if self.flow.profile is not Profile.DURABLE:
            self.error("wait.requires_durable", label, "a wait needs the durable profile")
        self.signal(item.signal, label)
        # the payload is a put of the wait that takes it: it is in the bag after the wait
        # unless a timeout path that rejoins the flow ran instead
        payload = {bag_key(item.signal.model)}
        if item.on_timeout is not None:
            _, fails = self.block(item.on_timeout, have, f"{where}.on_timeout.")
            return have | payload if fails else have
        return have | payload  # no timeout path: a timeout fails the flow

    def run(self) -> None:
        flow = self.flow
        for misuse in flow.misuses:
            self.error(misuse.code, "builder", misuse.message)
        if not flow.name or not flow.name.isprintable() or any(c.isspace() for c in flow.name):
            # the name is joined with a line feed in the idempotency digest (migration 0006)
            # and shown in routes and logs
            self.error(
                "flow.name_invalid",
                "flow",
                f"name {flow.name!r} must be non-empty and printable, without whitespace",
            )
        if flow.deadline is not None and flow.deadline <= timedelta(0):
            self.error("flow.deadline_not_positive", "flow", "deadline must be positive")
        if flow.trigger is not None and not flow.trigger.route.startswith("/"):
            self.error("trigger.route_invalid", "trigger", "route must start with '/'")
        key = flow.display_key
        if key is not None:
            fields = flow.input_model.model_json_schema(by_alias=True).get("properties", {})
            if key not in fields:
                self.error(
                    "flow.display_key_unknown",
                    "flow",
                    f"display_key {key!r} is no field of the input {flow.input_model.__name__} "
                    f"(its fields: {', '.join(sorted(fields)) or 'none'})",
                )
        have, _ = self.block(flow.items, set(), "")
        self.reads(flow.returns_reads, have, "returns")


def provider_clashes(plans: list[Plan], ref: str = "flows") -> list[Finding]:
    """The ``provider.conflicting_declaration`` findings across ``plans`` (one node's
    flows): a provider name declared with different limits by two of them.

    Args:
        plans: the compiled plans a node serves.
        ref: what the findings name as their flow.

    Returns:
        One error finding per clash (empty when every name has one declaration).
    """
    seen: dict[str, tuple[Provider, str]] = {}
    findings: list[Finding] = []
    for plan in plans:
        for provider in plan.providers:
            known = seen.setdefault(provider.name, (provider, f"{plan.name}@{plan.version}"))
            if known[0] != provider:
                findings.append(
                    Finding(
                        "provider.conflicting_declaration",
                        Severity.ERROR,
                        f"{plan.name}@{plan.version}",
                        "providers",
                        f"provider {provider.name!r} is declared as {provider} here and as "
                        f"{known[0]} by {known[1]}",
                    )
                )
    return findings


def _providers(steps: list[Step]) -> tuple[Provider, ...]:
    """The providers the capabilities of ``steps`` call (compensations included), in plan
    order, each once."""
    found: dict[str, Provider] = {}
    for step in steps:
        if isinstance(step, CapabilityStep):
            for cap in (step.capability, step.compensation):
                if cap is not None and cap.provider is not None:
                    found.setdefault(cap.provider.name, cap.provider)
    return tuple(found.values())


def check_flow(flow: Flow) -> list[Finding]:
    """Every finding for ``flow`` (errors and warnings), in definition order."""
    checker = _Checker(flow)
    checker.run()
    return checker.findings


def _flatten(items: list[Item], start: int) -> list[Step]:
    steps: list[Step] = []
    for item in items:
        idx = start + len(steps)
        if isinstance(item, StepItem):
            if item.on_failure is None:
                steps.append(CapabilityStep(idx, item.capability, item.compensation, next=idx + 1))
            else:
                block = _flatten(item.on_failure, idx + 1)
                steps.append(
                    CapabilityStep(
                        idx,
                        item.capability,
                        item.compensation,
                        next=idx + 1 + len(block),
                        failure_target=idx + 1,
                    )
                )
                steps.extend(block)
        elif isinstance(item, PollItem):
            warns = item.on_warning is not None  # its capability at idx + 2, the block after
            first = idx + 2 + warns
            block = _flatten(item.on_timeout or [], first)
            steps.append(
                PollStep(
                    idx,
                    item.until,
                    item.interval,
                    item.timeout,
                    satisfied_target=first + len(block),
                    timeout_target=None if item.on_timeout is None else first,
                    signal=item.signal,
                    match=item.match,
                    warn_before=item.warn_before,
                    warning_target=idx + 2 if warns else None,
                )
            )
            steps.append(CapabilityStep(idx + 1, item.body, None, next=None, poll_index=idx))
            if warns:
                steps.append(CapabilityStep(idx + 2, item.on_warning, None, next=None))
            steps.extend(block)
        elif isinstance(item, AwaitItem):
            warns = item.on_warning is not None  # its capability at idx + 1, the block after
            first = idx + 1 + warns
            block = _flatten(item.on_timeout or [], first)
            steps.append(
                AwaitSignalStep(
                    idx,
                    item.signal,
                    item.timeout,
                    satisfied_target=first + len(block),
                    timeout_target=None if item.on_timeout is None else first,
                    match=item.match,
                    warn_before=item.warn_before,
                    warning_target=idx + 1 if warns else None,
                )
            )
            if warns:
                steps.append(CapabilityStep(idx + 1, item.on_warning, None, next=None))
            steps.extend(block)
        elif isinstance(item, FailItem):
            steps.append(FailStep(idx, item.code, item.message))
        else:
            steps.append(EmitStep(idx, item.name, item.factory, next=idx + 1))
    return steps


def compile_flow(flow: Flow) -> tuple[Plan, list[Finding]]:
    """Check ``flow`` and freeze it into a :class:`Plan`.

    Returns:
        ``(plan, warnings)``.

    Raises:
        DefinitionError: code ``definition_invalid``; ``.findings`` lists every finding
            (the errors' rule codes among them); the message names the flow and the steps.
    """
    findings = check_flow(flow)
    errors = [f for f in findings if f.severity is Severity.ERROR]
    if errors:
        raise DefinitionError(
            f"flow {flow.name}@{flow.version} is invalid: " + "; ".join(map(str, errors)),
            findings,
            flow=flow.name,
            version=flow.version,
        )
    steps = _flatten(flow.items, 0)
    signals: dict[str, Signal] = {}
    for step in steps:
        wait = isinstance(step, PollStep | AwaitSignalStep)
        if wait and step.signal is not None:  # type: ignore[union-attr]
            signals[step.signal.name] = step.signal  # type: ignore[union-attr]
    streams: dict[str, Stream] = {s.name: s for s in flow.streams}
    plan = Plan(
        name=flow.name,
        version=flow.version,
        input_model=flow.input_model,
        output_model=flow.output_model,
        profile=flow.profile,
        trigger=flow.trigger,
        deadline=flow.deadline,
        steps=tuple(steps),
        returns=flow.returns_factory,
        signals=signals,
        streams=streams,
        display_key=flow.display_key,
        providers=_providers(steps),
    )
    return plan, findings
