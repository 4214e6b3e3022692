"""Event delivery: every node relays the outbox to the subscribers and tries due deliveries.

A periodic APScheduler job (one run at a time per node) relays events not relayed yet
(one node at a time, see :meth:`flowpark.store.deliveries.SqlDeliveries.relay`), then claims due
deliveries and POSTs each to its subscriber, signed per Standard Webhooks (the
``standardwebhooks`` package): headers ``webhook-id`` (the event id, the same on every
try), ``webhook-timestamp`` and ``webhook-signature``; the body is
``{"type": <event name>, "timestamp": <emitted at>, "data": <payload>, "eventId", "instanceId"}``.

A 2xx answer delivers it. Any other answer or a transport error schedules the next try
after an exponential backoff with jitter (``delivery_backoff_seconds`` doubled per try,
capped by ``delivery_max_backoff_seconds``, each delay drawn between half of it and all of
it) until ``delivery_max_tries`` tries were made: then it is failed for good, listed by
``GET /api/v1/deliveries?state=failed`` and retryable. Delivery is at least once: a node
that dies mid-try leaves its claim to lapse and another node tries again (with the same
``webhook-id``, for the subscriber to drop the repeat).

Each try is counted by subscriber and outcome (``flowpark_delivery_tries``: delivered,
failed or gave_up), and each recorded delivery's lag from its event's emission is observed
(``flowpark_delivery_lag_seconds``). A try for a subscriber no longer configured is
counted under the subscriber ``""``, so the label keeps to the configured names.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from standardwebhooks.webhooks import Webhook

from flowpark.engine.clock import Clock
from flowpark.engine.ports.outbox import ClaimedDelivery, Deliveries
from flowpark.flows.durations import RetryPolicy
from flowpark.outages import OUTAGES, store_outage
from flowpark.runtime.jobs import NodeJobs
from flowpark.runtime.observe import NodeObserver
from flowpark.settings import Settings, Subscriber

__all__ = ["Deliverer", "delivery_body"]

log = logging.getLogger("flowpark.delivery")

#: Time a claim gives a try beyond the POST's own timeout.
CLAIM_MARGIN = timedelta(seconds=5)


def delivery_body(claimed: ClaimedDelivery) -> str:
    """The JSON body POSTed for ``claimed`` (compact, keys in a fixed order)."""
    return json.dumps(
        {
            "type": claimed.event_name,
            "timestamp": claimed.event_created_at.astimezone(UTC)
            .isoformat()
            .replace("+00:00", "Z"),
            "data": claimed.payload,
            "eventId": claimed.event_id,
            "instanceId": claimed.instance_id,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


class Deliverer:
    """Sends this node's share of due event deliveries.

    Args:
        store: the deliveries store.
        subscribers: the configured subscribers.
        http: the node's outbound client.
        clock: the engine clock (claims, due times).
        node_id: this node's name (claims).
        settings: timeouts, backoff and the try bound (``delivery_*``).
        batch: deliveries claimed at once.
        observer: the node's observer, which counts the tries (None: not counted).
    """

    def __init__(
        self,
        store: Deliveries,
        subscribers: list[Subscriber],
        http: httpx.AsyncClient,
        clock: Clock,
        node_id: str,
        settings: Settings,
        *,
        batch: int = 50,
        observer: NodeObserver | None = None,
        jobs: NodeJobs | None = None,
    ) -> None:
        self.store = store
        self.http = http
        self.clock = clock
        self.node_id = node_id
        self.batch = batch
        self.timeout = settings.delivery_timeout_seconds
        #: the capabilities' retry policy, read for a delivery: doubled per try, capped
        self.policy = RetryPolicy(
            initial_interval=timedelta(seconds=settings.delivery_backoff_seconds),
            backoff_coefficient=2.0,
            maximum_interval=timedelta(seconds=settings.delivery_max_backoff_seconds),
            maximum_tries=settings.delivery_max_tries,
        )
        self.interval = settings.delivery_scan_seconds
        self._targets = {s.name: (s.url, Webhook(s.secret.get_secret_value())) for s in subscribers}
        self._names = sorted(self._targets)
        self.observer = observer
        if observer is not None:
            observer.delivery_subscribers(self._names)
        #: the node's one scheduler (a scheduler of its own when built alone)
        self.jobs = jobs or NodeJobs()
        self._own_jobs = jobs is None
        self._running: set[asyncio.Task[Any]] = set()
        self._stopping = False  # stop() began: a run not yet begun never begins

    async def run_once(self) -> int:
        """Relay, then claim and send due deliveries until none is due.

        Returns:
            How many tries were made.
        """
        sent = 0
        while True:
            now = self.clock.now()
            await self.store.relay(self._names, now)
            until = now + timedelta(seconds=self.timeout) + CLAIM_MARGIN
            claims = await self.store.claim(self.node_id, now, until, self.batch)
            if not claims:
                return sent
            await asyncio.gather(*(self._send(c) for c in claims))
            sent += len(claims)

    def backoff(self, tries: int) -> timedelta:
        """The delay after the ``tries``-th failed try: the retry policy's, jittered
        between half of it and all of it."""
        ceiling = self.policy.delay_after(tries).total_seconds()
        return timedelta(seconds=random.uniform(ceiling / 2, ceiling))

    async def _send(self, claimed: ClaimedDelivery) -> None:
        target = self._targets.get(claimed.subscriber)
        tries = claimed.tries + 1
        status: int | None = None
        if target is None:
            error = f"subscriber {claimed.subscriber!r} is no longer configured"
        else:
            url, hook = target
            body = delivery_body(claimed)
            stamp = self.clock.now()
            headers = {
                "content-type": "application/json",
                "webhook-id": claimed.event_id,
                "webhook-timestamp": str(int(stamp.timestamp())),
                "webhook-signature": hook.sign(claimed.event_id, stamp, body),
            }
            try:
                resp = await self.http.post(
                    url, content=body.encode(), headers=headers, timeout=self.timeout
                )
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                status = resp.status_code
                if 200 <= status < 300:
                    delivered_at = self.clock.now()
                    recorded = await self.store.finish(
                        claimed, self.node_id, delivered_at=delivered_at, status=status
                    )
                    if self.observer is not None:
                        self.observer.delivery_tried(claimed.subscriber, "delivered")
                        if recorded:  # else the node that took the claim over records it
                            lag = delivered_at - claimed.event_created_at
                            self.observer.delivered(claimed.subscriber, lag.total_seconds())
                    return
                error = f"HTTP {status}: {resp.text[:200]}"
        now = self.clock.now()
        again = self.policy.allows_another(tries, "", timedelta(0))
        next_try = now + self.backoff(tries) if again else None
        if next_try is None:
            log.warning(
                "delivery %d of event %s to %s failed for good after %d tries: %s",
                claimed.sequence,
                claimed.event_id,
                claimed.subscriber,
                tries,
                error,
            )
        await self.store.finish(
            claimed, self.node_id, next_try_at=next_try, error=error, status=status
        )
        if self.observer is not None:
            self.observer.delivery_tried(
                claimed.subscriber if target is not None else "",
                "failed" if next_try is not None else "gave_up",
            )

    async def _tick(self) -> None:
        if self._stopping:  # a job's task created before stop() paused the scheduler
            return
        task = asyncio.current_task()
        assert task is not None
        self._running.add(task)
        try:
            await self.run_once()
        except Exception as exc:  # noqa: BLE001 - logged; the next tick tries again
            if store_outage(exc):
                OUTAGES.unavailable("delivery", exc)
            else:
                log.exception("event delivery failed on node %s", self.node_id)
        else:
            OUTAGES.recovered("delivery")
        finally:
            self._running.discard(task)

    def start(self) -> None:
        """Run :meth:`run_once` every ``delivery_scan_seconds`` (one at a time)."""
        self.jobs.add(
            self._tick,
            "interval",
            seconds=self.interval,
            id="flowpark.delivery",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=None,
            next_run_time=datetime.now(UTC),
        )

    async def stop(self, grace_seconds: float = 10.0) -> None:
        """Stop: no new run; an in-flight one finishes (up to ``grace_seconds``)."""
        self._stopping = True
        self.jobs.remove("flowpark.delivery")
        running = list(self._running)
        if running:
            await asyncio.wait(running, timeout=grace_seconds)
            for task in running:  # what outlived the grace
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
        if self._own_jobs:
            self.jobs.shutdown()
