"""What the engine reports while it works, for metrics, traces and logs.

The engine calls an :class:`Observer` at a few points of a run; the runtime implements it
with Prometheus metrics and OpenTelemetry spans (:mod:`flowpark.runtime.observe`), so the engine
imports neither. The default :class:`Observer` does nothing. Every method must be cheap and
must not raise: it runs on the hot path of every run.

The engine also keeps the *log context* of the work in progress in a context variable
(:data:`LOG_CONTEXT`): the instance, flow, node (``step``) and scope a log line is about,
which a log formatter adds to each line (see :func:`flowpark.runtime.logs.log_config`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import Any

__all__ = ["LOG_CONTEXT", "NULL_SPAN", "Observer", "PollEnd", "log_context"]

#: The log context of the run in progress in this task: ``instance_id``, ``flow``, and
#: while a capability runs ``step`` and ``scope`` (None outside any run).
LOG_CONTEXT: ContextVar[Mapping[str, Any] | None] = ContextVar("flowpark_log_context", default=None)

#: A re-enterable context manager that does nothing (the span of a silent observer).
NULL_SPAN: AbstractContextManager[None] = nullcontext()


def log_context() -> Mapping[str, Any]:
    """The log context of the current task (see :data:`LOG_CONTEXT`); empty outside a
    run."""
    return LOG_CONTEXT.get() or {}


#: The note of a wait's warning before its budget ends (:meth:`Observer.budget_warned`).
WARNED = "warned"


class PollEnd:
    """How a parked poll ended (the ``how`` of :meth:`Observer.poll_ended`)."""

    SATISFIED = "satisfied"
    SIGNALLED = "signalled"
    TIMED_OUT = "timed_out"


class Observer:
    """Receives what the engine does. Subclass and override what you need.

    Labels passed are bounded (flow names, capability ids, outcomes, error codes); instance
    ids only ever go to spans, never to a metric label.
    """

    def started(self, flow: str, version: str, instance_id: str) -> None:
        """A start created instance ``instance_id`` of ``flow`` ``version``."""

    def ended(self, flow: str, version: str, state: str, code: str | None) -> None:
        """An instance ended ``state`` (completed, failed, cancelled); ``code``: the failure
        code (``flow.poll_not_satisfied`` ...) or None."""

    def tried(self, capability: str, outcome: str, seconds: float) -> None:
        """One try of ``capability`` ended ``outcome`` (success or failure) after
        ``seconds`` (engine clock)."""

    def compensation_failed(self, flow: str, capability: str) -> None:
        """A compensation (``capability``) of an instance of ``flow`` failed for good: its
        retry policy allows no other try (or an operator's retry of it failed)."""

    def attempted(self, flow: str, capability: str, outcome: str) -> None:
        """One attempt of a parked poll (``capability`` its body) ended: ``satisfied``,
        ``unsatisfied`` (the instance parks for the next) or ``failed``."""

    def woke(self, flow: str, lateness_seconds: float) -> None:
        """A parked try (a poll's attempt, a retry) was woken ``lateness_seconds`` after its
        ``wake_at``: the sweep's own lateness (each wake counts, one whose provider then
        defers it again too; the deferral's time is :meth:`provider_held`'s)."""

    def poll_ended(self, flow: str, used_ratio: float, how: str) -> None:
        """A parked poll ended (:class:`PollEnd`) after using ``used_ratio`` of its budget
        (elapsed since the poll was entered / the timeout)."""

    def budget_warned(self, flow: str) -> None:
        """A wait of ``flow`` reached its warning before its budget ends."""

    def signal_taken(self, flow: str, seconds: float) -> None:
        """A wait took a signal ``seconds`` after it was delivered."""

    def taken_over(self, flow: str) -> None:
        """This node claimed an instance whose previous holder's lease had expired."""

    def fencing_refused(self, flow: str) -> None:
        """A write of this node was refused: another node holds the instance now."""

    def swept(self, seconds: float, claimed: int) -> None:
        """A sweep claimed ``claimed`` instances and advanced them in ``seconds`` (engine
        clock)."""

    def provider_call(self, provider: str, outcome: str) -> None:
        """A call of ``provider`` that took a token ended: ``ok``, ``failed`` or
        ``pushback`` (the provider answered 429/503 or the capability raised
        ``ProviderPushback``)."""

    def provider_held(self, flow: str, provider: str, reason: str, seconds: float) -> None:
        """A due try of ``flow`` was parked ``seconds`` for ``provider``: ``budget`` (its
        limit had none) or ``pushback`` (until its ``Retry-After``). Apart from a wake's
        lateness: the time a provider holds a try back is not the sweep's."""

    def provider_deferred(self, provider: str, reason: str) -> None:
        """A try of a capability calling ``provider`` was deferred: ``budget`` (no token)
        or ``pushback`` (the provider is paused after a pushback)."""

    def delivery_id_reused(self, provider: str, signal: str) -> None:
        """A delivery of ``provider``'s ``signal`` came with a delivery id seen before, for
        another instance than the live one its correlation key names: refused (the API's
        ``delivery_id_reused``)."""

    def provider_limit(self, provider: str, limit: float, effective_rate: float) -> None:
        """The store told ``provider``'s limit and effective rate (calls per second), at a
        grant or a pushback of this node."""

    def trace_context(self) -> dict[str, str] | None:
        """The current trace context to store with a new instance (W3C ``traceparent`` /
        ``tracestate`` headers), or None when nothing is traced."""
        return None

    def start_span(self, flow: str, version: str) -> AbstractContextManager[Any]:
        """A span around one start (create and first advance)."""
        return NULL_SPAN

    def run_span(
        self, instance_id: str, flow: str, version: str, trace_context: Mapping[str, str] | None
    ) -> AbstractContextManager[Any]:
        """A span around one run of an instance (claim to park or end), joined to the trace
        of the instance's start (``trace_context`` as :meth:`trace_context` gave it)."""
        return NULL_SPAN

    def call_span(
        self, instance_id: str, flow: str, capability: str, step: int, scope: int, try_number: int
    ) -> AbstractContextManager[Any]:
        """A span around one capability try (outbound calls made in it are its children)."""
        return NULL_SPAN
