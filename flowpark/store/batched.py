"""PostgreSQL group commit: the hot writes of many instances as one statement per batch.

Starts, journal commits, parks and completions of concurrent runs go through
:class:`~flowpark.store.lanes.Lane` s; each batch is one statement over arrays (``unnest``), in
autocommit, or one short transaction where a park must look at the mailbox after it holds
the instance rows. Every item keeps its own fence (instance id, fencing token, ``state =
'running'``): an item whose fence matches nothing, or a batch the database refuses (a
journal row that exists already), is answered ``None`` and the caller takes the
one-at-a-time path, which says precisely why (stale token, no instance, conflict).

Instance ids are ``uuid`` columns: the recordsets type them ``uuid`` and statements return
them as text (``id::text``), the canonical strings the engine holds. (A batch with an id
that is not a UUID is refused as a whole; its items go alone, where
:class:`~flowpark.store.types.InstanceId` answers ``instance_not_found``.)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pydantic_core import PydanticSerializationError, to_json
from sqlalchemy.exc import DataError, IntegrityError

from flowpark.engine.records import NewInstance
from flowpark.store.base import SqlRole
from flowpark.store.carried import start_carried, start_step_rows
from flowpark.store.lanes import CommitAnswer, CommitItem, FinishItem, Lane, Lanes
from flowpark.store.mapping import step_values

__all__ = ["PgBatches", "require_aware"]

_STEP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("instance_id", "uuid"),
    ("step_id", "int"),
    ("scope", "int"),
    ("kind", "text"),
    ("capability_id", "text"),
    ("outcome", "text"),
    ("try_number", "int"),
    ("values", "json"),
    ("error_type", "text"),
    ("error_detail", "text"),
    ("final", "bool"),
    ("next_try_at", "timestamptz"),
    ("started_at", "timestamptz"),
    ("committed_at", "timestamptz"),
    ("ends_at", "timestamptz"),
    ("carried", "json"),
    ("deferred_until", "timestamptz"),
    ("deferred_by", "text"),
)
_STEP_NAMES = ", ".join(f'"{name}"' for name, _ in _STEP_COLUMNS)
_STEP_FROM_T = ", ".join(f't."{name}"' for name, _ in _STEP_COLUMNS)
_CLEAR_TRY = (
    "try_step_id = NULL, try_scope = NULL, try_number = NULL, "
    "try_started_at = NULL, heartbeat_at = NULL, heartbeat_value = NULL"
)


def require_aware(*instants: datetime | None) -> None:
    """Refuse naive instants before they join a batch (one caller's bad value must not
    fail the others' statement); the same rule :class:`~flowpark.store.types.UtcDateTime`
    applies on the one-at-a-time path.

    Raises:
        ValueError: an instant is naive.
    """
    for value in instants:
        if value is not None and (value.tzinfo is None or value.utcoffset() is None):
            raise ValueError(f"UtcDateTime expects an aware datetime, got naive {value!r}")


def _recordset(columns: Sequence[tuple[str, str]], *, param: str = "rows", alias: str = "t") -> str:
    """The batch's rows as a relation ``alias``: one JSON parameter, typed columns."""
    defs = ", ".join(f'"{name}" {kind}' for name, kind in columns)
    return f"json_to_recordset(%({param})s::json) AS {alias}({defs})"


def _rows(
    columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]], *, param: str = "rows"
) -> dict[str, str]:
    """The ``param`` parameter: the batch as one JSON array (one parameter to send and
    parse, however many rows), instants as ISO-8601 text with their offset (``Z`` for
    UTC). Serialised by pydantic-core (already a dependency): ~7x less CPU than the
    standard library's encoder with a ``default`` hook for instants.

    Raises:
        PydanticSerializationError: a value pydantic-core cannot encode (a lone surrogate,
            nesting past its depth limit) that the one-at-a-time path may still store: the
            batch answers every item ``None``, as for a ``DataError``.
    """
    names = [name for name, _ in columns]
    return {param: to_json([{name: row[name] for name in names} for row in rows]).decode()}


