"""The engine's observer in a node: Prometheus metrics and, when configured, OpenTelemetry
spans (see :mod:`flowpark.engine.observe` for the events).

Label children are looked up once and kept (a ``labels(...)`` call takes a lock and builds
a key), so an event on the hot path costs a dictionary lookup and an increment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from flowpark.engine.observe import NULL_SPAN, Observer, PollEnd
from flowpark.runtime.metrics import (
    DEFERRAL_REASONS,
    DELIVERY_OUTCOMES,
    PROVIDER_OUTCOMES,
    Metrics,
)
from flowpark.runtime.tracing import Tracing

__all__ = ["NodeObserver"]


class NodeObserver(Observer):
    """Reports the engine's events to ``metrics`` and ``tracing`` (either may be None).

    Args:
        metrics: the node's :class:`~flowpark.runtime.metrics.Metrics`, or None for none.
        tracing: a :class:`~flowpark.runtime.tracing.Tracing`, or None when not traced.
    """

    def __init__(self, metrics: Metrics | None, tracing: Tracing | None = None) -> None:
        self.metrics = metrics
        self.tracing = tracing
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def started(self, flow: str, version: str, instance_id: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.started, flow, version).inc()
        if self.tracing is not None:
            self.tracing.started(instance_id)

    def ended(self, flow: str, version: str, state: str, code: str | None) -> None:
        if self.metrics is not None:
            self._child(self.metrics.ended, flow, version, state, code or "").inc()

    def tried(self, capability: str, outcome: str, seconds: float) -> None:
        if self.metrics is not None:
            self._child(self.metrics.tries, capability, outcome).inc()
            self._child(self.metrics.duration, capability).observe(seconds)

    def compensation_failed(self, flow: str, capability: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.compensations_failed, flow, capability).inc()

    def attempted(self, flow: str, capability: str, outcome: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.attempts, capability, outcome).inc()

    def woke(self, flow: str, lateness_seconds: float) -> None:
        if self.metrics is not None:
            self._child(self.metrics.lateness, flow).observe(lateness_seconds)

    def poll_ended(self, flow: str, used_ratio: float, how: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.budget, flow, how).observe(used_ratio)
            if how == PollEnd.TIMED_OUT:
                self._child(self.metrics.timeouts, flow).inc()

    def budget_warned(self, flow: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.budget_warnings, flow).inc()

    def signal_taken(self, flow: str, seconds: float) -> None:
        if self.metrics is not None:
            self._child(self.metrics.signal_to_resume, flow).observe(max(seconds, 0.0))

    def taken_over(self, flow: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.takeovers, flow).inc()

    def fencing_refused(self, flow: str) -> None:
        if self.metrics is not None:
            self._child(self.metrics.fencing, flow).inc()

    def swept(self, seconds: float, claimed: int) -> None:
        if self.metrics is not None:
            self.metrics.sweep_duration.observe(seconds)
            self.metrics.sweep_claimed.observe(claimed)
            self.metrics.sweep_succeeded()

    def batched(self, lane: str, size: int) -> None:
        """A group-commit batch of ``size`` operations started on ``lane``."""
        if self.metrics is not None:
            self._child(self.metrics.batch, lane).observe(size)

    def delivery_subscribers(self, names: Iterable[str]) -> None:
        """Start the delivery counters of the subscribers ``names`` at zero for every
        outcome (so that a first failure shows as an increase)."""
        if self.metrics is not None:
            for name in names:
                for outcome in DELIVERY_OUTCOMES:
                    self._child(self.metrics.delivery_tries, name, outcome)

    def delivery_tried(self, subscriber: str, outcome: str) -> None:
        """A delivery try to ``subscriber`` ended ``outcome`` (in ``DELIVERY_OUTCOMES``)."""
        if self.metrics is not None:
            self._child(self.metrics.delivery_tries, subscriber, outcome).inc()

    def delivered(self, subscriber: str, lag_seconds: float) -> None:
        """A delivery to ``subscriber`` was recorded delivered ``lag_seconds`` after its
        event was emitted (engine clock; a negative lag counts as 0)."""
        if self.metrics is not None:
            self._child(self.metrics.delivery_lag, subscriber).observe(max(lag_seconds, 0.0))

    def providers_declared(self, names: Iterable[str]) -> None:
        """Start the provider counters of ``names`` at zero for every outcome and reason
        (so that a first pushback shows as an increase)."""
        if self.metrics is not None:
            for name in names:
                for outcome in PROVIDER_OUTCOMES:
                    self._child(self.metrics.provider_calls, name, outcome)
                for reason in DEFERRAL_REASONS:
                    self._child(self.metrics.provider_deferrals, name, reason)

    def provider_call(self, provider: str, outcome: str) -> None:
        """A call to ``provider`` ended ``outcome`` (ok, pushback or failed)."""
        if self.metrics is not None:
            self._child(self.metrics.provider_calls, provider, outcome).inc()

    def provider_held(self, flow: str, provider: str, reason: str, seconds: float) -> None:
        """A due try of ``flow`` parked ``seconds`` for ``provider`` (budget, pushback)."""
        if self.metrics is not None:
            self._child(self.metrics.provider_held, flow, provider, reason).observe(seconds)

    def provider_deferred(self, provider: str, reason: str) -> None:
        """A due call to ``provider`` was parked again (reason budget or pushback)."""
        if self.metrics is not None:
            self._child(self.metrics.provider_deferrals, provider, reason).inc()

    def delivery_id_reused(self, provider: str, signal: str) -> None:
        """A provider signal's delivery id was refused as reused (``delivery_id_reused``)."""
        if self.metrics is not None:
            self._child(self.metrics.delivery_ids_reused, provider, signal).inc()

    def provider_limit(self, provider: str, limit: float, effective_rate: float) -> None:
        """The store told ``provider``'s limit and effective rate (calls/s)."""
        if self.metrics is not None:
            self._child(self.metrics.provider_limit, provider).set(limit)
            self._child(self.metrics.provider_effective_rate, provider).set(effective_rate)

    def trace_context(self) -> dict[str, str] | None:
        return self.tracing.context() if self.tracing is not None else None

    def start_span(self, flow: str, version: str) -> AbstractContextManager[Any]:
        if self.tracing is None:
            return NULL_SPAN
        return self.tracing.start_span(flow, version)

    def run_span(
        self, instance_id: str, flow: str, version: str, trace_context: Mapping[str, str] | None
    ) -> AbstractContextManager[Any]:
        if self.tracing is None:
            return NULL_SPAN
        return self.tracing.run_span(instance_id, flow, version, trace_context)

    def call_span(
        self, instance_id: str, flow: str, capability: str, step: int, scope: int, try_number: int
    ) -> AbstractContextManager[Any]:
        if self.tracing is None:
            return NULL_SPAN
        return self.tracing.call_span(instance_id, flow, capability, step, scope, try_number)
