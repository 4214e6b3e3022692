"""Instance-key uniqueness between nodes: starts with one key made at once by several
engines, each with its own connection pool, on one store. The partial unique index decides;
exactly one start creates an instance and every other one is refused naming it."""

from __future__ import annotations

import asyncio

import pytest

from flowpark.errors import InstanceKeyInUse
from flowpark.store import SqlStore
from flowpark.store.db import make_async_engine
from tests.support.journal import new_instance

pytestmark = pytest.mark.postgres

NODES = 4
STARTS_PER_NODE = 5


async def test_concurrent_starts_with_one_key_on_several_nodes_create_one_instance(
    store_url: str,
) -> None:
    engines = [make_async_engine(store_url) for _ in range(NODES)]
    try:
        journals = [SqlStore(e) for e in engines]
        for round_ in range(3):  # three contests, each for a key of its own
            key = f"doc-{round_}"
            news = [
                new_instance(instance_key=key, idempotency_key=f"k-{round_}-{n}-{i}")
                for n in range(NODES)
                for i in range(STARTS_PER_NODE)
            ]
            results = await asyncio.gather(
                *(
                    journals[index // STARTS_PER_NODE].intake.create_instance(new)
                    for index, new in enumerate(news)
                ),
                return_exceptions=True,
            )
            created = [r[0].id for r in results if isinstance(r, tuple) and r[1]]
            assert len(created) == 1, results
            refused = [r for r in results if isinstance(r, InstanceKeyInUse)]
            assert len(refused) == len(news) - 1, results
            assert {r.fields["instance_id"] for r in refused} == set(created)
            holder = await journals[0].reads.get_instance(created[0])
            assert holder.instance_key == key
    finally:
        for e in engines:
            await e.dispose()