_CREATE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("flow_name", "text"),
    ("flow_version", "text"),
    ("input", "json"),
    ("created_at", "timestamptz"),
    ("deadline_at", "timestamptz"),
    ("lease_owner", "text"),
    ("lease_expires_at", "timestamptz"),
    ("instance_key", "text"),
    ("idempotency_key", "text"),
    ("trace_context", "json"),
    ("carried", "json"),
)
# ON CONFLICT DO NOTHING: a repeated idempotency key, an instance key in use (or an id that
# exists) skips that row only; its caller then reads what holds the key
_CREATE_SQL = (
    "INSERT INTO flow_instance (id, flow_name, flow_version, state, input, created_at, "
    "updated_at, deadline_at, lease_owner, lease_expires_at, fencing_token, "
    "cancel_requested, instance_key, idempotency_key, trace_context, carried) "
    "SELECT t.id, t.flow_name, t.flow_version, 'running', t.input, t.created_at, "
    "t.created_at, t.deadline_at, t.lease_owner, t.lease_expires_at, 1, false, "
    "t.instance_key, t.idempotency_key, t.trace_context, t.carried "
    f"FROM {_recordset(_CREATE_COLUMNS)} ON CONFLICT DO NOTHING RETURNING id::text"
)
# the same with the journal rows a start stores with its instance (deadlines the instance
# row cannot carry): inserted for the instances the statement created only, in the order
# given (``n``: the join alone may hand them to the insert in another, and their sequences
# are the journal's order)
_START_STEP_COLUMNS = (*_STEP_COLUMNS, ("n", "int"))
_CREATE_WITH_STEPS_SQL = (
    f"WITH ins AS ({_CREATE_SQL.removesuffix('::text')}), "
    f"st AS (INSERT INTO flow_step ({_STEP_NAMES}) SELECT {_STEP_FROM_T} "
    f"FROM {_recordset(_START_STEP_COLUMNS, param='steps')} JOIN ins ON ins.id = t.instance_id "
    "ORDER BY t.n) "
    "SELECT id::text FROM ins"
)

_FENCE_COLUMNS: tuple[tuple[str, str], ...] = (("token", "bigint"), ("lease_until", "timestamptz"))
# ``main``: the item's own row (false: the deferred row an item carries before it)
_COMMIT_COLUMNS = _STEP_COLUMNS + _FENCE_COLUMNS + (("main", "bool"),)
# The fence locks the instance row FOR SHARE (a concurrent claim waits, and one that
# committed first makes the token mismatch): no new row version for a plain commit. A row
# with a heartbeating try in flight has it cleared (and its lease renewed). An item's
# deferred row is inserted with it, first (the rows go in ordered by ``main``).
_COMMIT_WITH = (
    f"WITH t AS (SELECT * FROM {_recordset(_COMMIT_COLUMNS)}), "
    "fence AS (SELECT i.id, t.token, i.cancel_requested, "
    "i.try_step_id IS NOT NULL AS busy FROM flow_instance i "
    "JOIN t ON i.id = t.instance_id AND i.fencing_token = t.token AND t.main "
    "WHERE i.state = 'running' FOR SHARE OF i), "
    f"cleared AS (UPDATE flow_instance i SET {_CLEAR_TRY}, "
    "lease_expires_at = t.lease_until, updated_at = t.committed_at "
    "FROM t, fence WHERE fence.busy AND i.id = fence.id AND t.instance_id = fence.id "
    "AND t.token = fence.token AND t.main RETURNING i.id), "
    f"ins AS (INSERT INTO flow_step ({_STEP_NAMES}) SELECT {_STEP_FROM_T} FROM t "
    "JOIN fence ON fence.id = t.instance_id AND fence.token = t.token ORDER BY t.main "
    "RETURNING 1)"
)
_COMMIT_SQL = (
    f"{_COMMIT_WITH} SELECT fence.id::text AS id, fence.token, fence.cancel_requested, "
    "(SELECT count(*) FROM ins) AS inserted, (SELECT count(*) FROM cleared) AS cleared "
    "FROM fence"
)
# An emit's commit: its outbox events go in with the journal rows, for fenced items only.
_EVENT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "text"),
    ("instance_id", dict(_STEP_COLUMNS)["instance_id"]),
    ("token", "bigint"),
    ("name", "text"),
    ("payload", "json"),
    ("created_at", "timestamptz"),
)
_COMMIT_EVENTS_SQL = (
    f"{_COMMIT_WITH}, ev AS (INSERT INTO flow_outbox_event (id, instance_id, name, payload, "
    "created_at) SELECT e.id, e.instance_id, e.name, e.payload, e.created_at FROM "
    f"{_recordset(_EVENT_COLUMNS, param='events', alias='e')} "
    "JOIN fence ON fence.id = e.instance_id AND fence.token = e.token RETURNING 1) "
    "SELECT fence.id::text AS id, fence.token, fence.cancel_requested, "
    "(SELECT count(*) FROM ins) AS inserted, (SELECT count(*) FROM ev) AS events "
    "FROM fence"
)

