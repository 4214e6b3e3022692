"""Deadline rows kept inside the journal row written with them (flowpark.store.carried)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from flowpark.engine.decide.deadlines import POLL_BUDGET, RETRY_TOTAL, deadline_row, ends_at
from flowpark.engine.records import Outcome, StepKind, StepRow
from flowpark.store.carried import CarryingRow, carried_column, pack, unpack

AT = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
ID = "01900000-0000-7000-8000-000000000001"


def _step(step_id: int, scope: int = 0, name: str = "ocr.upload") -> StepRow:
    return StepRow(
        ID, step_id, scope, StepKind.STEP, name, Outcome.SUCCESS, AT, AT, values={"k": [1]}
    )


def _deadline(step_id: int, name: str = RETRY_TOTAL, **kw: object) -> StepRow:
    return deadline_row(ID, step_id, 0, name, AT, AT + timedelta(minutes=3), **kw)  # type: ignore[arg-type]


def _stored(rows: tuple[StepRow, ...], sequence: int = 7) -> list[StepRow]:
    """What reading the packed rows back gives (through JSON, as a database holds it)."""
    out: list[StepRow] = []
    for n, row in enumerate(rows):
        column = carried_column(row)
        plain = StepRow(**{k: v for k, v in row.__dict__.items() if k not in ("before", "after")})
        plain = StepRow(**{**plain.__dict__, "sequence": sequence + n})
        out.extend(unpack(plain, json.loads(json.dumps(column)) if column else None))
    return out


def _without_sequence(rows: list[StepRow]) -> list[StepRow]:
    return [StepRow(**{**r.__dict__, "sequence": None}) for r in rows]


def test_deadlines_after_a_row_go_inside_it_and_read_back_in_order() -> None:
    rows = (_step(0), _deadline(1, POLL_BUDGET, warn_at=AT), _deadline(2))
    packed = pack(rows)
    assert len(packed) == 1 and isinstance(packed[0], CarryingRow)
    back = _stored(packed)
    assert _without_sequence(back) == list(rows)
    assert [r.sequence for r in back] == [7, 7, 7]  # one write, one place in commit order
    assert ends_at(back[1]) == AT + timedelta(minutes=3)


def test_deadlines_before_the_first_row_are_carried_before_it() -> None:
    rows = (_deadline(0), _deadline(1, POLL_BUDGET), _step(0), _deadline(2), _step(3))
    packed = pack(rows)
    assert [type(r) for r in packed] == [CarryingRow, StepRow]
    assert _without_sequence(_stored(packed)) == list(rows)


def test_a_write_of_deadlines_only_keeps_them_as_rows() -> None:
    rows = (_deadline(0), _deadline(1, POLL_BUDGET))
    assert pack(rows) == rows
    assert pack((_step(0),)) == (_step(0),)


def test_an_extensions_other_values_are_kept() -> None:
    extension = _deadline(1, POLL_BUDGET, try_number=2)
    extension = StepRow(**{**extension.__dict__, "values": {**extension.values, "actionId": "a"}})
    rows = (_step(0), extension)
    assert _without_sequence(_stored(pack(rows))) == list(rows)


@pytest.mark.parametrize(
    "values",
    [
        {"endsAt": "2026-03-01T12:03:00+01:00"},  # not UTC: would read back in UTC
        {"endsAt": "2026-03-01T12:03:00.000000+00:00"},  # not isoformat's own text
        {"endsAt": "soon"},
        {"endsAt": "2026-03-01T12:03:00+00:00", "warnAt": "2026-03-01 12:02"},
        {},
    ],
)
def test_a_deadline_the_compact_form_cannot_give_back_stays_a_row(values: dict[str, str]) -> None:
    odd = StepRow(**{**_deadline(1).__dict__, "values": values})
    rows = (_step(0), odd)
    assert pack(rows) == rows


def test_a_deadline_with_a_non_utc_instant_stays_a_row() -> None:
    local = AT.astimezone(timezone(timedelta(hours=2)))
    odd = StepRow(**{**_deadline(1).__dict__, "started_at": local})
    assert pack((_step(0), odd)) == (_step(0), odd)


def test_a_malformed_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="not a carried deadline"):
        unpack(_step(0), [[1, 0, "retry.total"]])


def test_instants_before_and_after_the_carriers_commit_read_back_exactly() -> None:
    early = deadline_row(
        ID,
        1,
        0,
        POLL_BUDGET,
        AT - timedelta(hours=5, microseconds=3),
        AT + timedelta(days=2),
        committed_at=AT + timedelta(microseconds=1),
        warn_at=AT + timedelta(days=1),
    )
    rows = (_step(0), early)
    column = carried_column(pack(rows)[0])
    assert column is not None and len(json.dumps(column, separators=(",", ":"))) < 60
    assert _without_sequence(_stored(pack(rows))) == list(rows)


def test_a_deadline_of_an_unknown_name_stays_a_row() -> None:
    odd = StepRow(**{**_deadline(1).__dict__, "capability_id": "custom.window"})
    assert pack((_step(0), odd)) == (_step(0), odd)


def _odd(step_id: int) -> StepRow:
    """A deadline the compact form cannot give back (stored as a row of its own)."""
    row = _deadline(step_id)
    return StepRow(**{**row.__dict__, "values": {"endsAt": "2026-03-01T12:03:00Z"}})


@pytest.mark.parametrize(
    "rows",
    [
        (_deadline(1), _odd(2), _step(0)),  # carried before: the row of its own is between
        (_step(0), _odd(2), _deadline(1)),  # carried after: the same
        (_deadline(1), _deadline(3), _odd(2), _step(0), _odd(4), _deadline(5), _step(6)),
    ],
)
def test_a_deadline_stored_as_a_row_keeps_its_place_among_carried_ones(
    rows: tuple[StepRow, ...],
) -> None:
    """Reading back gives the write's order: the decider takes the last deadline row of a
    (step, scope) as the one in force, and the open budget by the rows' order."""
    assert _without_sequence(_stored(pack(rows))) == list(rows)


def test_deadlines_on_the_far_side_of_a_row_of_their_own_stay_carried() -> None:
    rows = (_odd(2), _deadline(1), _step(0), _deadline(3), _odd(4))
    packed = pack(rows)
    assert [type(r) for r in packed] == [StepRow, CarryingRow, StepRow]
    assert _without_sequence(_stored(packed)) == list(rows)
