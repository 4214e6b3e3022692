"""Prometheus metrics of a node (``prometheus-client``), served at ``GET /metrics``.

:class:`Metrics` owns every metric on one registry (a fresh one per app, so tests and
several apps in one process do not share counts). Under ``flowpark serve --workers N`` the
worker processes write their values to files in ``PROMETHEUS_MULTIPROC_DIR`` (the client's
multiprocess mode, which ``serve`` sets up: :func:`multiprocess_dir`) and whichever process
answers a scrape aggregates all of them (:func:`render`).

Labels are bounded: flow names and versions, capability ids, outcomes, states, error codes,
group-commit lanes and the configured subscribers' names, never an instance id.
``docs/observability.md`` has the table.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

__all__ = [
    "CONTENT_TYPE_LATEST",
    "DEFERRAL_REASONS",
    "DELIVERY_OUTCOMES",
    "MULTIPROC_ENV",
    "PROVIDER_OUTCOMES",
    "Metrics",
    "mark_process_dead",
    "multiprocess_dir",
    "multiprocess_enabled",
    "render",
]

#: The environment variable of the client's multiprocess mode.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: Buckets (seconds) for calls, wake lateness and signal-to-resume times: 5 ms to 10 min.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
#: Buckets for the share of a poll's budget used.
RATIO = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
#: The outcomes of a delivery try (the ``outcome`` of ``flowpark_delivery_tries``).
DELIVERY_OUTCOMES = ("delivered", "failed", "gave_up")
#: Buckets (seconds) for delivery lag, which retries after a backoff stretch: 50 ms to 1 day.
LAG = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 86400)
#: The outcomes of a provider call (``flowpark_provider_calls``) and the reasons of a
#: deferral (``flowpark_provider_deferrals``).
PROVIDER_OUTCOMES = ("ok", "pushback", "failed")
DEFERRAL_REASONS = ("budget", "pushback")
#: Buckets for counts per sweep and per group-commit batch.
COUNTS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500)


def multiprocess_enabled() -> bool:
    """Whether this process writes its metrics for others to aggregate."""
    return bool(os.environ.get(MULTIPROC_ENV))


@contextmanager
def multiprocess_dir() -> Iterator[str]:
    """Set up the multiprocess mode for the worker processes started inside the block:
    ``PROMETHEUS_MULTIPROC_DIR`` names a fresh temporary directory (removed afterwards), or
    the one the environment names already (emptied first, as the client requires).

    Yields:
        The directory's path.
    """
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        for name in os.listdir(given):
            if name.endswith(".db"):
                os.unlink(os.path.join(given, name))
        yield given
        return
    path = tempfile.mkdtemp(prefix="flowpark-metrics-")
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(path, ignore_errors=True)


def mark_process_dead() -> None:
    """Multiprocess mode: drop this process's live gauges (at shutdown)."""
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def render(metrics: Metrics) -> bytes:
    """The Prometheus text exposition of ``metrics``, or in multiprocess mode of every
    process of this server."""
    if multiprocess_enabled():
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(metrics.registry)