# A commit recording correlation keys: each key goes in with its fenced item's rows (a key
# the instance holds already is kept; one another instance holds violates the key's
# uniqueness and refuses the batch: each item then goes alone, which says which key).
_KEY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("flow_name", "text"),
    ("provider", "text"),
    ("key", "text"),
    ("instance_id", dict(_STEP_COLUMNS)["instance_id"]),
    ("token", "bigint"),
    ("created_at", "timestamptz"),
)
_KEYS_CTE = (
    ", keys AS (INSERT INTO flow_correlation (flow_name, provider, key, instance_id, "
    "created_at) SELECT k.flow_name, k.provider, k.key, k.instance_id, k.created_at FROM "
    f"{_recordset(_KEY_COLUMNS, param='keys', alias='k')} "
    "JOIN fence ON fence.id = k.instance_id AND fence.token = k.token "
    "WHERE NOT EXISTS (SELECT 1 FROM flow_correlation c WHERE c.flow_name = k.flow_name "
    "AND c.provider = k.provider AND c.key = k.key AND c.instance_id = k.instance_id) "
    "RETURNING 1)"
)


def _with_keys(sql: str) -> str:
    """``sql`` (a commit batch) with the ``keys`` insert after its ``WITH`` list."""
    head, select = sql.rsplit(" SELECT fence.id::text AS id", 1)
    return f"{head}{_KEYS_CTE} SELECT fence.id::text AS id{select}"


_COMMIT_KEYS_SQL = _with_keys(_COMMIT_SQL)
_COMMIT_EVENTS_KEYS_SQL = _with_keys(_COMMIT_EVENTS_SQL)

_PARK_COLUMNS = (
    _STEP_COLUMNS
    + _FENCE_COLUMNS
    + (
        ("now", "timestamptz"),
        ("wake_at", "timestamptz"),
        ("wake_step_id", "int"),
        ("wake_scope", "int"),
        ("accept", "text"),
        ("owner", "text"),
        ("wake_kind", "text"),
        ("woken", "boolean"),
    )
)
# One UPDATE per instance parks it (or, when a cancel was requested, only clears the
# attempt and keeps it running: the run unwinds) and the journal row goes in with it.
_PARK_SQL = (
    f"WITH t AS (SELECT * FROM {_recordset(_PARK_COLUMNS)}), "
    "parked AS (UPDATE flow_instance i SET "
    "state = CASE WHEN i.cancel_requested THEN i.state ELSE 'suspended' END, "
    "wake_at = CASE WHEN i.cancel_requested THEN i.wake_at ELSE t.wake_at END, "
    "wake_step_id = CASE WHEN i.cancel_requested THEN i.wake_step_id "
    "ELSE t.wake_step_id END, "
    "wake_scope = CASE WHEN i.cancel_requested THEN i.wake_scope ELSE t.wake_scope END, "
    "wake_kind = CASE WHEN i.cancel_requested THEN i.wake_kind ELSE t.wake_kind END, "
    "woken = CASE WHEN i.cancel_requested THEN i.woken ELSE t.woken END, "
    "lease_owner = CASE WHEN i.cancel_requested THEN i.lease_owner END, "
    "lease_expires_at = CASE WHEN i.cancel_requested THEN t.lease_until END, "
    f"{_CLEAR_TRY}, updated_at = t.now "
    "FROM t WHERE i.id = t.instance_id AND i.fencing_token = t.token "
    "AND i.state = 'running' "
    "RETURNING i.id, t.token, i.cancel_requested, t.accept, t.owner, t.lease_until), "
    f"ins AS (INSERT INTO flow_step ({_STEP_NAMES}) SELECT {_STEP_FROM_T} FROM t "
    "JOIN parked p ON p.id = t.instance_id AND p.token = t.token RETURNING 1) "
    "SELECT p.id::text AS id, p.token, p.cancel_requested, p.accept, p.owner, "
    "p.lease_until, "
    "(SELECT count(*) FROM ins) AS inserted FROM parked p"
)
# Second statement of a park batch that accepts signals, in the same transaction: it runs
# after the first holds the instance rows, so it sees every delivery committed before them
# (a delivery locks the row until it commits); those parks are undone (running
# again, leased as before) and the run takes the signal instead.
_UNPARK_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("token", "bigint"),
    ("accept", "text"),
    ("owner", "text"),
    ("lease_until", "timestamptz"),
)
_UNPARK_SQL = (
    "UPDATE flow_instance i SET state = 'running', lease_owner = t.owner, "
    f"lease_expires_at = t.lease_until FROM {_recordset(_UNPARK_COLUMNS)} "
    "WHERE i.id = t.id AND i.fencing_token = t.token AND i.state = 'suspended' "
    "AND EXISTS (SELECT 1 FROM flow_signal s WHERE s.instance_id = i.id "
    "AND s.name = t.accept AND s.taken_at IS NULL) RETURNING i.id::text"
)

