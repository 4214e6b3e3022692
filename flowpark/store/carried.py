"""Deadline rows stored inside the journal row they were written with.

A deadline (:mod:`flowpark.engine.decide.deadlines`) is written before the call it bounds,
and most often in the same write as the row the run deferred (a poll's budget and its first
attempt's retry window go with the row of the step before the poll). Such a deadline needs
no ``flow_step`` row of its own: the row written with it carries it in its ``carried``
column, a JSON array (migration 0024), and reading the row gives back the deadline rows
where they were, in the same order. The deadlines a start stores with its instance (a
first poll's budget, the first call's retry window) go inside the instance row
(``flow_instance.carried``) and read back first, with ``sequence`` 0. A parked
``document.process`` has two ``flow_step`` rows instead of five; see BENCHMARKS.md.

Rules (:func:`pack`): in one write's rows, a deadline row is carried by the nearest
non-deadline row before it, or, when none comes before, by the first one after it; a
write of deadline rows only (an extension, a wait's timeout carried by its park) stores
them as rows of their own, and so does one whose carrier is on the other side of a
deadline stored as a row of its own (reading back keeps the write's order). A carried
deadline keeps every field but ``sequence``: it reads back with its carrier's (one write,
one place in commit order), which is also what orders it against other rows. A deadline
whose values the compact form cannot give back exactly (an end that is not the aware UTC
ISO text the engine writes) is stored as a row of its own. Rows of earlier releases
(deadlines as rows) read as before.

One carried deadline is ``[step_id, scope, name, try_number, started, committed, length,
before]``, then ``warn`` and ``rest`` when it has them: ``name`` a one-letter code
(``p`` poll budget, ``s`` signal timeout, ``r`` retry window), ``started`` and
``committed`` microseconds from the carrier's ``committed_at`` (an instance's
``created_at``), ``length`` the
microseconds from ``started`` to the end, ``before`` 1 when it comes before its carrier,
``warn`` the microseconds from ``started`` to the warning (null for none), ``rest`` the
row's other values (an extension's ``actionId``). About 30 bytes each.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from flowpark.engine.records import NewInstance, Outcome, StepKind, StepRow

__all__ = [
    "CarryingRow",
    "carried_column",
    "pack",
    "start_carried",
    "start_rows",
    "start_step_rows",
    "unpack",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_END = "endsAt"
#: the deadline names a carried entry codes (the names of flowpark.engine.decide.deadlines)
_CODES = {"poll.budget": "p", "signal.timeout": "s", "retry.total": "r"}
_NAMES = {code: name for name, code in _CODES.items()}
_WARN = "warnAt"


@dataclass(frozen=True)
class CarryingRow(StepRow):
    """A journal row with the deadline rows written with it (``before`` and ``after`` it,
    each in write order)."""

    before: tuple[StepRow, ...] = ()
    after: tuple[StepRow, ...] = ()


def _us(instant: datetime) -> int:
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _instant(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _exact(text: Any) -> int | None:
    """Microseconds of ``text`` when it is exactly what an aware UTC instant's
    ``isoformat`` gives (so it reads back the same), else None."""
    if not isinstance(text, str):
        return None
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        return None
    if instant.tzinfo is None or instant.utcoffset() != timedelta(0):
        return None
    instant = instant.astimezone(UTC)
    return _us(instant) if instant.isoformat() == text else None


def _entry(row: StepRow, carrier: datetime, before: bool) -> list[Any] | None:
    """``row`` in the compact form against its carrier's ``committed_at``, or None when it
    cannot be given back exactly."""
    code = _CODES.get(row.capability_id)
    if code is None or row.outcome is not Outcome.SUCCESS or row.final:
        return None
    if row.error_type is not None or row.error_detail is not None or row.next_try_at is not None:
        return None
    ends = _exact(row.values.get(_END))
    if ends is None:
        return None
    warn: int | None = None
    if _WARN in row.values:
        warn = _exact(row.values[_WARN])
        if warn is None:
            return None
    for instant in (row.started_at, row.committed_at, carrier):
        if instant.tzinfo is None or instant.utcoffset() != timedelta(0):
            return None
    base, started = _us(carrier), _us(row.started_at)
    entry: list[Any] = [
        row.step_id,
        row.scope,
        code,
        row.try_number,
        started - base,
        _us(row.committed_at) - base,
        ends - started,
        1 if before else 0,
    ]
    rest = {k: v for k, v in row.values.items() if k not in (_END, _WARN)}
    if warn is not None or rest:
        entry.append(None if warn is None else warn - started)
    if rest:
        entry.append(rest)
    return entry


def pack(rows: Sequence[StepRow]) -> tuple[StepRow, ...]:
    """One write's rows as ``flow_step`` stores them: each deadline row that can be carried
    goes inside its carrier (a :class:`CarryingRow`), the others stay as they are.

    Args:
        rows: the write's journal rows, in write order (one instance's).

    Returns:
        The rows to insert, in the same order; ``rows`` itself when nothing is carried.
    """
    if len(rows) < 2 or all(r.kind is not StepKind.DEADLINE for r in rows):
        return tuple(rows)
    carriers = [i for i, r in enumerate(rows) if r.kind is not StepKind.DEADLINE]
    if not carriers:
        return tuple(rows)
    before: dict[int, list[StepRow]] = {}
    after: dict[int, list[StepRow]] = {}
    own: set[int] = set()
    placed: dict[int, tuple[int, bool]] = {}
    for i, row in enumerate(rows):
        if row.kind is not StepKind.DEADLINE:
            continue
        earlier = [c for c in carriers if c < i]
        carrier, first = (earlier[-1], False) if earlier else (carriers[0], True)
        if _entry(row, rows[carrier].committed_at, first) is None:
            own.add(i)
        else:
            placed[i] = (carrier, first)
    # a row of its own keeps its place: a deadline between it and its carrier would read
    # back on the other side of it, so it stays a row of its own too
    for i, (carrier, first) in placed.items():
        between = range(i + 1, carrier) if first else range(carrier + 1, i)
        if any(j in own for j in between):
            own.add(i)
    for i, (carrier, first) in placed.items():
        if i not in own:
            (before if first else after).setdefault(carrier, []).append(rows[i])
    out: list[StepRow] = []
    for i, row in enumerate(rows):
        if row.kind is StepKind.DEADLINE:
            if i in own:
                out.append(row)
            continue
        b, a = tuple(before.get(i, ())), tuple(after.get(i, ()))
        if b or a:
            out.append(CarryingRow(**row.__dict__, before=b, after=a))
        else:
            out.append(row)
    return tuple(out)


def carried_column(row: StepRow) -> list[list[Any]] | None:
    """The ``carried`` column of ``row`` as it is inserted (None: it carries nothing)."""
    if not isinstance(row, CarryingRow) or not (row.before or row.after):
        return None
    at = row.committed_at
    entries = [_entry(r, at, True) for r in row.before] + [_entry(r, at, False) for r in row.after]
    assert all(e is not None for e in entries), "pack() carries only exact deadlines"
    return [e for e in entries if e is not None]


def unpack(row: StepRow, carried: Iterable[Sequence[Any]] | None) -> list[StepRow]:
    """``row`` with the deadline rows its ``carried`` column holds, in write order (each
    with ``row``'s ``sequence``).

    Raises:
        ValueError: an entry is not in the compact form.
    """
    if not carried:
        return [row]
    head, tail = _expand(row.instance_id, row.committed_at, carried, row.sequence)
    return [*head, row, *tail]


def start_carried(new: NewInstance) -> list[list[Any]] | None:
    """The ``flow_instance.carried`` column of a start: the deadline rows it stores with
    the instance (``new.steps``: a first poll's budget, the first call's retry window) in
    the compact form against ``created_at``; None when it has none or one cannot be given
    back exactly (then every one is a row of its own, :func:`start_rows`)."""
    if not new.steps:
        return None
    entries = [
        _entry(r, new.created_at, True) if r.kind is StepKind.DEADLINE else None for r in new.steps
    ]
    if any(e is None for e in entries):
        return None
    return [e for e in entries if e is not None]


def start_step_rows(new: NewInstance) -> tuple[StepRow, ...]:
    """The rows of ``new.steps`` a start inserts into ``flow_step``: none when the
    instance row carries them (:func:`start_carried`)."""
    return () if start_carried(new) is not None else new.steps


def start_rows(instance_id: str, created_at: datetime, carried: Any) -> list[StepRow]:
    """The journal rows a start stored inside its instance row (``sequence`` 0: before
    every row of the journal).

    Raises:
        ValueError: an entry is not in the compact form.
    """
    if not carried:
        return []
    head, tail = _expand(instance_id, created_at, carried, 0)
    return [*head, *tail]


def _expand(
    instance_id: str, at: datetime, carried: Iterable[Sequence[Any]], sequence: int | None
) -> tuple[list[StepRow], list[StepRow]]:
    """The carried deadlines against ``at``: (those before, those after) their carrier."""
    head: list[StepRow] = []
    tail: list[StepRow] = []
    base = _us(at)
    for entry in carried:
        if not 8 <= len(entry) <= 10 or entry[2] not in _NAMES:
            raise ValueError(f"not a carried deadline: {entry!r}")
        step_id, scope, code, try_number, started, committed, length, first = entry[:8]
        warn = entry[8] if len(entry) > 8 else None
        rest = entry[9] if len(entry) > 9 else None
        begin = base + started
        values: dict[str, Any] = {_END: _instant(begin + length).isoformat()}
        if warn is not None:
            values[_WARN] = _instant(begin + warn).isoformat()
        values.update(rest or {})
        deadline = StepRow(
            instance_id,
            step_id,
            scope,
            StepKind.DEADLINE,
            _NAMES[code],
            Outcome.SUCCESS,
            _instant(begin),
            _instant(base + committed),
            try_number=try_number,
            values=values,
            sequence=sequence,
        )
        (head if first else tail).append(deadline)
    return head, tail
