"""Claims: leasing instances to a node (the sweep, a targeted claim, a cancel request).

Each claim is one guarded ``UPDATE ... RETURNING``: the check and the mark are one statement,
so two nodes never lease the same instance. A claim increments the fencing token.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    Integer,
    String,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
    true,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from flowpark.engine.ports.values import Reopen
from flowpark.engine.records import Ack, CancelAck, Claim, InstanceState
from flowpark.errors import InstanceEnded, InstanceKeyInUse, InstanceNotFound
from flowpark.store.base import SqlRole, const, instant
from flowpark.store.fencing import NO_LEASE, fenced, insert_step
from flowpark.store.mapping import INSTANCE
from flowpark.store.tables import ACTIVE_STATES
from flowpark.store.types import UtcDateTime, is_instance_id

__all__ = [
    "SqlClaims",
    "claim_due_pick",
    "claim_due_pick_in_order",
    "claim_due_update",
    "claim_values",
    "claimable",
]

_RUNNING = InstanceState.RUNNING.value
_SUSPENDED = InstanceState.SUSPENDED.value


def claimable(now: Any, *, due_only: bool) -> ColumnElement[bool]:
    """Suspended (with ``wake_at <= now`` when ``due_only``) or running with an expired
    lease (``lease_expires_at < now``)."""
    suspended = INSTANCE.c.state == const(_SUSPENDED)
    if due_only:
        suspended = and_(suspended, INSTANCE.c.wake_at <= now)
    expired = and_(INSTANCE.c.state == const(_RUNNING), INSTANCE.c.lease_expires_at < now)
    return or_(suspended, expired)


def claim_values(owner: Any, now: Any, lease_until: Any) -> dict[str, Any]:
    """The columns a claim sets: running, leased to ``owner`` until ``lease_until``, token+1."""
    return {
        "state": _RUNNING,
        "lease_owner": owner,
        "lease_expires_at": lease_until,
        "fencing_token": INSTANCE.c.fencing_token + 1,
        "updated_at": now,
    }


def claim_due_pick() -> Select[Any]:
    """The ids ``claim_due`` takes: due instances of runnable flow versions, expired
    leases first (a dead node's work is taken over within lease + scan interval even
    behind a backlog), then the earliest due instant (bound parameters ``c_now``,
    ``c_limit`` and the expanding ``c_runnable``)."""
    now = bindparam("c_now", type_=UtcDateTime())
    due_at = case(
        (INSTANCE.c.state == const(_SUSPENDED), INSTANCE.c.wake_at),
        else_=INSTANCE.c.lease_expires_at,
    )
    taken_over_first = case((INSTANCE.c.state == const(_RUNNING), 0), else_=1)
    return (
        select(INSTANCE.c.id)
        .where(
            claimable(now, due_only=True),
            tuple_(INSTANCE.c.flow_name, INSTANCE.c.flow_version).in_(
                bindparam("c_runnable", expanding=True)
            ),
        )
        .order_by(taken_over_first, due_at, INSTANCE.c.id)
        .limit(bindparam("c_limit", type_=Integer()))
    )


def claim_due_pick_in_order() -> Select[Any]:
    """:func:`claim_due_pick` as two ordered, locked scans a claim reads only as far as it
    takes rows (PostgreSQL): expired leases by expiry, then due wakes by ``wake_at``, each
    ``FOR UPDATE SKIP LOCKED`` (a row another claim holds is stepped over, the scan goes
    on). The first pick sorted every due row to take the first ``c_limit`` (48 ms for a
    claim of 32 out of 20,000 due); the wake scan walks ``ix_flow_instance_wake_suspended``
    in order and stops at ``c_limit``. The same order: expired leases first, then the
    earliest due instant, then the id (same bound parameters)."""
    now = bindparam("c_now", type_=UtcDateTime())
    limit = bindparam("c_limit", type_=Integer())
    runnable = tuple_(INSTANCE.c.flow_name, INSTANCE.c.flow_version).in_(
        bindparam("c_runnable", expanding=True)
    )
    expired = (
        select(INSTANCE.c.id)
        .where(INSTANCE.c.state == const(_RUNNING), INSTANCE.c.lease_expires_at < now, runnable)
        .order_by(INSTANCE.c.lease_expires_at, INSTANCE.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    due = (
        select(INSTANCE.c.id)
        .where(INSTANCE.c.state == const(_SUSPENDED), INSTANCE.c.wake_at <= now, runnable)
        .order_by(INSTANCE.c.wake_at, INSTANCE.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    # each locked scan is a subquery (PostgreSQL refuses FOR UPDATE in a UNION's branch);
    # no ORDER BY over the union: the Append reads its branches in turn, and the outer
    # LIMIT stops the wake scan once the claim is full
    expired_ids, due_ids = expired.subquery("expired"), due.subquery("due")
    picks = union_all(select(expired_ids.c.id), select(due_ids.c.id)).subquery("picks")
    return select(picks.c.id).limit(limit)


def claim_due_update(pick: Select[Any]) -> Any:
    """The claim of the ids ``pick`` selects (bound parameters ``c_owner``, ``c_now``,
    ``c_lease`` besides the pick's)."""
    return (
        update(INSTANCE)
        .where(INSTANCE.c.id.in_(pick.scalar_subquery()))
        .values(
            **claim_values(
                bindparam("c_owner", type_=String()),
                bindparam("c_now", type_=UtcDateTime()),
                bindparam("c_lease", type_=UtcDateTime()),
            )
        )
    )


class SqlClaims(SqlRole):
    """Claims and leases (of :class:`flowpark.engine.ports.RunStore` and
    :class:`flowpark.engine.ports.Intake`) of :class:`flowpark.store.sql_store.SqlStore`."""

    async def claim(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> Claim | None:
        """Lease one instance if it is suspended (whatever its ``wake_at``) or running with
        an expired lease (``lease_expires_at < now``); None otherwise (also when there is
        no such instance, or ``instance_id`` cannot name one).

        Sets ``state=running``, the owner and expiry, and increments the fencing token.
        """
        if not is_instance_id(instance_id):
            return None
        stmt = (
            update(INSTANCE)
            .where(INSTANCE.c.id == instance_id, claimable(now, due_only=False))
            .values(**claim_values(owner, now, lease_until))
            .returning(INSTANCE.c.id, INSTANCE.c.fencing_token)
        )
        async with self._single(write=True) as conn:  # one atomic UPDATE ... RETURNING
            row = (await conn.execute(stmt)).first()
        return Claim(row.id, row.fencing_token) if row is not None else None

    async def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        runnable: list[tuple[str, str]],
    ) -> list[Claim]:
        """Atomically lease up to ``limit`` due instances of runnable flow versions.

        Due: suspended with ``wake_at <= now``, or running with ``lease_expires_at < now``.
        One ``UPDATE ... WHERE id IN (SELECT ... LIMIT n [FOR UPDATE SKIP LOCKED])
        RETURNING`` statement, so two sweeps never claim the same instance. Expired leases
        come first (a dead node's work is taken over within lease + scan interval even
        behind a backlog), then the earliest due instant.

        Args:
            owner: the claiming node.
            now: the engine clock's instant (aware UTC).
            lease_until: the new lease expiry.
            limit: at most this many claims.
            runnable: ``(flow_name, flow_version)`` pairs this node can run; empty -> [].

        Returns:
            The claims, expired leases first, then earliest wake first; a claim of a
            running instance (its holder's lease expired) is marked ``taken_over``.
        """
        if not runnable or limit <= 0:
            return []
        params = {
            "c_owner": owner,
            "c_now": now,
            "c_lease": lease_until,
            "c_limit": limit,
            "c_runnable": list(runnable),
        }
        return await self._dialect.claim_due(self, params)

    async def count_not_runnable(self, now: datetime, runnable: list[tuple[str, str]]) -> int:
        """Count due instances whose ``(flow_name, flow_version)`` is not in ``runnable``."""
        query = select(func.count()).select_from(INSTANCE).where(claimable(now, due_only=True))
        if runnable:
            query = query.where(
                ~tuple_(INSTANCE.c.flow_name, INSTANCE.c.flow_version).in_(runnable)
            )
        async with self._single(write=False) as conn:
            return int((await conn.execute(query)).scalar_one())

    async def request_cancel(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> CancelAck:
        """Set the cancel flag; claim the instance when nobody holds a live lease.

        A suspended instance, or a running one whose lease expired (``lease_expires_at <
        now``), is claimed for ``owner`` in the same statement: the caller runs the unwind.

        Returns:
            ``CancelAck(state=running, claim=Claim)`` when claimed, else
            ``CancelAck(state=running, claim=None)`` (the lease holder will see the flag).

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
            InstanceEnded: the instance has ended (code ``instance_ended``).
        """
        async with self._write() as conn:
            claimed = (
                await conn.execute(
                    update(INSTANCE)
                    .where(INSTANCE.c.id == instance_id, claimable(now, due_only=False))
                    .values(cancel_requested=True, **claim_values(owner, now, lease_until))
                    .returning(INSTANCE.c.fencing_token)
                )
            ).first()
            if claimed is not None:
                claim = Claim(instance_id, claimed.fencing_token)
                return CancelAck(state=InstanceState.RUNNING, claim=claim)
            flagged = (
                await conn.execute(
                    update(INSTANCE)
                    .where(
                        INSTANCE.c.id == instance_id,
                        INSTANCE.c.state.in_([const(s) for s in ACTIVE_STATES]),
                    )
                    .values(cancel_requested=True, updated_at=now)
                    .returning(INSTANCE.c.state)
                )
            ).first()
            if flagged is not None:
                return CancelAck(state=InstanceState(flagged.state))
            state = (
                await conn.execute(select(INSTANCE.c.state).where(INSTANCE.c.id == instance_id))
            ).scalar_one_or_none()
        if state is None:
            raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
        raise InstanceEnded(
            f"instance {instance_id!r} has ended ({state})", instance_id=instance_id, state=state
        )

    async def reopen(self, reopen: Reopen) -> Claim | None:
        """Claim an ended instance to retry its compensations: one guarded ``UPDATE``
        (ended ``failed`` or ``cancelled`` and ``compensation_failed``) sets it running
        with ``ending`` its final state, leased to ``reopen.owner`` (token + 1), and the
        retry rows are written in the same transaction.

        Returns / Raises: as :meth:`flowpark.engine.ports.Intake.reopen`.
        """
        c, instance_id = INSTANCE.c, reopen.instance_id
        ended = [InstanceState.FAILED.value, InstanceState.CANCELLED.value]
        try:
            async with self._write() as conn:
                found = (
                    await conn.execute(
                        select(c.flow_name, c.instance_key).where(c.id == instance_id)
                    )
                ).first()
                if found is None:
                    raise InstanceNotFound(f"no instance {instance_id!r}", instance_id=instance_id)
                if found.instance_key is not None:
                    holder = select(c.id).where(
                        c.id != instance_id,
                        c.flow_name == found.flow_name,
                        c.instance_key == found.instance_key,
                        c.state.in_([const(s) for s in ACTIVE_STATES]),
                    )
                    if (await conn.execute(holder.limit(1))).first() is not None:
                        raise _key_in_use(found.flow_name, found.instance_key)
                claimed = (
                    await conn.execute(
                        update(INSTANCE)
                        .where(
                            c.id == instance_id,
                            c.state.in_(ended),
                            c.compensation_failed == true(),
                        )
                        .values(
                            ending=c.state,
                            **claim_values(reopen.owner, reopen.now, reopen.lease_until),
                        )
                        .returning(c.fencing_token)
                    )
                ).first()
                if claimed is None:
                    return None
                for row in reopen.rows:
                    await insert_step(conn, row, extra=self._dialect.sequence_values())
        except IntegrityError as exc:  # another start took the key meanwhile
            assert found is not None
            raise _key_in_use(found.flow_name, found.instance_key) from exc
        return Claim(instance_id, claimed.fencing_token)

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        """Extend the lease to ``lease_until``.

        Raises:
            StaleFencingToken: the token is stale or the instance no longer runs
                (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        async with self._single(write=True) as conn:  # one UPDATE
            row = await fenced(conn, instance_id, token, {"lease_expires_at": lease_until})
        assert row is not None
        return Ack(applied=True, cancel_requested=row.cancel_requested)

    async def release(self, instance_id: str, token: int, now: datetime) -> None:
        """Give up the lease: state back to suspended, wake unchanged.

        An instance with no wake, or with a cancel requested, is made due at ``now`` so the
        sweep picks it up again rather than leaving it parked forever.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``).
            InstanceNotFound: no such instance.
        """
        wake = case(
            (or_(INSTANCE.c.wake_at.is_(None), INSTANCE.c.cancel_requested), instant(now)),
            else_=INSTANCE.c.wake_at,
        )
        values = {"state": _SUSPENDED, "wake_at": wake, "updated_at": now, **NO_LEASE}
        async with self._single(write=True) as conn:  # one UPDATE
            await fenced(conn, instance_id, token, values)


def _key_in_use(flow: str, key: str | None) -> InstanceKeyInUse:
    return InstanceKeyInUse(
        f"instance key {key!r} of flow {flow!r} is held by a running instance",
        flow=flow,
        instance_key=key,
    )