_FINISH_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "uuid"),
    ("token", "bigint"),
    ("now", "timestamptz"),
    ("result", "json"),
)
# A signal still waiting untaken in a finished instance's mailbox is marked discarded in
# the same statement (it will never be taken); the correlation keys it holds are released.
_FINISH_SQL = (
    "WITH done AS (UPDATE flow_instance i SET state = 'completed', updated_at = t.now, "
    "ending = NULL, wake_at = NULL, wake_step_id = NULL, wake_scope = NULL, "
    "wake_kind = NULL, woken = false, lease_owner = NULL, "
    f"lease_expires_at = NULL, {_CLEAR_TRY}, result = t.result "
    f"FROM {_recordset(_FINISH_COLUMNS)} "
    "WHERE i.id = t.id AND i.fencing_token = t.token AND i.state = 'running' "
    "AND NOT i.cancel_requested RETURNING i.id, t.token, t.now), "
    "discarded AS (UPDATE flow_signal s SET discarded_at = done.now, "
    "discarded_reason = 'instance_completed' FROM done WHERE s.instance_id = done.id "
    "AND s.taken_at IS NULL AND s.discarded_at IS NULL), "
    "released AS (DELETE FROM flow_correlation c USING done WHERE c.instance_id = done.id) "
    "SELECT done.id::text AS id, done.token FROM done"
)


