"""The delivery backoff: exponential (doubled per send), capped, each delay drawn between
half of its ceiling and all of it; the body a subscriber receives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx

from flowpark.engine.clock import VirtualClock
from flowpark.engine.ports.outbox import ClaimedDelivery
from flowpark.runtime.delivery import Deliverer, delivery_body
from flowpark.settings import Settings


def test_each_delay_doubles_up_to_the_cap_with_jitter_below_it() -> None:
    settings = Settings(delivery_backoff_seconds=1.0, delivery_max_backoff_seconds=10.0)
    http = httpx.AsyncClient()
    deliverer = Deliverer(None, [], http, VirtualClock(), "n", settings)  # type: ignore[arg-type]
    for sends, ceiling in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (30, 10.0)]:
        delays = {deliverer.backoff(sends) for _ in range(200)}
        assert all(
            timedelta(seconds=ceiling / 2) <= d <= timedelta(seconds=ceiling) for d in delays
        )
        assert len(delays) > 1  # jittered, not one fixed value


def test_the_body_is_the_event_as_standard_webhooks_suggests() -> None:
    claimed = ClaimedDelivery(
        sequence=1,
        subscriber="audit",
        tries=0,
        claimed_until=datetime(2026, 1, 1, tzinfo=UTC),
        event_id="e-1",
        event_name="document.processed",
        payload={"documentId": "d-1", "fieldCount": 2},
        event_created_at=datetime(2026, 1, 1, 10, 0, tzinfo=UTC),
        instance_id="i-1",
    )
    assert delivery_body(claimed) == (
        '{"type":"document.processed","timestamp":"2026-01-01T10:00:00Z",'
        '"data":{"documentId":"d-1","fieldCount":2},"eventId":"e-1","instanceId":"i-1"}'
    )
