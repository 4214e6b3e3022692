"""``InstanceRecord.evolve``: the copy a run makes of its record is what
``dataclasses.replace`` makes, and a name that is no field is refused as there."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta

import pytest

from flowpark.engine.records import InstanceRecord, InstanceState, WakeKind
from flowpark.errors import FlowFailure

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def record() -> InstanceRecord:
    return InstanceRecord(
        "0190f1a2-0000-7000-8000-000000000001",
        "document.process",
        "1.0.0",
        InstanceState.SUSPENDED,
        {"documentId": "d-1"},
        AT,
        AT,
        wake_at=AT + timedelta(seconds=5),
        wake_step_id=2,
        wake_scope=1,
        wake_kind=WakeKind.POLL,
        fencing_token=7,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"wake_step_id": None, "wake_scope": None},
        {"state": InstanceState.RUNNING, "updated_at": AT + timedelta(seconds=1)},
        {"ending": InstanceState.FAILED, "failure": FlowFailure("flow.x", "broke")},
        {f.name: getattr(record(), f.name) for f in fields(InstanceRecord)},
    ],
)
def test_evolve_makes_what_replace_makes(changes: dict[str, object]) -> None:
    before = record()
    copy = before.evolve(**changes)
    assert copy == replace(before, **changes)  # type: ignore[arg-type]
    assert type(copy) is InstanceRecord and copy is not before
    assert before == record(), "the original changed"
    with pytest.raises(AttributeError):
        copy.state = InstanceState.COMPLETED  # type: ignore[misc]


def test_evolve_refuses_a_name_that_is_no_field() -> None:
    with pytest.raises(TypeError, match="no field wake"):
        record().evolve(wake=None)