class PgBatches(SqlRole):
    """The batch bodies of :class:`flowpark.store.sql_store.SqlStore`'s PostgreSQL lanes.

    Each takes the items of one batch and answers per item; ``None`` sends that item to
    the one-at-a-time path (which raises the precise error, or applies it).
    """

    def make_lanes(self, on_batch: Callable[[str, int], None] | None = None) -> Lanes:
        """The four lanes (create, commit, park, finish), each flushing through this role;
        ``on_batch(lane, size)`` is told of every batch."""

        def observe(lane: str) -> Callable[[int], None] | None:
            return None if on_batch is None else functools.partial(on_batch, lane)

        return Lanes(
            create=Lane(self._batch_create, observe=observe("create")),
            commit=Lane(self._batch_commit, observe=observe("commit")),
            park=Lane(self._batch_park, observe=observe("park")),
            finish=Lane(self._batch_finish, observe=observe("finish")),
        )

    async def _batch_create(self, items: Sequence[NewInstance]) -> list[bool | None]:
        """Insert the instances; per item, whether it was inserted (False: a key or id
        conflict, for the caller to judge; None: the batch was refused, insert alone)."""
        rows = [
            {
                "id": n.id,
                "flow_name": n.flow_name,
                "flow_version": n.flow_version,
                "input": n.input,
                "created_at": n.created_at,
                "deadline_at": n.deadline_at,
                "lease_owner": n.lease_owner,
                "lease_expires_at": n.lease_expires_at,
                "instance_key": n.instance_key,
                "idempotency_key": n.idempotency_key,
                "trace_context": n.trace_context,
                "carried": start_carried(n),
            }
            for n in items
        ]
        steps = [
            {**step_values(row), "n": k}
            for k, row in enumerate(row for n in items for row in start_step_rows(n))
        ]
        try:
            async with self._single(write=True) as conn:
                if steps:
                    params = _rows(_CREATE_COLUMNS, rows)
                    params.update(_rows(_START_STEP_COLUMNS, steps, param="steps"))
                    result = await conn.exec_driver_sql(_CREATE_WITH_STEPS_SQL, params)
                else:
                    result = await conn.exec_driver_sql(_CREATE_SQL, _rows(_CREATE_COLUMNS, rows))
                created = {r[0] for r in result}
        except (DataError, IntegrityError, PydanticSerializationError):  # each alone
            return [None] * len(items)
        answers: list[bool | None] = []
        for n in items:  # an id twice in one batch was inserted once: the first has it
            answers.append(n.id in created)
            created.discard(n.id)
        return answers

    async def _batch_commit(self, items: Sequence[CommitItem]) -> list[CommitAnswer | None]:
        """Commit journal rows (no park) with their deferred rows, outbox events and
        correlation keys; None: the fence matched nothing, or the batch was refused (a row
        or an event id exists already, a key another instance holds)."""
        rows = []
        events: list[dict[str, Any]] = []
        for item in items:
            for row, main in ((item.deferred, False), (item.row, True)):
                if row is not None:
                    values = step_values(row)
                    values.update(token=item.token, lease_until=item.lease_until, main=main)
                    rows.append(values)
            events.extend(
                {
                    "id": e.id,
                    "instance_id": item.row.instance_id,
                    "token": item.token,
                    "name": e.name,
                    "payload": dict(e.payload),
                    "created_at": item.row.committed_at,
                }
                for e in item.events
            )
        keys = [
            {
                "flow_name": c.flow_name,
                "provider": c.provider,
                "key": c.key,
                "instance_id": item.row.instance_id,
                "token": item.token,
                "created_at": item.row.committed_at,
            }
            for item in items
            for c in item.correlations
        ]
        sql = _COMMIT_EVENTS_SQL if events else _COMMIT_SQL
        if keys:
            sql = _COMMIT_EVENTS_KEYS_SQL if events else _COMMIT_KEYS_SQL
        try:
            params = _rows(_COMMIT_COLUMNS, rows)
            if events:
                params.update(_rows(_EVENT_COLUMNS, events, param="events"))
            if keys:
                params.update(_rows(_KEY_COLUMNS, keys, param="keys"))
            async with self._single(write=True) as conn:
                result = (await conn.exec_driver_sql(sql, params)).all()
        except (IntegrityError, DataError, PydanticSerializationError):
            return [None] * len(items)  # one row exists already: each goes alone
        fenced = {(r.id, r.token): bool(r.cancel_requested) for r in result}
        return [
            CommitAnswer(fenced[key]) if (key := (i.row.instance_id, i.token)) in fenced else None
            for i in items
        ]

    async def _batch_park(self, items: Sequence[CommitItem]) -> list[CommitAnswer | None]:
        """Commit journal rows and park their instances; None: fence matched nothing or
        conflict."""
        rows = []
        for item in items:
            assert item.park is not None and item.deferred is None
            values = step_values(item.row)
            now, wake_at, step_id, scope, accept, owner, wake_kind, woken = item.park
            values.update(
                wake_kind=wake_kind,
                woken=woken,
                token=item.token,
                lease_until=item.lease_until,
                now=now,
                wake_at=wake_at,
                wake_step_id=step_id,
                wake_scope=scope,
                accept=accept,
                owner=owner,
            )
            rows.append(values)
        accepting = any(item.park is not None and item.park[4] is not None for item in items)
        try:
            async with self._write() if accepting else self._single(write=True) as conn:
                result = (await conn.exec_driver_sql(_PARK_SQL, _rows(_PARK_COLUMNS, rows))).all()
                undo = [
                    {
                        "id": r.id,
                        "token": r.token,
                        "accept": r.accept,
                        "owner": r.owner,
                        "lease_until": r.lease_until,
                    }
                    for r in result
                    if r.accept is not None and not r.cancel_requested
                ]
                unparked: set[str] = set()
                if undo:
                    unparked = {
                        r[0]
                        for r in await conn.exec_driver_sql(
                            _UNPARK_SQL, _rows(_UNPARK_COLUMNS, undo)
                        )
                    }
        except (IntegrityError, DataError, PydanticSerializationError):
            return [None] * len(items)
        done = {(r.id, r.token): bool(r.cancel_requested) for r in result}
        answers: list[CommitAnswer | None] = []
        for item in items:
            key = (item.row.instance_id, item.token)
            if key not in done:
                answers.append(None)
            elif done[key]:
                answers.append(CommitAnswer(cancel_requested=True))
            elif key[0] in unparked:
                answers.append(CommitAnswer(cancel_requested=False, signal_pending=True))
            else:
                answers.append(CommitAnswer(cancel_requested=False, parked=True))
        return answers

    async def _batch_finish(self, items: Sequence[FinishItem]) -> list[bool | None]:
        """Complete instances; None: not applied (a cancel was requested, a stale token)."""
        rows = [{"id": i.id, "token": i.token, "now": i.now, "result": i.result} for i in items]
        try:
            async with self._single(write=True) as conn:
                result = await conn.exec_driver_sql(_FINISH_SQL, _rows(_FINISH_COLUMNS, rows))
                done = {(r.id, r.token) for r in result}
        except (DataError, PydanticSerializationError):
            return [None] * len(items)
        return [True if (i.id, i.token) in done else None for i in items]
