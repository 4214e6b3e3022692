"""What a run needs from its store (:class:`RunStore`) and how work enters a node
(:class:`Intake`: starts, sweeps, cancels).

Every instant passed in comes from the engine's clock (aware UTC); each call is one
transaction. Fencing: every write for an instance carries the fencing token its claim
returned; a write whose token is not the instance's current one (or whose instance no
longer runs) raises :class:`flowpark.errors.StaleFencingToken` and writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from flowpark.engine.ports.values import Commit, Reopen, TryMark
from flowpark.engine.records import (
    Ack,
    CancelAck,
    Claim,
    Heartbeat,
    InstanceRecord,
    InstanceState,
    NewInstance,
    Snapshot,
)
from flowpark.errors import FlowFailure

__all__ = ["Intake", "RunStore"]


class RunStore(Protocol):
    """A run from its claim to its release: the journal read back, fenced commits, a
    heartbeating try's checkpoints, the ending, the lease."""

    async def claim(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> Claim | None:
        """Lease one instance if it is suspended (whatever its wake) or running with an
        expired lease; None otherwise (also for an unknown instance). Sets state running,
        owner and expiry, fencing token + 1."""
        ...

    async def load(self, instance_id: str) -> Snapshot:
        """The instance, its journal (commit order) and its untaken signals (arrival order).

        Raises:
            InstanceNotFound: no such instance (code ``instance_not_found``).
        """
        ...

    async def commit(self, commit: Commit) -> Ack:
        """Write ``commit`` in one transaction: its rows (with events and reviews), the
        signal it takes, then its park. A heartbeating try in flight is cleared (the lease
        renewed to ``commit.lease_until``).

        Returns:
            ``Ack(applied=True)`` once parked (or with no park); a refused park answers
            ``Ack(applied=False, cancel_requested=True)`` (a cancel was requested) or
            ``Ack(applied=False, signal_pending=True)`` (an accepted signal waits): the
            rows are written, the instance stays running, leased to the park's owner.
            ``cancel_requested`` tells the instance's flag in every case.

        Raises:
            StaleFencingToken: the token is stale (code ``stale_fencing_token``); nothing
                written.
            InstanceNotFound: no such instance.
            JournalConflict: a row (or event, review) exists already, or the signal taken
                is not waiting in the instance's mailbox; nothing written.
        """
        ...

    async def start_try(
        self, instance_id: str, token: int, mark: TryMark, lease_until: datetime
    ) -> Ack:
        """Mark a heartbeating try in flight and renew the lease to ``lease_until``.

        Raises:
            StaleFencingToken, InstanceNotFound.
        """
        ...

    async def record_heartbeat(
        self, instance_id: str, token: int, value: Any, now: datetime, lease_until: datetime
    ) -> Ack:
        """Persist ``value`` as the checkpoint of the try in flight and renew the lease.

        Raises:
            StaleFencingToken, InstanceNotFound.
            JournalConflict: no try is in flight.
        """
        ...

    async def last_heartbeat(self, instance_id: str, step_id: int, scope: int) -> Heartbeat | None:
        """The checkpoint the latest try of ``(step_id, scope)`` recorded, or None."""
        ...

    async def begin_ending(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        ending: InstanceState,
        failure: FlowFailure | None,
    ) -> Ack:
        """Record that the instance unwinds towards ``ending`` (FAILED or CANCELLED).

        Raises:
            ValueError: another state. StaleFencingToken, InstanceNotFound.
        """
        ...

    async def finish(
        self,
        instance_id: str,
        token: int,
        now: datetime,
        state: InstanceState,
        result: Any = None,
        failure: FlowFailure | None = None,
    ) -> Ack:
        """Write a final state, release the lease, discard the signals left untaken. A
        COMPLETED finish is not applied when a cancel was requested
        (``Ack(applied=False, cancel_requested=True)``).

        Raises:
            ValueError: not a final state. StaleFencingToken, InstanceNotFound.
        """
        ...

    async def renew_lease(self, instance_id: str, token: int, lease_until: datetime) -> Ack:
        """Extend the lease to ``lease_until``.

        Raises:
            StaleFencingToken, InstanceNotFound.
        """
        ...

    async def release(self, instance_id: str, token: int, now: datetime) -> None:
        """Give up the lease: state back to suspended, wake unchanged (made due at ``now``
        when it has none or a cancel was requested).

        Raises:
            StaleFencingToken, InstanceNotFound.
        """
        ...


class Intake(Protocol):
    """How work enters a node: starts, the sweep's claims, cancel requests."""

    async def create_instance(self, new: NewInstance) -> tuple[InstanceRecord, bool]:
        """Insert a running instance leased to ``new.lease_owner`` (fencing token 1); or
        return the one its idempotency key made.

        Returns:
            ``(record, created)``; ``created`` is False for an idempotent repeat.

        Raises:
            IdempotencyKeyReused: same flow and key, another request.
            InstanceKeyInUse: an active instance of the flow holds ``new.instance_key``.
            JournalConflict: the instance id exists already.
            ValueError: ``new.id`` is not a canonical UUID string.
        """
        ...

    async def claim_due(
        self,
        owner: str,
        now: datetime,
        lease_until: datetime,
        limit: int,
        runnable: list[tuple[str, str]],
    ) -> list[Claim]:
        """Atomically lease up to ``limit`` due instances (suspended with ``wake_at <= now``
        or running with ``lease_expires_at < now``) whose ``(flow_name, flow_version)`` is
        in ``runnable``: expired leases first (marked ``taken_over``), then the earliest
        wake; two nodes never claim the same instance."""
        ...

    async def count_not_runnable(self, now: datetime, runnable: list[tuple[str, str]]) -> int:
        """Count due instances whose flow version is not in ``runnable``."""
        ...

    async def request_cancel(
        self, instance_id: str, owner: str, now: datetime, lease_until: datetime
    ) -> CancelAck:
        """Set the cancel flag; claim the instance for ``owner`` when nobody holds a live
        lease (the caller then runs the unwind).

        Raises:
            InstanceNotFound, InstanceEnded.
        """
        ...

    async def reopen(self, reopen: Reopen) -> Claim | None:
        """Claim an instance that ended ``failed`` or ``cancelled`` with a compensation
        that failed for good, to retry it: in one transaction, set it running with
        ``ending`` its final state (its failure kept), lease it to ``reopen.owner`` (token
        + 1) and write ``reopen.rows``. The run then unwinds again and finishes it in its
        state.

        Returns:
            The claim; None when the instance is not ended with a compensation failed
            (it runs now, another retry took it, or nothing failed).

        Raises:
            InstanceNotFound: no such instance.
            InstanceKeyInUse: another running instance of the flow holds its instance key
                (nothing written).
            JournalConflict: a row exists already (a concurrent retry; nothing written).
        """
        ...
