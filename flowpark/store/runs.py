"""``SqlRuns``: what a run needs (:class:`flowpark.engine.ports.RunStore`) and how work enters a
node (:class:`flowpark.engine.ports.Intake`), over the claims (:mod:`flowpark.store.claims`) and the
lease holder's journal (:mod:`flowpark.store.writes`).

:meth:`SqlRuns.commit` writes one :class:`~flowpark.engine.ports.Commit` in one transaction.
The shapes a run commits most (a row; a row and its park; a park; a signal taken) each go
the way that costs least on the database (one statement on PostgreSQL, batched with
concurrent runs' where :mod:`flowpark.store.batched` can); any other shape is one write
transaction that does each part in turn.
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy import update

from flowpark.engine.ports.values import Commit
from flowpark.engine.records import Ack, StepKind
from flowpark.store.base import SqlContext, instant
from flowpark.store.batched import require_aware
from flowpark.store.carried import pack
from flowpark.store.claims import SqlClaims
from flowpark.store.correlations import record_correlations
from flowpark.store.fencing import after_commit, fenced, insert_step
from flowpark.store.lanes import CommitItem
from flowpark.store.mapping import SIGNAL
from flowpark.store.signals import SqlMailbox, signal_not_waiting
from flowpark.store.writes import SqlJournalWrites, park_values

__all__ = ["SqlRuns"]


class SqlRuns(SqlClaims, SqlJournalWrites):
    """Claims, leases and the lease holder's journal of
    :class:`flowpark.store.sql_store.SqlStore`.

    Args:
        context: the store's context.
        mailbox: the store's mailbox (a commit that takes a signal marks it there).
    """

    def __init__(self, context: SqlContext, mailbox: SqlMailbox) -> None:
        super().__init__(context)
        self._mailbox = mailbox

    async def commit(self, commit: Commit) -> Ack:
        """Write ``commit`` (rows, events, reviews, the signal taken, the park) in one
        transaction behind its fence.

        A deadline row written with another row goes inside it (:mod:`flowpark.store.carried`),
        so the shapes below see the rows as ``flow_step`` stores them.

        Returns / Raises: as :meth:`flowpark.engine.ports.RunStore.commit`.
        """
        packed = pack(commit.rows)
        if len(packed) != len(commit.rows):
            commit = replace(commit, rows=packed)
        rows, park = commit.rows, commit.park
        if commit.correlations:  # batched with the row's commit where it can be
            ack = await self._commit_keys_batched(commit)
            return ack if ack is not None else await self._commit_transaction(commit)
        plain = not commit.events and not commit.reviews
        if commit.take_signal is not None:
            if park is None and len(rows) == 1 and plain:
                return await self._mailbox.take_signal(commit.token, commit.take_signal, rows[0])
            return await self._commit_transaction(commit)
        if park is None:
            if len(rows) in (1, 2):
                return await self.commit_step(
                    commit.token,
                    rows[-1],
                    commit.lease_until,
                    list(commit.events),
                    list(commit.reviews),
                    deferred=rows[0] if len(rows) == 2 else None,
                )
            if not rows:
                raise ValueError("a commit writes a row, a park or both")
            return await self._commit_transaction(commit)
        if not rows:
            return await self._park(commit.instance_id, commit.token, commit.at, park)
        if len(rows) == 1 and plain:
            return await self._commit_and_park(
                commit.token, rows[0], commit.lease_until, park, commit.at
            )
        return await self._commit_transaction(commit)

    async def _commit_keys_batched(self, commit: Commit) -> Ack | None:
        """A row (with a deferred one before it) and its correlation keys through the
        group commit (PostgreSQL), one extra insert in the batch's statement; None: not
        that shape, no group commit, or the batch did not take it (the transaction then
        writes it, or says why not)."""
        rows = commit.rows
        if (
            self._lanes is None
            or commit.park is not None
            or commit.take_signal is not None
            or commit.reviews
            or len(rows) not in (1, 2)
        ):
            return None
        require_aware(*(r.started_at for r in rows), *(r.committed_at for r in rows))
        require_aware(*(r.next_try_at for r in rows), commit.lease_until)
        item = CommitItem(
            commit.token,
            rows[-1],
            commit.lease_until,
            events=tuple(commit.events),
            deferred=rows[0] if len(rows) == 2 else None,
            correlations=tuple(commit.correlations),
        )
        answer = await self._lanes.commit.submit(item)
        if answer is None:
            return None
        return Ack(applied=True, cancel_requested=answer.cancel_requested)

    async def _commit_transaction(self, commit: Commit) -> Ack:
        """Any shape of commit as one write transaction: the fence (clearing a try in
        flight), the rows in order (events and reviews with the last), the correlation
        keys, the signal taken, then the park unless a cancel was requested or an accepted
        signal waits."""
        if commit.take_signal is not None and commit.rows[-1].kind != StepKind.SIGNAL:
            raise ValueError("the row that takes a signal is of kind 'signal'")
        park = commit.park
        values = after_commit(instant(commit.lease_until), instant(commit.at))
        async with self._write() as conn:
            fence = await fenced(conn, commit.instance_id, commit.token, values)
            assert fence is not None
            last = len(commit.rows) - 1
            for n, row in enumerate(commit.rows):
                await insert_step(
                    conn,
                    row,
                    list(commit.events) if n == last else None,
                    list(commit.reviews) if n == last else None,
                    extra=self._dialect.sequence_values(),
                )
            if commit.correlations:
                at = commit.rows[-1].committed_at
                await record_correlations(
                    conn, self._dialect, commit.instance_id, commit.correlations, at
                )
            if commit.take_signal is not None:
                row = commit.rows[-1]
                taken = await conn.execute(
                    update(SIGNAL)
                    .where(
                        SIGNAL.c.id == commit.take_signal,
                        SIGNAL.c.instance_id == commit.instance_id,
                        SIGNAL.c.taken_at.is_(None),
                    )
                    .values(taken_at=row.committed_at, taken_step_id=row.step_id)
                )
                if taken.rowcount != 1:
                    raise signal_not_waiting(commit.instance_id, commit.take_signal)
            if park is None:
                return Ack(applied=True, cancel_requested=fence.cancel_requested)
            if fence.cancel_requested and not park.unwinding:
                return Ack(applied=False, cancel_requested=True)
            # the fence holds the instance row: a delivery committed before it is seen
            # here, and one after it finds the instance suspended (and claims it)
            if park.accept_signal is not None and await self._signal_waiting(
                conn, commit.instance_id, park.accept_signal
            ):
                return Ack(applied=False, signal_pending=True)
            await fenced(conn, commit.instance_id, commit.token, park_values(park, commit.at))
        return Ack(applied=True, cancel_requested=fence.cancel_requested)
