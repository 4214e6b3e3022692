"""What every store promises about providers' shared limits
(:class:`flowpark.engine.ports.providers.ProviderLimits`): one body per promise, run in
memory, on SQLite and on PostgreSQL (the ``journal`` fixture)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from flowpark.engine.ports import GrantRequest, LimitChange, PushbackReport, Store
from flowpark.engine.ports.providers import ProviderState
from flowpark.errors import ProviderNotFound
from tests.support.journal import T0, at


def declared(
    name: str = "ocr", rate: float = 10.0, burst: int = 2, by: str = "declared"
) -> ProviderState:
    return ProviderState(name, rate, burst, None, rate, None, None, 0, T0, by)


async def test_a_grant_reserves_the_burst_now_then_slots_at_the_rate(store: Store) -> None:
    limits = store.providers
    await limits.declare([declared()], T0)
    first = await limits.grant(GrantRequest("ocr", "n1", 5, T0))
    assert first.granted == 5
    # the burst of 2 due now, then one slot per 0.1 s at 10/s, after the burst's own
    # two slots' time (so no window of 1 s holds more than 10)
    assert first.slots == (T0, T0, at(0.2), at(0.3), at(0.4))
    assert first.next_at == at(0.5)
    second = await limits.grant(GrantRequest("ocr", "n2", 3, at(0.05)))
    assert second.slots == (at(0.5), at(0.6), at(0.7))  # after the first node's
    assert second.state.effective_rate == 10.0
    # no slot further than the horizon (1 s) ahead: 0.8 .. 1.1 s from 0.1 s on
    far = await limits.grant(GrantRequest("ocr", "n1", 20, at(0.1)))
    assert far.slots == tuple(at(0.8 + 0.1 * i) for i in range(4))
    none = await limits.grant(GrantRequest("ocr", "n1", 20, at(0.1)))
    assert (none.granted, none.slots, none.next_at) == (0, (), at(1.2))
    idle = await limits.grant(GrantRequest("ocr", "n1", 5, at(10), horizon=timedelta(0)))
    assert idle.slots == (at(10), at(10))  # after an idle time: the burst, due now
    assert idle.next_at == at(10.2)


def most_in_a_window(slots: list[datetime], window: timedelta) -> int:
    """The most slots in any half-open window of ``window`` (one microsecond short of it:
    instants are kept to the microsecond)."""
    ordered = sorted(slots)
    span = window - timedelta(microseconds=1)
    return max(
        (sum(1 for s in ordered[i:] if s < first + span) for i, first in enumerate(ordered)),
        default=0,
    )


@pytest.mark.parametrize("burst", [10, 4, 1])
async def test_the_slots_hold_n_per_window_even_with_the_burst(store: Store, burst: int) -> None:
    """10/s is at most 10 calls in ANY window of 1 s, as a vendor with a sliding window
    counts them: a burst after a quiet time is followed by the burst's own slots' time."""
    limits = store.providers
    await limits.declare([declared(rate=10.0, burst=burst)], T0)
    slots: list[datetime] = []
    now = T0
    # quiet times of every length between busy spells of two nodes asking in turn
    for quiet in (5.0, 0.35, 1.0, 0.05, 2.5, 0.0, 0.9):
        now += timedelta(seconds=quiet)
        for tick in range(30):
            when = now + timedelta(seconds=0.05 * tick)
            grant = await limits.grant(GrantRequest("ocr", f"n{tick % 2}", 6, when))
            slots += grant.slots
        now += timedelta(seconds=1.5)
    assert len(slots) > 100
    assert most_in_a_window(slots, timedelta(seconds=1)) == 10


async def test_grants_add_up_to_the_rate_whoever_asks(store: Store) -> None:
    limits = store.providers
    await limits.declare([declared(rate=20.0, burst=1)], T0)
    slots: list[datetime] = []
    for tick in range(1, 201):  # 10 s in 50 ms steps, two nodes asking in turn
        node = f"n{tick % 2}"
        slots += (await limits.grant(GrantRequest("ocr", node, 4, at(tick * 0.05)))).slots
    slots.sort()
    assert 200 <= len(slots) <= 221  # 20/s for 10 s, reserved up to 1 s ahead
    # in any 1 s window: the rate, however the batches fell
    assert most_in_a_window(slots, timedelta(seconds=1)) <= 20


async def test_pushback_pauses_halves_once_per_interval_and_floors(store: Store) -> None:
    limits = store.providers
    await limits.declare([declared(rate=10.0, burst=5)], T0)
    state = await limits.pushback(PushbackReport("ocr", T0, at(5), "429; Retry-After 5 s"))
    assert state.effective_rate == 5.0
    assert state.paused_until == at(5)
    assert state.pushbacks == 1
    assert state.lowered_reason == "429; Retry-After 5 s"
    # a second pushback within the interval: counted, pause kept, no second halving
    again = await limits.pushback(PushbackReport("ocr", at(1), at(4), "429"))
    assert (again.effective_rate, again.paused_until, again.pushbacks) == (5.0, at(5), 2)
    paused = await limits.grant(GrantRequest("ocr", "n1", 3, at(2)))
    assert paused.granted == 0
    assert paused.next_at == at(5)
    for second in (6, 12, 18, 24):  # later pushbacks halve again, down to the floor
        state = await limits.pushback(PushbackReport("ocr", at(second), at(second + 5), "503"))
    assert state.effective_rate == pytest.approx(1.0)  # 10 * floor_ratio 0.1


async def test_the_effective_rate_recovers_additively_after_a_clean_interval(
    store: Store,
) -> None:
    limits = store.providers
    await limits.declare([declared(rate=10.0, burst=1)], T0)
    await limits.pushback(PushbackReport("ocr", T0, at(1), "429"))
    assert (await limits.grant(GrantRequest("ocr", "n1", 1, at(4)))).state.effective_rate == 5.0
    # clean from 5 s on: +5 % of the limit per second, shown as of an instant before a grant
    assert [s.effective_rate for s in await limits.states(at(8))] == [pytest.approx(6.5)]
    assert [s.effective_rate for s in await limits.states()] == [5.0]  # as stored
    grant = await limits.grant(GrantRequest("ocr", "n1", 1, at(8)))
    assert grant.state.effective_rate == pytest.approx(6.5)
    assert grant.slots == (at(8),)
    assert grant.state.lowered_reason == "429"  # still lowered: the reason stays
    assert [s.lowered_reason for s in await limits.states(at(12))] == ["429"]  # 8.5/s
    # back at the limit: the reason is gone, read as of an instant and once granted
    assert [s.lowered_reason for s in await limits.states(at(30))] == [None]
    grant = await limits.grant(GrantRequest("ocr", "n1", 1, at(30)))
    assert (grant.state.effective_rate, grant.state.lowered_reason) == (10.0, None)
    assert [s.lowered_reason for s in await limits.states()] == [None]  # as stored
    # a later pushback lowers it again from the limit, with its own reason
    again = await limits.pushback(PushbackReport("ocr", at(31), at(32), "503"))
    assert (again.effective_rate, again.lowered_reason) == (5.0, "503")


async def test_a_limit_set_at_or_below_the_lowered_rate_clears_the_reason(
    store: Store,
) -> None:
    limits = store.providers
    await limits.declare([declared(rate=10.0, burst=1)], T0)
    await limits.pushback(PushbackReport("ocr", T0, at(1), "429"))
    kept = await limits.set_limit(LimitChange("ocr", "ops", at(2), rate_per_second=8.0))
    assert (kept.effective_rate, kept.lowered_reason) == (5.0, "429")  # still below it
    lowered = await limits.set_limit(LimitChange("ocr", "ops", at(3), rate_per_second=4.0))
    assert (lowered.effective_rate, lowered.lowered_reason) == (4.0, None)
    raised = await limits.set_limit(LimitChange("ocr", "ops", at(4), rate_per_second=6.0))
    assert (raised.effective_rate, raised.lowered_reason) == (6.0, None)  # not lowered now


async def test_an_operator_change_is_kept_and_a_setting_replaces_a_declaration(
    store: Store,
) -> None:
    limits = store.providers
    await limits.declare([declared("a"), declared("b")], T0)
    await limits.declare([declared("a", rate=3.0, by="setting")], at(1))
    changed = await limits.set_limit(LimitChange("b", "ops", at(2), rate_per_second=7.0, burst=3))
    assert (changed.rate_per_second, changed.burst, changed.updated_by) == (7.0, 3, "ops")
    assert changed.updated_at == at(2)
    await limits.declare([declared("a", rate=50.0), declared("b", rate=50.0)], at(3))
    await limits.declare([declared("b", rate=9.0, by="setting")], at(3))
    states = {s.name: s for s in await limits.states()}
    assert states["a"].rate_per_second == 3.0  # a declaration does not replace a setting
    assert states["a"].updated_by == "setting"
    assert states["b"].rate_per_second == 7.0  # nothing replaces an operator's change
    assert states["b"].effective_rate == 7.0
    with pytest.raises(ValueError):
        await limits.set_limit(LimitChange("a", "ops", at(4), rate_per_second=0.0))


async def test_an_unknown_provider_is_refused(store: Store) -> None:
    with pytest.raises(ProviderNotFound):
        await store.providers.grant(GrantRequest("nope", "n1", 1, T0))
    with pytest.raises(ProviderNotFound):
        await store.providers.set_limit(LimitChange("nope", "ops", T0, burst=2))
    with pytest.raises(ProviderNotFound):
        await store.providers.pushback(PushbackReport("nope", T0, at(1), "429"))


async def test_outcome_counts_are_tallied_per_minute(store: Store) -> None:
    limits = store.providers
    await limits.declare([declared()], T0)
    await limits.grant(GrantRequest("ocr", "n1", 1, at(1), ok=3, failed=1))
    await limits.grant(GrantRequest("ocr", "n2", 1, at(2), ok=2, pushback=1, deferred=4))
    await limits.grant(GrantRequest("ocr", "n1", 1, at(61), ok=1))
    minutes = await limits.tallies("ocr", T0)
    assert [(m.ok, m.pushback, m.failed, m.deferred) for m in minutes] == [
        (5, 1, 1, 4),
        (1, 0, 0, 0),
    ]
    assert minutes[0].minute == T0.replace(second=0, microsecond=0)
    assert len(await limits.tallies("ocr", at(61))) == 1
    assert replace(minutes[1]).ok == 1


async def test_concurrent_grants_never_reserve_one_slot_twice(store: Store) -> None:
    import asyncio

    limits = store.providers
    await limits.declare([declared(rate=10.0, burst=4)], T0)
    grants = await asyncio.gather(
        *(limits.grant(GrantRequest("ocr", f"n{i}", 3, at(0.5), ok=i % 2)) for i in range(6))
    )
    # the burst of 4 due now, whole to the first grant (its node lets what it does not use
    # lapse), then from 0.9 s (after the burst's own slots' time) to the horizon 1.5 s: 11
    # slots, each once
    assert sum(g.granted for g in grants) == 11
    slots = sorted(s for g in grants for s in g.slots)
    assert slots == sorted([at(0.5)] * 4 + [at(0.9 + 0.1 * i) for i in range(7)])
    # the grants that carried counts (PostgreSQL: the tally in the grant's statement)
    assert [m.ok for m in await limits.tallies("ocr", T0)] == [3]


async def test_nodes_declaring_one_provider_at_once_make_one_row(store: Store) -> None:
    import asyncio

    await asyncio.gather(*(store.providers.declare([declared()], T0) for _ in range(4)))
    assert [s.name for s in await store.providers.states()] == ["ocr"]
