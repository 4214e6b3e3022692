"""PostgreSQL group commit of correlation keys: rows that record keys share the commit
batch's statement (one more insert in it), a key the instance holds already is kept, and a
key another live instance holds refuses only its own commit (which then says why)."""

from __future__ import annotations

import asyncio

import pytest

from flowpark.engine.ports.values import Correlation
from flowpark.engine.records import Ack
from flowpark.errors import CorrelationKeyInUse
from flowpark.store import SqlStore
from tests.postgres.test_group_commit import counts, lanes, started, step
from tests.support.journal import FLOW, at, commit_of

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.parametrize("sql_store_url", ["postgres"], indirect=True),
]


@pytest.fixture
def journal(sql_store: SqlStore) -> SqlStore:
    assert sql_store.is_postgresql and sql_store.lanes is not None
    return sql_store


def key(name: str) -> Correlation:
    return Correlation(FLOW[0], "ocr", name)


async def test_rows_with_keys_share_one_batch_and_a_taken_key_refuses_only_its_own(
    journal: SqlStore,
) -> None:
    ids = await started(journal, 12)
    holder = ids[0]
    first = commit_of(1, step(holder), lease_until=at(40), correlations=(key("job-taken"),))
    assert await journal.runs.commit(first) == Ack(True, False)
    before = counts(lanes(journal).commit)

    commits = [
        commit_of(
            1,
            step(i, step_id=1, committed_at=at(5)),
            lease_until=at(40),
            correlations=(key("job-taken" if n == 1 else f"job-{n}"),),
        )
        for n, i in enumerate(ids)
    ]
    results = await asyncio.gather(
        *(journal.runs.commit(c) for c in commits), return_exceptions=True
    )

    # one batch statement for all twelve; the refused batch's items then went alone
    assert counts(lanes(journal).commit)[0] >= before[0] + 1
    refused = results[1]
    assert isinstance(refused, CorrelationKeyInUse), refused
    assert [r for n, r in enumerate(results) if n != 1] == [Ack(True, False)] * 11
    taken = await journal.correlations.holder(FLOW[0], "ocr", "job-taken")
    assert taken is not None and taken.instance_id == holder  # kept as it was
    for n, instance_id in enumerate(ids):
        if n in (0, 1):
            continue
        found = await journal.correlations.holder(FLOW[0], "ocr", f"job-{n}")
        assert found is not None and found.instance_id == instance_id
    assert await journal.correlations.held(ids[1]) == []  # nothing of the refused commit


async def test_keys_ride_on_the_batch_without_a_transaction_of_their_own(
    journal: SqlStore,
) -> None:
    ids = await started(journal, 8)
    before = counts(lanes(journal).commit)
    commits = [
        commit_of(1, step(i), lease_until=at(40), correlations=(key(f"solo-{n}"),))
        for n, i in enumerate(ids)
    ]
    assert (
        await asyncio.gather(*(journal.runs.commit(c) for c in commits)) == [Ack(True, False)] * 8
    )
    batches, items = counts(lanes(journal).commit)
    assert items == before[1] + 8  # every one went through the group commit's lane
    assert batches <= before[0] + 8
    for n, instance_id in enumerate(ids):
        found = await journal.correlations.holder(FLOW[0], "ocr", f"solo-{n}")
        assert found is not None and found.instance_id == instance_id
