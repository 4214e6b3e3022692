"""What every store promises about what waits on providers
(:class:`flowpark.engine.ports.provider_waits.ProviderWaits`): parked instances grouped by
flow version, wake step and kind, and the oldest deferral of a group; in memory, on SQLite
and on PostgreSQL."""

from __future__ import annotations

from flowpark.engine.ports import Commit, Park, Store
from flowpark.engine.ports.provider_waits import DEFERRAL_KINDS, ProviderWaits, WaitGroup
from flowpark.engine.records import WakeKind
from flowpark.store.memory import MemoryStore
from flowpark.store.provider_waits import MemoryProviderWaits, SqlProviderWaits
from flowpark.store.sql_store import SqlStore
from tests.support.journal import FLOW, at, new_instance


def waits_of(store: Store) -> ProviderWaits:
    if isinstance(store, MemoryStore):
        return MemoryProviderWaits(store)
    assert isinstance(store, SqlStore)
    return SqlProviderWaits(store.engine)


async def park_at(store: Store, seconds: float, step_id: int, kind: WakeKind, wake: float) -> str:
    record, _ = await store.intake.create_instance(new_instance())
    park = Park(at(wake), step_id, 0, "node-a", kind=kind)
    await store.runs.commit(Commit(record.id, 1, at(seconds), at(seconds + 30), park=park))
    return record.id


async def test_parked_instances_group_by_step_and_kind(store: Store) -> None:
    waits = waits_of(store)
    assert await waits.wait_groups() == []
    await park_at(store, 5, 3, WakeKind.PROVIDER_BUDGET, 9)
    first = await park_at(store, 2, 3, WakeKind.PROVIDER_BUDGET, 8)
    await park_at(store, 4, 3, WakeKind.POLL, 60)
    pushed = await park_at(store, 7, 5, WakeKind.PROVIDER_PUSHBACK, 12)
    await store.intake.create_instance(new_instance())  # running: not parked
    groups = await waits.wait_groups()
    name, version = FLOW
    assert groups == [
        WaitGroup(name, version, 3, "poll", 1, at(4), at(60)),
        WaitGroup(name, version, 3, "provider_budget", 2, at(2), at(8)),
        WaitGroup(name, version, 5, "provider_pushback", 1, at(7), at(12)),
    ]
    oldest = await waits.oldest(name, version, 3, DEFERRAL_KINDS)
    assert oldest is not None
    assert (oldest.instance_id, oldest.since, oldest.wake_at) == (first, at(2), at(8))
    later = await waits.oldest(name, version, 5, DEFERRAL_KINDS)
    assert later is not None and later.instance_id == pushed
    assert await waits.oldest(name, version, 4, DEFERRAL_KINDS) is None
    assert await waits.oldest("other.flow", version, 3, DEFERRAL_KINDS) is None
