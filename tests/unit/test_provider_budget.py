"""A node's provider budget over the memory twin of the store: call slots come in batches
(one grant per batch, as large as the tries asking lately), each at its own instant (waited
for when near, else deferred to), unused ones lapse, deferrals are handed out at the
provider's pace, a pushback pauses the provider with one probe per interval and is reported
once, and ``max_in_flight`` caps this node's calls in flight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flowpark.engine.execute.budget import (
    FLUSH_EVERY,
    SLOT_LAPSE,
    Deferred,
    Granted,
    ProviderBudget,
)
from flowpark.engine.observe import Observer
from flowpark.engine.ports import Grant, GrantRequest, PushbackReport
from flowpark.engine.ports.providers import ProviderState
from flowpark.flows import Provider
from flowpark.store.memory_providers import MemoryProviderLimits

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


class Counting(MemoryProviderLimits):
    def __init__(self) -> None:
        super().__init__()
        self.grants: list[GrantRequest] = []
        self.reports: list[PushbackReport] = []

    async def grant(self, request: GrantRequest) -> Grant:
        self.grants.append(request)
        return await super().grant(request)

    async def pushback(self, report: PushbackReport) -> ProviderState:
        self.reports.append(report)
        return await super().pushback(report)


class Heard(Observer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.deferrals: list[tuple[str, str]] = []
        self.limits: list[tuple[str, float, float]] = []

    def provider_call(self, provider: str, outcome: str) -> None:
        self.calls.append((provider, outcome))

    def provider_deferred(self, provider: str, reason: str) -> None:
        self.deferrals.append((provider, reason))

    def provider_limit(self, provider: str, limit: float, effective_rate: float) -> None:
        self.limits.append((provider, limit, effective_rate))


async def test_slots_come_in_batches_each_at_its_instant() -> None:
    store, heard = Counting(), Heard()
    budget = ProviderBudget(store, "n1", observer=heard)
    fast = Provider("fast", rate_per_second=100.0, burst=10)
    verdicts = [await budget.acquire(fast, T0) for _ in range(14)]
    assert verdicts[:10] == [Granted()] * 10  # the burst, due now (all of it, at once)
    # then one slot per 10 ms at 100/s after the burst's own slots' time (so no second
    # holds more than 100): near, so the try waits for it in process
    assert verdicts[10:] == [Granted(at=T0 + 10 * MS * n) for n in (10, 11, 12, 13)]
    # batches as large as the tries asking lately: the burst, then the 11 asking since
    assert [g.wanted for g in store.grants] == [1, 11]
    for _ in range(14):
        budget.release(fast, "ok")
    assert heard.calls == [("fast", "ok")] * 14
    later = await budget.acquire(fast, T0 + timedelta(seconds=1))
    assert later == Granted()
    counted = store.grants[-1]
    assert (counted.ok, counted.deferred) == (14, 0)  # the outcomes ride on the next grant
    assert heard.limits[-1] == ("fast", 100.0, 100.0)


async def test_without_waiting_a_try_defers_to_the_next_slot_at_the_providers_pace() -> None:
    store, heard = Counting(), Heard()
    budget = ProviderBudget(store, "n1", observer=heard, wait=timedelta(0))
    fast = Provider("fast", rate_per_second=100.0, burst=10)
    verdicts = [await budget.acquire(fast, T0) for _ in range(14)]
    assert verdicts[:10] == [Granted()] * 10
    deferred = verdicts[10:]
    assert all(isinstance(v, Deferred) and v.reason == "budget" for v in deferred)
    # to the next free slot (after the burst's own slots' time), then one slot's time
    # apart (the store not asked before)
    assert [v.until for v in deferred if isinstance(v, Deferred)] == [
        T0 + 10 * MS * n for n in (10, 11, 12, 13)
    ]
    assert heard.deferrals == [("fast", "budget")] * 4
    assert await budget.acquire(fast, T0 + 100 * MS) == Granted()  # the slot, now due


async def test_unused_slots_lapse() -> None:
    store = Counting()
    budget = ProviderBudget(store, "n1")
    provider = Provider("p", rate_per_second=50.0, burst=1)
    verdicts = [await budget.acquire(provider, T0) for _ in range(4)]
    assert verdicts[-1] == Granted(at=T0 + 60 * MS)
    assert store.grants[-1].wanted == 4  # slots at 60 .. 120 ms: three not taken
    grants = len(store.grants)
    late = T0 + 120 * MS + SLOT_LAPSE + MS
    assert await budget.acquire(provider, late) == Granted()
    assert len(store.grants) == grants + 1  # the held slots lapsed: a new grant


async def test_a_pushback_pauses_with_one_probe_per_interval_and_is_reported_once() -> None:
    store = Counting()
    budget = ProviderBudget(store, "n1")
    provider = Provider("p", rate_per_second=10.0, burst=2)
    assert await budget.acquire(provider, T0) == Granted()
    until = T0 + timedelta(seconds=10)
    await budget.pushback(provider, T0, until, "429")
    await budget.pushback(provider, T0 + MS, until + MS, "429")  # the same pause: coalesced
    assert len(store.reports) == 1
    (state,) = await store.states()
    assert (state.effective_rate, state.paused_until) == (5.0, until)
    paused = await budget.acquire(provider, T0 + timedelta(seconds=1))
    assert isinstance(paused, Deferred) and paused.reason == "pushback"
    assert paused.until >= until
    # the provider extends the pause: one probe per the first pushback's interval
    await budget.pushback(provider, T0 + timedelta(seconds=5), T0 + timedelta(seconds=60), "429")
    assert len(store.reports) == 2
    early = await budget.acquire(provider, T0 + timedelta(seconds=10) - MS)
    assert isinstance(early, Deferred)
    probe = await budget.acquire(provider, T0 + timedelta(seconds=10))
    assert probe == Granted(probe=True)
    again = await budget.acquire(provider, T0 + timedelta(seconds=15))
    assert isinstance(again, Deferred) and again.until >= T0 + timedelta(seconds=60)
    assert await budget.acquire(provider, T0 + timedelta(seconds=20)) == Granted(probe=True)
    other = ProviderBudget(store, "n2")  # another node learns the pause from the store
    seen = await other.acquire(provider, T0 + timedelta(seconds=21))
    assert isinstance(seen, Deferred) and seen.until >= T0 + timedelta(seconds=60)


async def test_max_in_flight_caps_this_nodes_calls() -> None:
    budget = ProviderBudget(Counting(), "n1")
    provider = Provider("p", rate_per_second=1000.0, burst=100, max_in_flight=2)
    assert await budget.acquire(provider, T0) == Granted()
    assert await budget.acquire(provider, T0) == Granted()
    third = await budget.acquire(provider, T0)
    assert isinstance(third, Deferred) and third.reason == "budget"
    budget.release(provider, "failed")
    assert await budget.acquire(provider, T0) == Granted()


async def test_a_setting_overrides_the_declared_limit() -> None:
    store = Counting()
    overrides = {"p": {"rate_per_second": 2, "burst": 3.0, "max_in_flight": None}}
    budget = ProviderBudget(store, "n1", overrides=overrides)
    await budget.acquire(Provider("p", rate_per_second=50.0, burst=1, max_in_flight=4), T0)
    (state,) = await store.states()
    assert (state.rate_per_second, state.burst, state.max_in_flight) == (2.0, 3, None)
    assert type(state.burst) is int
    assert state.updated_by == "setting"


async def test_a_flush_sends_the_counts_without_taking_a_slot() -> None:
    store = Counting()
    budget = ProviderBudget(store, "n1")
    provider = Provider("p", rate_per_second=10.0, burst=1)
    assert await budget.acquire(provider, T0) == Granted()
    budget.release(provider, "ok")
    await budget.flush(T0 + MS)  # a grant sent counts just now: the next one carries them
    assert len(store.grants) == 1
    await budget.flush(T0 + FLUSH_EVERY)
    assert (store.grants[-1].wanted, store.grants[-1].ok) == (0, 1)
    (minute,) = await store.tallies("p", T0)
    assert minute.ok == 1
    await budget.flush(T0 + 2 * FLUSH_EVERY)  # nothing new: no statement
    assert len(store.grants) == 2
    assert await budget.acquire(provider, T0 + timedelta(seconds=11)) == Granted()


async def test_a_backlog_pays_far_less_than_one_grant_per_call() -> None:
    store = Counting()
    budget = ProviderBudget(store, "n1")
    provider = Provider("p", rate_per_second=100.0, burst=1)
    calls: list[datetime] = []
    for tick in range(1000):  # 5 s of work always waiting, asked every 5 ms
        now = T0 + 5 * MS * tick
        while isinstance(verdict := await budget.acquire(provider, now), Granted):
            calls.append(verdict.at or now)
            budget.release(provider, "ok")
    assert 480 <= len(calls) <= 601  # the rate, and slots reserved up to 1 s ahead
    calls.sort()
    for first in calls:  # in any 1 s window: the rate
        assert sum(1 for c in calls if first <= c < first + timedelta(seconds=1)) <= 100 + 1
    assert len(store.grants) / len(calls) < 0.05  # a batch is up to 100 * 0.5 s = 50 slots
