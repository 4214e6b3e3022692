"""``SqlProviderLimits``: the providers' shared limits in ``flow_provider`` and their call
tallies in ``flow_provider_minute`` (:class:`flowpark.engine.ports.providers.ProviderLimits`).

A grant is one ``UPDATE ... RETURNING`` over the provider's row: recover the effective rate
additively, reserve up to the call slots wanted from the provider's next free slot and move
it past them (see :mod:`flowpark.engine.ports.providers` for the arithmetic, which
:mod:`flowpark.store.memory_providers` follows in Python). A node reserves a batch of slots
at a time, so the statement is paid once per batch, not per call. The outcome counts the
request carries go into the minute's row: on PostgreSQL in the same statement (an upsert in
a data-modifying CTE), on SQLite in the same transaction. Every instant is the engine
clock's, passed in; the database's own time is never read. Declarations by several nodes at
once make one row (PostgreSQL: ``ON CONFLICT DO NOTHING``; SQLite: one writer at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Float,
    Integer,
    String,
    bindparam,
    case,
    cast,
    func,
    insert,
    literal,
    null,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql.elements import ColumnElement

from flowpark.engine.ports.providers import (
    CLEAN_INTERVAL,
    DECREASE,
    Grant,
    GrantRequest,
    LimitChange,
    ProviderMinute,
    ProviderState,
    PushbackReport,
)
from flowpark.errors import ProviderNotFound
from flowpark.flows.providers import MIN_RATE
from flowpark.store.base import SqlRole, instant
from flowpark.store.memory_providers import (
    EPSILON,
    RECOVERY_PER_SECOND,
    SLOT_EPSILON,
    check_change,
    grant_slots,
    minute_of,
    placement,
    recovered_state,
    replaces,
)
from flowpark.store.provider_tables import PROVIDER, PROVIDER_MINUTE
from flowpark.store.types import UtcDateTime

__all__ = ["SqlProviderLimits"]

P = PROVIDER.c
M = PROVIDER_MINUTE.c


def _least(a: Any, b: Any) -> ColumnElement[Any]:
    return case((a < b, a), else_=b)


def _greatest(a: Any, b: Any) -> ColumnElement[Any]:
    return case((a > b, a), else_=b)


def _state(row: Any) -> ProviderState:
    return ProviderState(
        name=row.name,
        rate_per_second=float(row.rate_per_second),
        burst=int(row.burst),
        max_in_flight=row.max_in_flight,
        effective_rate=float(row.effective_rate),
        lowered_reason=row.lowered_reason,
        paused_until=row.paused_until,
        pushbacks=int(row.pushbacks),
        updated_at=row.updated_at,
        updated_by=row.updated_by,
        floor_ratio=float(row.floor_ratio),
    )


_STATE_COLUMNS = (
    P.name,
    P.rate_per_second,
    P.burst,
    P.max_in_flight,
    P.effective_rate,
    P.lowered_reason,
    P.paused_until,
    P.pushbacks,
    P.updated_at,
    P.updated_by,
    P.floor_ratio,
)


def _missing(name: str) -> ProviderNotFound:
    return ProviderNotFound(f"no provider {name!r} is declared", provider=name)


class SqlProviderLimits(SqlRole):
    """:class:`flowpark.engine.ports.providers.ProviderLimits` over ``flow_provider``.

    Args:
        context: the store's context (:class:`flowpark.store.base.SqlContext`).
    """

    async def declare(self, providers: Sequence[ProviderState], now: datetime) -> None:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.declare`."""
        if not providers:
            return
        async with self._write() as conn:
            names = [p.name for p in providers]
            known = {
                row.name: row
                for row in (await conn.execute(select(PROVIDER).where(P.name.in_(names)))).all()
            }
            for new in providers:
                row = known.get(new.name)
                if row is None:
                    adding = insert(PROVIDER).values(**_new_row(new, now))
                    if self._dialect.name == "postgresql":  # another node's declaration won
                        adding = pg_insert(PROVIDER).values(**_new_row(new, now))
                        adding = adding.on_conflict_do_nothing(index_elements=["name"])
                    await conn.execute(adding)
                elif replaces(row.updated_by, new.updated_by):
                    lowered = row.lowered_s is not None
                    floor = max(new.rate_per_second * new.floor_ratio, MIN_RATE)
                    effective = (
                        max(min(float(row.effective_rate), new.rate_per_second), floor)
                        if lowered
                        else new.rate_per_second
                    )
                    await conn.execute(
                        update(PROVIDER)
                        .where(P.name == new.name)
                        .values(
                            rate_per_second=new.rate_per_second,
                            burst=new.burst,
                            max_in_flight=new.max_in_flight,
                            floor_ratio=new.floor_ratio,
                            effective_rate=effective,
                            # the new limit takes effect from now
                            next_slot_s=min(float(row.next_slot_s), now.timestamp()),
                            updated_at=now,
                            updated_by=new.updated_by,
                        )
                    )

    async def grant(self, request: GrantRequest) -> Grant:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.grant`."""
        params: dict[str, Any] = {
            "g_name": request.name,
            "g_now": request.now,
            "g_now_s": request.now.timestamp(),
            "g_reach_s": request.horizon.total_seconds() + EPSILON,
            "g_wanted": request.wanted,
        }
        counts = (request.ok, request.pushback, request.failed, request.deferred)
        dialect = self._dialect.name
        before: float | None = None
        if dialect == "postgresql":
            tally = any(counts)
            if tally:
                # one statement: the tally's upsert rides on the grant as a data-modifying CTE
                params["g_minute"] = minute_of(request.now)
                params.update(zip(_COUNT_PARAMS, counts, strict=True))
            async with self._single(write=True) as conn:
                statement = _grant_statement(dialect, tally=tally)
                row = (await conn.execute(statement, params)).first()
        else:
            # one writer at a time: the slot cursor read before the grant is the one it moved
            async with self._write() as conn:
                read = select(P.next_slot_s).where(P.name == request.name)
                before = (await conn.execute(read)).scalar()
                row = (await conn.execute(_grant_statement(dialect), params)).first()
                if row is not None and any(counts):
                    await self._tally(conn, request.name, request.now, counts)
        if row is None:
            raise _missing(request.name)
        state, count = _state(row), int(row.last_granted)
        if before is None:
            base, credit = float(row.base_s), int(row.credit)
        else:
            now_s = request.now.timestamp()
            base, credit = placement(before, now_s, state.effective_rate, state.burst)
        slots, next_at = grant_slots(
            request.now, count, base, credit, state.effective_rate, state.paused_until
        )
        return Grant(count, next_at, state, slots)

    async def _tally(
        self, conn: AsyncConnection, name: str, now: datetime, counts: tuple[int, int, int, int]
    ) -> None:
        minute = minute_of(now)
        ok, pushback, failed, deferred = counts
        done = await conn.execute(
            update(PROVIDER_MINUTE)
            .where(M.provider == name, M.minute == minute)
            .values(
                ok=M.ok + ok,
                pushback=M.pushback + pushback,
                failed=M.failed + failed,
                deferred=M.deferred + deferred,
            )
        )
        if done.rowcount == 0:
            await conn.execute(
                insert(PROVIDER_MINUTE).values(
                    provider=name,
                    minute=minute,
                    ok=ok,
                    pushback=pushback,
                    failed=failed,
                    deferred=deferred,
                )
            )

    async def pushback(self, report: PushbackReport) -> ProviderState:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.pushback`."""
        now_s = report.now.timestamp()
        interval = max(0.0, (report.until - report.now).total_seconds())
        lower = P.lowered_s.is_(None) | (P.lowered_s <= now_s - interval)
        until = instant(report.until)
        statement = (
            update(PROVIDER)
            .where(P.name == report.name)
            .values(
                effective_rate=case(
                    (
                        lower,
                        _greatest(
                            _greatest(P.rate_per_second * P.floor_ratio, MIN_RATE),
                            P.effective_rate * DECREASE,
                        ),
                    ),
                    else_=P.effective_rate,
                ),
                lowered_s=case((lower, literal(now_s, Float())), else_=P.lowered_s),
                paused_until=case(
                    (P.paused_until.is_(None) | (P.paused_until < until), until),
                    else_=P.paused_until,
                ),
                pushbacks=P.pushbacks + 1,
                lowered_reason=report.reason,
            )
            .returning(*_STATE_COLUMNS)
        )
        async with self._single(write=True) as conn:
            row = (await conn.execute(statement)).first()
        if row is None:
            raise _missing(report.name)
        return _state(row)

    async def set_limit(self, change: LimitChange) -> ProviderState:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.set_limit`."""
        check_change(change)
        at_s = literal(change.at.timestamp(), Float())
        values: dict[str, Any] = {
            "updated_at": change.at,
            "updated_by": change.by,
            # a new limit takes effect from now: no slot the old one placed ahead is kept
            "next_slot_s": _least(P.next_slot_s, at_s),
        }
        if change.rate_per_second is not None:
            rate = literal(change.rate_per_second, Float())
            floor = _greatest(rate * P.floor_ratio, MIN_RATE)
            values["rate_per_second"] = rate
            values["effective_rate"] = case(
                (P.lowered_s.is_(None), rate),
                else_=_greatest(_least(P.effective_rate, rate), floor),
            )
            # a limit at or below the lowered rate: the rate is lowered no more
            recovered = P.lowered_s.is_(None) | (P.effective_rate >= rate)
            values["lowered_s"] = case((recovered, null()), else_=P.lowered_s)
            values["lowered_reason"] = case((recovered, null()), else_=P.lowered_reason)
        if change.burst is not None:
            values["burst"] = change.burst
        if change.max_in_flight is not None:
            values["max_in_flight"] = change.max_in_flight or None
        statement = (
            update(PROVIDER)
            .where(P.name == change.name)
            .values(**values)
            .returning(*_STATE_COLUMNS)
        )
        async with self._single(write=True) as conn:
            row = (await conn.execute(statement)).first()
        if row is None:
            raise _missing(change.name)
        return _state(row)

    async def states(self, now: datetime | None = None) -> list[ProviderState]:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.states`."""
        query = select(*_STATE_COLUMNS, P.refilled_s, P.lowered_s).order_by(P.name)
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        states = [_state(row) for row in rows]
        if now is None:
            return states
        now_s = now.timestamp()
        return [
            recovered_state(state, row.refilled_s, row.lowered_s, now_s)
            for state, row in zip(states, rows, strict=True)
        ]

    async def tallies(self, name: str, since: datetime) -> list[ProviderMinute]:
        """See :meth:`flowpark.engine.ports.providers.ProviderLimits.tallies`."""
        query = (
            select(M.minute, M.ok, M.pushback, M.failed, M.deferred)
            .where(M.provider == name, M.minute >= minute_of(since))
            .order_by(M.minute)
        )
        async with self._read() as conn:
            rows = (await conn.execute(query)).all()
        return [ProviderMinute(*row) for row in rows]


#: The bound names of a grant's outcome counts (ok, pushback, failed, deferred).
_COUNT_PARAMS = ("g_ok", "g_pushback", "g_failed", "g_deferred")


def _max(dialect: str, a: Any, b: Any, kind: Any = Float) -> ColumnElement[Any]:
    """The larger of two values never NULL, each written once in the SQL (PostgreSQL's
    ``greatest``, SQLite's two-argument ``max``), typed ``kind``."""
    made: ColumnElement[Any] = getattr(func, "greatest" if dialect == "postgresql" else "max")(
        a, b, type_=kind()
    )
    return made


def _min(dialect: str, a: Any, b: Any, kind: Any = Float) -> ColumnElement[Any]:
    """The smaller of two values never NULL (``least``, SQLite's ``min``)."""
    made: ColumnElement[Any] = getattr(func, "least" if dialect == "postgresql" else "min")(
        a, b, type_=kind()
    )
    return made


@lru_cache(maxsize=8)
def _grant_statement(dialect: str, tally: bool = False) -> Any:
    """The grant's ``UPDATE ... RETURNING`` for ``dialect`` (built once; its values are
    bound: ``g_name``, ``g_now``, ``g_now_s``, ``g_reach_s`` (the horizon plus
    :data:`EPSILON`, seconds), ``g_wanted``; with ``tally`` also ``g_minute`` and the
    counts, see :func:`_with_tally`).

    Its arithmetic is staged in CTEs, so each value is written once in the SQL (inline,
    the nested expressions repeated one another: 35 kB of SQL, too long for the driver's
    cache of parsed statements): ``rated`` reads the provider's row (PostgreSQL: ``FOR
    UPDATE``, so a grant that waited for another's lock computes from the row that grant
    wrote) and recovers the effective rate; ``placed`` finds the first slot and whether a
    pause holds; ``counted`` the slots granted; the ``UPDATE`` writes them.
    """
    now_s = bindparam("g_now_s", type_=Float())
    start = _max(
        dialect, P.refilled_s, func.coalesce(P.lowered_s, 0.0) + CLEAN_INTERVAL.total_seconds()
    )
    recovered = (
        P.rate_per_second
        * RECOVERY_PER_SECOND
        * _max(dialect, now_s - start, literal(0.0, Float()))
    )
    floor = _max(dialect, P.rate_per_second * P.floor_ratio, literal(MIN_RATE, Float()))
    rated = (
        select(
            P.name,
            P.next_slot_s,
            P.burst,
            P.paused_until,
            # never below the floor: a row an older release let sink below it heals here
            _max(
                dialect, _min(dialect, P.rate_per_second, P.effective_rate + recovered), floor
            ).label("rate"),
        )
        .where(P.name == bindparam("g_name", type_=String()))
        .with_for_update()
        .cte("rated")
    )
    r = rated.c
    now = bindparam("g_now", type_=UtcDateTime())
    placed = select(
        r.name,
        r.rate,
        _max(dialect, r.next_slot_s, now_s - (r.burst - 1) / r.rate).label("first"),
        _max(dialect, r.next_slot_s, now_s).label("base_s"),
        case((r.paused_until.is_not(None) & (r.paused_until > now), 1), else_=0).label("paused"),
    ).cte("placed")
    q = placed.c
    credit = case(
        (q.first <= now_s, _floor(dialect, (now_s - q.first) * q.rate + SLOT_EPSILON) + 1),
        else_=literal(0, Integer()),
    )
    ahead = now_s + bindparam("g_reach_s", type_=Float()) - q.base_s
    room = case((ahead >= 0.0, _floor(dialect, ahead * q.rate) + 1), else_=literal(0, Integer()))
    wanted = bindparam("g_wanted", type_=Integer())
    counted = select(
        q.name,
        q.rate,
        q.base_s,
        credit.label("credit"),
        case(
            (q.paused == 1, 0),
            (wanted == 0, 0),
            # the burst goes whole to the grant that finds it (see the memory twin)
            else_=_max(
                dialect,
                _min(dialect, _max(dialect, credit, room, Integer), wanted, Integer),
                credit,
                Integer,
            ),
        ).label("granted"),
    ).cte("counted")
    c = counted.c
    returned: list[Any] = [P.last_granted, P.next_slot_s]
    if dialect == "postgresql":  # SQLite's RETURNING names the updated table only
        returned += [c.base_s, c.credit]
    statement = (
        update(PROVIDER)
        .where(P.name == c.name)
        .values(
            last_granted=c.granted,
            next_slot_s=case((c.granted > 0, c.base_s + c.granted / c.rate), else_=P.next_slot_s),
            refilled_s=_max(dialect, P.refilled_s, now_s),
            effective_rate=c.rate,
            # back at the limit: lowered no more, for no reason
            lowered_s=case((c.rate >= P.rate_per_second, null()), else_=P.lowered_s),
            lowered_reason=case((c.rate >= P.rate_per_second, null()), else_=P.lowered_reason),
        )
        .returning(*returned, *_STATE_COLUMNS)
    )
    return _with_tally(statement) if tally else statement


def _floor(dialect: str, value: ColumnElement[Any]) -> ColumnElement[Any]:
    """``floor`` of a non-negative float, as an integer (SQLite's cast truncates;
    PostgreSQL's rounds, so it floors first)."""
    if dialect == "postgresql":
        return cast(func.floor(value), Integer)
    return cast(value, Integer)


def _with_tally(grant: Any) -> Any:
    """PostgreSQL: ``grant`` (an ``UPDATE ... RETURNING``) with the minute's tally upserted in
    the same statement (``g_minute`` and the counts bound), answering the grant's row."""
    granted = grant.cte("granted")
    upsert = pg_insert(PROVIDER_MINUTE).from_select(
        ["provider", "minute", "ok", "pushback", "failed", "deferred"],
        select(
            granted.c.name,
            bindparam("g_minute", type_=UtcDateTime()),
            *(bindparam(name, type_=Integer()) for name in _COUNT_PARAMS),
        ),
    )
    upsert = upsert.on_conflict_do_update(
        index_elements=["provider", "minute"],
        set_={
            "ok": M.ok + upsert.excluded.ok,
            "pushback": M.pushback + upsert.excluded.pushback,
            "failed": M.failed + upsert.excluded.failed,
            "deferred": M.deferred + upsert.excluded.deferred,
        },
    )
    return select(granted).add_cte(upsert.cte("tallied"))


def _new_row(new: ProviderState, now: datetime) -> dict[str, Any]:
    return {
        "name": new.name,
        "rate_per_second": new.rate_per_second,
        "burst": new.burst,
        "max_in_flight": new.max_in_flight,
        "floor_ratio": new.floor_ratio,
        "effective_rate": new.rate_per_second,
        "next_slot_s": 0.0,
        "refilled_s": now.timestamp(),
        "lowered_s": None,
        "last_granted": 0,
        "lowered_reason": None,
        "paused_until": None,
        "pushbacks": 0,
        "updated_at": now,
        "updated_by": new.updated_by,
    }
