"""A bulk wake answers at once, on both stores: its batch records the wakes in a few
statements whatever its size (not one inline run per instance at the provider's pace), and
the sweep then runs them within the provider's limit, each woken retry's try long before
its schedule; every instance's history names who woke it, and when."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel
from sqlalchemy import event

from flowpark.engine.records import InstanceState, StepKind, WakeKind
from flowpark.flows import Capability, CapabilityOptions, Flow, Provider, RetryPolicy, StepContext
from flowpark.store import SqlStore
from flowpark.testing import Scripted
from tests.api.operator_support import Operated, operated
from tests.engine.flows import Job, Order
from tests.support.api import instant
from tests.support.server import TOKEN

OPS = "ops-secret"
RATE, BURST = 10.0, 1
HOUR = timedelta(hours=1)
ACTIONS = "/api/v1/instances/actions"
#: the statements a batch may cost, whatever its size: the list's page, the records of its
#: Idempotency-Key, the marks, the state of the instances not marked, the records, the
#: records a concurrent repeat of the key wrote first (a batch that marks all, without a
#: key: three)
MOST_STATEMENTS = 6


class Submit(Capability):
    """One call of a provider that takes 10 calls a second; a failed try is retried an
    hour later."""

    id = "w.submit"
    idempotent = True
    provider = Provider("limited", rate_per_second=RATE, burst=BURST)
    puts = (Job,)
    options = CapabilityOptions(
        retry=RetryPolicy(initial_interval=HOUR, maximum_interval=HOUR, maximum_tries=5)
    )

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job(job_id="j"))


def _play(ctx: StepContext) -> BaseModel:
    if ctx.try_number == 1:
        raise RuntimeError("provider answered 503")
    return Job(job_id="j")


@contextmanager
def _statements(op: Operated) -> Iterator[list[str]]:
    """The statements the server sends about instances and their actions meanwhile (its
    liveness beats aside)."""
    store = op.server.app.state.engine.store
    assert isinstance(store, SqlStore)
    sent: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "flow_instance" in statement or "flow_action" in statement:
            sent.append(statement)

    engine = store.engine.sync_engine
    event.listen(engine, "before_cursor_execute", count)
    try:
        yield sent
    finally:
        event.remove(engine, "before_cursor_execute", count)


async def _retry_starts(op: Operated, instance_id: str) -> list[datetime]:
    snap = await op.h.snapshot(instance_id)
    return [r.started_at for r in snap.steps if r.kind is StepKind.STEP]


async def test_a_bulk_wake_of_a_limited_providers_instances_answers_in_a_few_statements(
    store_url: str,
) -> None:
    flow = Flow("w.submit", "1.0.0", input=Order).step(Submit())
    subs = {"w.submit": Scripted(_play)}
    async with operated(
        store_url, [flow], subs, api_tokens=f"{TOKEN},ops:{OPS}:read+operate"
    ) as op:
        h = op.h
        ids = []
        for n in range(120):  # one slot each: every first try failed, retried in an hour
            inst = (await h.start("w.submit", {"order_id": f"o-{n}"})).instance
            assert (inst.state, inst.wake_kind) == (InstanceState.SUSPENDED, WakeKind.RETRY)
            ids.append(inst.id)
            h.clock.advance(timedelta(seconds=1 / RATE))
        h.clock.advance(timedelta(seconds=10))
        woken_at = h.clock.now()
        body: dict[str, Any] = {"action": "wake", "filter": {"flow": "w.submit"}}
        async with op.client(OPS) as client:
            with _statements(op) as small:
                first = await client.post(ACTIONS, json={**body, "limit": 20})
            assert first.status_code == 200, first.text
            cursor = first.json()["nextCursor"]
            with _statements(op) as large:
                rest = await client.post(ACTIONS, json={**body, "limit": 100, "cursor": cursor})
            assert rest.status_code == 200, rest.text
            view = (await client.get(f"/api/v1/instances/{ids[7]}")).json()
        # a batch of 100 costs what a batch of 20 does: no run, no call in the request
        assert len(small) <= MOST_STATEMENTS, small
        assert len(large) <= MOST_STATEMENTS, large
        answers = [first.json(), rest.json()]
        assert [(a["acted"], a["skipped"], a.get("queued")) for a in answers] == [
            (20, 0, True),
            (100, 0, True),
        ]
        assert rest.json()["nextCursor"] is None
        for instance_id in ids:
            assert len(await _retry_starts(op, instance_id)) == 1
        (action,) = view["actions"]
        assert (action["action"], action["actor"]) == ("wake", "ops")
        assert instant(action["actedAt"]) == woken_at

        for _ in range(1000):  # the sweep runs them, at the provider's pace
            target = await h.store.reads.next_wake()
            if target is None or target > woken_at + HOUR:
                break
            await h.advance_to_next_wake()
        seconds = []
        for instance_id in ids:
            inst = await h.instance(instance_id)
            assert inst.state is InstanceState.COMPLETED and not inst.woken
            tried, woken = await _retry_starts(op, instance_id)
            assert woken < tried + HOUR  # the woken try, not the scheduled one
            seconds.append((woken - woken_at).total_seconds())
        seconds.sort()
        for n, start in enumerate(seconds):  # in any second: the rate and the burst at most
            assert sum(1 for s in seconds[n:] if s < start + 1) <= RATE + BURST, seconds
        assert seconds[-1] >= (len(ids) - BURST) / RATE - 1  # spread, not all at once