class Metrics:
    """Every metric of a node, on its own registry.

    Args:
        node_id: this node's name (the ``flowpark_node_info`` series).
    """

    def __init__(self, node_id: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.started = Counter(
            "flowpark_instances_started",
            "Instances started: durable ones created by starts (idempotent repeats excluded) "
            "and ephemeral runs.",
            ["flow", "version"],
            registry=r,
        )
        self.ended = Counter(
            "flowpark_instances_ended",
            "Instances that ended, durable and ephemeral, by final state and failure code "
            "('' when none).",
            ["flow", "version", "state", "code"],
            registry=r,
        )
        self.tries = Counter(
            "flowpark_tries",
            "Capability tries (one execution under the retry policy), by outcome.",
            ["capability", "outcome"],
            registry=r,
        )
        self.compensations_failed = Counter(
            "flowpark_compensations_failed",
            "Compensations that failed for good (no try left under their retry policy, or "
            "an operator's retry failed), by flow and compensating capability.",
            ["flow", "capability"],
            registry=r,
        )
        self.attempts = Counter(
            "flowpark_attempts",
            "Attempts of parked polls, by outcome: satisfied, unsatisfied (parks for the "
            "next) or failed.",
            ["capability", "outcome"],
            registry=r,
        )
        self.duration = Histogram(
            "flowpark_capability_duration_seconds",
            "Duration of each capability try.",
            ["capability"],
            buckets=SECONDS,
            registry=r,
        )
        self.lateness = Histogram(
            "flowpark_wake_lateness_seconds",
            "The sweep's own lateness: a parked try woken (a poll's attempt, a retry; "
            "one its provider defers again too) minus its wake_at.",
            ["flow"],
            buckets=SECONDS,
            registry=r,
        )
        self.provider_held = Histogram(
            "flowpark_provider_deferral_seconds",
            "How long a due try was parked for its provider, apart from wake lateness: "
            "reason budget (the limit had none) or pushback (until its Retry-After).",
            ["flow", "provider", "reason"],
            buckets=LAG,
            registry=r,
        )
        self.budget = Histogram(
            "flowpark_poll_budget_used_ratio",
            "Share of a poll's budget used when the poll ended (satisfied, signalled, timed_out).",
            ["flow", "outcome"],
            buckets=RATIO,
            registry=r,
        )
        self.timeouts = Counter(
            "flowpark_poll_timeouts",
            "Polls whose budget ran out before they were satisfied.",
            ["flow"],
            registry=r,
        )
        self.budget_warnings = Counter(
            "flowpark_budget_warnings",
            "Waits (polls, await_signal) that reached their warning before the budget ends.",
            ["flow"],
            registry=r,
        )
        self.signal_to_resume = Histogram(
            "flowpark_signal_to_resume_seconds",
            "From a signal's arrival to the wait taking it.",
            ["flow"],
            buckets=SECONDS,
            registry=r,
        )
        self.takeovers = Counter(
            "flowpark_lease_takeovers",
            "Instances this node claimed from a holder whose lease had expired.",
            ["flow"],
            registry=r,
        )
        self.fencing = Counter(
            "flowpark_fencing_refusals",
            "Runs stopped because a write carried a stale fencing token.",
            ["flow"],
            registry=r,
        )
        self.sweep_duration = Histogram(
            "flowpark_sweep_duration_seconds",
            "Duration of each sweep (its claims and the runs they started).",
            buckets=SECONDS,
            registry=r,
        )
        self.sweep_claimed = Histogram(
            "flowpark_sweep_claimed",
            "Instances claimed per sweep.",
            buckets=COUNTS,
            registry=r,
        )
        self.sweep_last = Gauge(
            "flowpark_sweep_last_success_timestamp_seconds",
            "Unix time of the last sweep that ended without error.",
            registry=r,
            multiprocess_mode="max",
        )
        self.batch = Histogram(
            "flowpark_group_commit_batch_size",
            "Operations per group-commit statement (PostgreSQL), by lane.",
            ["lane"],
            buckets=COUNTS,
            registry=r,
        )
        self.pool = Gauge(
            "flowpark_db_pool_connections_in_use",
            "Database connections checked out of this node's pool.",
            registry=r,
            multiprocess_mode="livesum",
        )
        gauge = {"registry": r, "multiprocess_mode": "mostrecent", "labelnames": ["flow"]}
        self.parked = Gauge("flowpark_instances_parked", "Parked instances.", **gauge)  # type: ignore[arg-type]
        self.running = Gauge(
            "flowpark_instances_running",
            "Running instances under a live lease.",
            **gauge,  # type: ignore[arg-type]
        )
        self.overdue = Gauge(
            "flowpark_instances_overdue",
            "Parked instances due for longer than two scan intervals.",
            **gauge,  # type: ignore[arg-type]
        )
        self.stuck = Gauge(
            "flowpark_instances_stuck",
            "Running instances whose lease expired more than a scan interval ago.",
            **gauge,  # type: ignore[arg-type]
        )
        self.nodes_sweeping = Gauge(
            "flowpark_nodes_sweeping",
            "Live nodes that sweep and swept within three beats (from the nodes' liveness "
            "rows: every node reports the same figure).",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.delivery_tries = Counter(
            "flowpark_delivery_tries",
            "Tries of event deliveries to a subscriber, by outcome: delivered (a 2xx "
            "answer), failed (another try is scheduled) or gave_up (the last try allowed "
            "failed: the delivery is failed for good).",
            ["subscriber", "outcome"],
            registry=r,
        )
        self.delivery_lag = Histogram(
            "flowpark_delivery_lag_seconds",
            "From an event's emission to its delivery to a subscriber (engine clock).",
            ["subscriber"],
            buckets=LAG,
            registry=r,
        )
        self.deliveries_pending = Gauge(
            "flowpark_deliveries_pending",
            "Event deliveries waiting to be sent to a subscriber (pending, due or not).",
            ["subscriber"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.provider_calls = Counter(
            "flowpark_provider_calls",
            "Calls to a declared provider, by outcome: ok, pushback (it answered 429 or "
            "503, or the capability raised ProviderPushback) or failed.",
            ["provider", "outcome"],
            registry=r,
        )
        self.provider_deferrals = Counter(
            "flowpark_provider_deferrals",
            "Due calls parked again instead of run, by reason: budget (the provider's "
            "limit had none) or pushback (until the provider's Retry-After).",
            ["provider", "reason"],
            registry=r,
        )
        self.delivery_ids_reused = Counter(
            "flowpark_webhook_delivery_ids_reused",
            "Provider signal deliveries refused because their delivery id was seen before "
            "for another instance than the live one their correlation key names (409 "
            "delivery_id_reused): a provider reusing its delivery ids.",
            ["provider", "signal"],
            registry=r,
        )
        provider = {"registry": r, "multiprocess_mode": "mostrecent", "labelnames": ["provider"]}
        self.provider_limit = Gauge(
            "flowpark_provider_limit",
            "The provider's limit in force, calls per second (all nodes together).",
            **provider,  # type: ignore[arg-type]
        )
        self.provider_effective_rate = Gauge(
            "flowpark_provider_effective_rate",
            "The provider's effective rate, calls per second: the limit, lowered by "
            "pushback and recovering after a clean interval.",
            **provider,  # type: ignore[arg-type]
        )
        self.reviews_waiting = Gauge(
            "flowpark_reviews_waiting",
            "Review items waiting for a person, by state (open, claimed).",
            ["state"],
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.review_oldest_age = Gauge(
            "flowpark_review_oldest_waiting_age_seconds",
            "Age of the oldest review item still open or claimed (0 when none), engine clock.",
            registry=r,
            multiprocess_mode="mostrecent",
        )
        self.info = Gauge(
            "flowpark_node_info",
            "1 for each live node process.",
            ["node"],
            registry=r,
            multiprocess_mode="liveall",
        )
        self.info.labels(node=node_id).set(1)
        self.flows_seen: set[str] = set()

    def sweep_succeeded(self) -> None:
        """Record the instant of a sweep that ended without error."""
        self.sweep_last.set(time.time())
