"""What every store promises of correlation keys (``Commit.correlations``, the
:class:`~flowpark.engine.ports.Correlations` port, their release by ``finish``), one body per
promise, run in memory, on SQLite and on PostgreSQL (the ``journal`` fixture)."""

from __future__ import annotations

import asyncio

import pytest

from flowpark.engine.ports import Commit, Correlation, Park, Store
from flowpark.engine.records import InstanceState
from flowpark.errors import CorrelationKeyInUse
from tests.support.journal import FLOW, at, new_instance, step

CI = Correlation(FLOW[0], "ci", "run-17")


async def started(store: Store, **changes: object) -> str:
    record, created = await store.intake.create_instance(new_instance(**changes))
    assert created
    return record.id


async def holding(store: Store, *correlations: Correlation, step_id: int = 1) -> str:
    """An instance started by node-a (token 1) whose step ``step_id`` recorded the keys."""
    instance_id = await started(store)
    row = step(instance_id, step_id=step_id, committed_at=at(2))
    await store.runs.commit(
        Commit(instance_id, 1, at(2), at(32), (row,), correlations=correlations)
    )
    return instance_id


async def test_a_key_is_written_with_its_row_and_found_by_flow_provider_and_key(
    store: Store,
) -> None:
    instance_id = await holding(store, CI, Correlation(FLOW[0], "ocr", "job-1"))
    found = await store.correlations.holder(FLOW[0], "ci", "run-17")
    assert found is not None
    assert (found.instance_id, found.flow_name, found.flow_version) == (instance_id, *FLOW)
    assert (found.provider, found.key, found.created_at) == ("ci", "run-17", at(2))
    assert [r.step_id for r in (await store.runs.load(instance_id)).steps] == [1]
    held = await store.correlations.held(instance_id)
    assert [(h.provider, h.key) for h in held] == [("ci", "run-17"), ("ocr", "job-1")]
    # another provider's key, another flow's, another key: none of them
    assert await store.correlations.holder(FLOW[0], "ocr", "run-17") is None
    assert await store.correlations.holder("other.flow", "ci", "run-17") is None
    assert await store.correlations.holder(FLOW[0], "ci", "run-18") is None


async def test_a_key_the_instance_holds_is_kept_as_it_was(store: Store) -> None:
    instance_id = await holding(store, CI)
    row = step(instance_id, step_id=2, committed_at=at(5))
    park = Park(at(60), 3, 0, "node-a")
    await store.runs.commit(
        Commit(instance_id, 1, at(5), at(35), (row,), park=park, correlations=(CI,))
    )
    found = await store.correlations.holder(FLOW[0], "ci", "run-17")
    assert found is not None and found.created_at == at(2)  # the first recording's
    # a suspended instance is live: it still holds the key
    record = await store.reads.get_instance(instance_id)
    assert record.state is InstanceState.SUSPENDED
    assert found.instance_id == instance_id


async def test_a_key_another_live_instance_holds_refuses_the_whole_commit(
    store: Store,
) -> None:
    first = await holding(store, CI)
    second = await started(store)
    row = step(second, step_id=1)
    park = Park(at(60), 3, 0, "node-a")
    with pytest.raises(CorrelationKeyInUse) as refused:
        await store.runs.commit(
            Commit(
                second,
                1,
                at(3),
                at(33),
                (row,),
                park=park,
                correlations=(Correlation(FLOW[0], "ocr", "job-9"), CI),
            )
        )
    assert refused.value.fields["holder_id"] == first
    assert (refused.value.fields["provider"], refused.value.fields["key"]) == ("ci", "run-17")
    # nothing of it: no row, no park, no key (not even the free one)
    snapshot = await store.runs.load(second)
    assert snapshot.steps == []
    assert snapshot.instance.state is InstanceState.RUNNING
    assert await store.correlations.held(second) == []
    assert await store.correlations.holder(FLOW[0], "ocr", "job-9") is None
    # the same key of another flow is another key
    other = await started(store, flow_name="other.flow")
    row = step(other, step_id=1)
    other_ci = Correlation("other.flow", "ci", "run-17")
    await store.runs.commit(Commit(other, 1, at(3), at(33), (row,), correlations=(other_ci,)))
    found = await store.correlations.holder("other.flow", "ci", "run-17")
    assert found is not None and found.instance_id == other


@pytest.mark.parametrize(
    "state", [InstanceState.COMPLETED, InstanceState.FAILED, InstanceState.CANCELLED]
)
async def test_an_ending_releases_the_keys_for_another_instance(
    store: Store, state: InstanceState
) -> None:
    first = await holding(store, CI)
    await store.runs.finish(first, 1, at(10), state, result={"ok": True})
    assert await store.correlations.holder(FLOW[0], "ci", "run-17") is None
    assert await store.correlations.held(first) == []
    second = await holding(store, CI)
    found = await store.correlations.holder(FLOW[0], "ci", "run-17")
    assert found is not None and found.instance_id == second


async def test_a_completion_refused_under_a_cancel_keeps_the_keys(store: Store) -> None:
    instance_id = await holding(store, CI)
    await store.intake.request_cancel(instance_id, "node-b", at(3), at(33))
    await store.runs.finish(instance_id, 1, at(4), InstanceState.COMPLETED, 1)
    found = await store.correlations.holder(FLOW[0], "ci", "run-17")
    assert found is not None and found.instance_id == instance_id


def test_a_commit_of_keys_needs_a_row() -> None:
    with pytest.raises(ValueError, match="correlation keys"):
        Commit("i", 1, at(1), at(31), correlations=(CI,))


async def test_two_instances_racing_for_one_key_record_one_holder(store: Store) -> None:
    first, second = await started(store), await started(store)

    async def record(instance_id: str) -> str:
        row = step(instance_id, step_id=1)
        commit = Commit(instance_id, 1, at(2), at(32), (row,), correlations=(CI,))
        try:
            await store.runs.commit(commit)
        except CorrelationKeyInUse:
            return "refused"
        return "recorded"

    outcomes = await asyncio.gather(record(first), record(second))
    assert sorted(outcomes) == ["recorded", "refused"]
    winner = first if outcomes[0] == "recorded" else second
    loser = second if winner == first else first
    found = await store.correlations.holder(FLOW[0], "ci", "run-17")
    assert found is not None and found.instance_id == winner
    assert (await store.runs.load(loser)).steps == []
