"""The operator's queries: what the API and the console read to find, explain and act on
instances (:class:`OperatorReads`) and what the console's overview counts
(:class:`OverviewReads`), with the frozen values they answer (no SQL here).

Implemented in SQL (:mod:`flowpark.store.listing`, :mod:`flowpark.store.actions`,
:mod:`flowpark.store.overview`) and in memory (:mod:`flowpark.store.memory`, the queries an
in-memory node needs).

Vocabulary (docs/concepts.md): an *attempt* is one iteration of a parked poll, stored as the
journal row's *scope*; a *try* is one execution of a capability under its retry policy
(``try_number`` 1, 2, ... within one step and scope).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from flowpark.engine.records import InstanceState, StepRow, WakeKind

__all__ = [
    "AttemptStart",
    "FlowActivity",
    "InstanceCount",
    "InstanceFilter",
    "InstancePage",
    "InstanceSummary",
    "OperatorAction",
    "OperatorReads",
    "OverviewReads",
    "RecordedWake",
    "StateCounts",
    "StepActivity",
    "StepWaiting",
    "WakeBatch",
    "WakeMark",
]


@dataclass(frozen=True)
class InstanceFilter:
    """Which instances a list (or a bulk action) selects; every field set narrows it (AND).

    Attributes:
        flow: the flow's name.
        version: the flow's version.
        states: any of these states (empty: every state).
        overdue_seconds: suspended with ``wake_at`` more than this many seconds before
            ``now`` (0: due and not yet claimed).
        stuck: running with a lease that expired before ``now`` (its node is gone).
        error_code: ended with this error code.
        waiting: suspended, waiting for this (:class:`WakeKind`).
        instance_key: the business key given at start.
        created_after / created_before: ``created_at`` strictly after / before (aware UTC).
        now: the engine-clock instant ``overdue_seconds`` and ``stuck`` are measured at
            (aware UTC); required when either is set.
        display_fields: ``(flow, version, input field)`` of each flow version that
            declares a display key: listed rows carry that field's value
            (:attr:`InstanceSummary.display_value`).
        display_value: the display key's value (exact), among ``display_fields``' flows.
        id_prefix: the instance id starts with this (lowercase, as ids are written).
        compensation_failed: ended with a compensation that failed for good and was not
            retried with success since (its failure details list it).
    """

    flow: str | None = None
    version: str | None = None
    states: tuple[InstanceState, ...] = ()
    overdue_seconds: float | None = None
    stuck: bool = False
    error_code: str | None = None
    waiting: WakeKind | None = None
    instance_key: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    now: datetime | None = None
    display_fields: tuple[tuple[str, str, str], ...] = ()
    display_value: str | None = None
    id_prefix: str | None = None
    compensation_failed: bool = False


@dataclass(frozen=True)
class InstanceSummary:
    """One row of the operator's list: an instance without its input, result or journal.

    Attributes:
        wake_kind: what a suspended instance waits for; None otherwise.
        wake_scope: the attempt it waits to run (polls: the next scope), or None.
        lease_expires_at: a running instance's lease expiry (a past one: stuck).
    """

    id: str
    flow_name: str
    flow_version: str
    state: InstanceState
    created_at: datetime
    updated_at: datetime
    wake_at: datetime | None = None
    wake_kind: WakeKind | None = None
    wake_step_id: int | None = None
    wake_scope: int | None = None
    deadline_at: datetime | None = None
    lease_expires_at: datetime | None = None
    error_code: str | None = None
    instance_key: str | None = None
    cancel_requested: bool = False
    #: the value of its flow's display key (an input field), when the flow declares one
    display_value: str | None = None
    #: FAILED or CANCELLED while it runs its compensations (unwinding), else None
    ending: InstanceState | None = None


@dataclass(frozen=True)
class InstancePage:
    """One page of the list, newest first.

    Attributes:
        rows: at most the page's limit, ordered by ``(created_at, id)`` descending.
        after: the keyset position ``(created_at, id)`` of the last row when more rows
            follow (the next page starts after it); None on the last page.
    """

    rows: list[InstanceSummary]
    after: tuple[datetime, str] | None = None


@dataclass(frozen=True)
class InstanceCount:
    """How many instances of ``flow_name`` ``flow_version`` are in ``state``."""

    flow_name: str
    flow_version: str
    state: InstanceState
    count: int


@dataclass(frozen=True)
class StateCounts:
    """Counts by flow, version and state, plus the overdue and stuck totals."""

    by_state: list[InstanceCount] = field(default_factory=list)
    overdue: int = 0
    stuck: int = 0


@dataclass(frozen=True)
class OperatorAction:
    """One operator action recorded in an instance's history (``flow_action``).

    Attributes:
        action: ``wake``, ``extend_budget`` or ``cancel``.
        actor: the acting token's name.
        acted_at: the engine-clock instant it was taken (aware UTC).
        details: what it did (``{"extendBy": "PT2H", "endsAt": ...}``, ``{"woken": ...}``).
        idempotency_key: the request's ``Idempotency-Key``, if any.
    """

    id: str
    instance_id: str
    action: str
    actor: str
    acted_at: datetime
    details: dict[str, Any] = field(default_factory=dict)
    idempotency_key: str | None = None


@dataclass(frozen=True)
class WakeMark:
    """What a bulk wake found of one instance as it marked it (:class:`WakeBatch`).

    Attributes:
        instance_id: the instance.
        state: its state as found (the marked ones: suspended); None: no such instance.
        wake_kind: what it waited for as found, or None.
        marked: it was parked on a wait other than a signal's: it is now marked woken
            (``flow_instance.woken``) and due at ``wake_at``.
        wake_at: a marked instance's due instant (the batch's, or an earlier one it had).
    """

    instance_id: str
    state: InstanceState | None
    wake_kind: WakeKind | None = None
    marked: bool = False
    wake_at: datetime | None = None


@dataclass(frozen=True)
class WakeBatch:
    """One batch of a bulk wake, recorded in one transaction (:meth:`OperatorReads.record_wakes`).

    Attributes:
        actions: one record per instance (action ``wake``, the actor, ``acted_at`` the
            batch's instant, the idempotency key if any); its ``details`` come from
            ``details``.
        at: the engine-clock instant (aware UTC) a marked instance is due at (an earlier
            due instant it had is kept).
        details: what an instance's record keeps, given what its mark found; None records
            nothing for it (no such instance, or it ended).
        unmarked: instances to record without marking them (this node does not serve
            their flow version: the record says so).
    """

    actions: tuple[OperatorAction, ...]
    at: datetime
    details: Callable[[WakeMark], dict[str, Any] | None]
    unmarked: frozenset[str] = frozenset()


@dataclass(frozen=True)
class RecordedWake:
    """What :meth:`OperatorReads.record_wakes` did for one instance of its batch.

    Attributes:
        mark: what its mark found; None for a repeat of its idempotency key (nothing
            marked or recorded again).
        action: its record as stored (for a repeat, the first request's); None when
            nothing was recorded (``details`` gave None).
    """

    instance_id: str
    mark: WakeMark | None
    action: OperatorAction | None


class OperatorReads(Protocol):
    """What the operator surfaces (HTTP API, console) read; each call is one snapshot."""

    async def list_instances(
        self,
        where: InstanceFilter,
        *,
        limit: int,
        after: tuple[datetime, str] | None = None,
        oldest_first: bool = False,
    ) -> InstancePage:
        """A page of instances matching ``where``, newest first (keyset pagination).

        Args:
            where: the filter.
            limit: at most this many rows (1-1000).
            after: the position ``(created_at, id)`` the previous page ended at.
            oldest_first: oldest first instead (``after`` from a list in that order).

        Returns:
            :class:`InstancePage`.
        """
        ...

    async def count_instances_by(self, now: datetime, overdue_seconds: float) -> StateCounts:
        """Counts by flow, version and state; overdue (suspended, ``wake_at`` more than
        ``overdue_seconds`` before ``now``) and stuck (running, lease expired at ``now``)."""
        ...

    async def poll_budget_ends(
        self, pairs: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], datetime]:
        """The stored budget end (the extension in force) of each ``(instance_id,
        poll_step_id)`` that has one."""
        ...

    async def record_action(self, action: OperatorAction) -> tuple[OperatorAction, bool]:
        """Record an operator action; a repeat of its idempotency key (same instance and
        action) records nothing and returns ``(first, False)``."""
        ...

    async def complete_action(self, action: OperatorAction) -> bool:
        """Store what the action did (``action.details``: its answer or its refusal,
        replayed to a repeat of its key), unless the record was retaken since
        ``action`` was recorded or retaken (its ``acted_at`` moved on).

        Returns:
            True when it was stored.
        """
        ...

    async def retake_action(self, seen: OperatorAction, fresh: OperatorAction) -> bool:
        """Take the record ``seen`` over for a new run of its action: store ``fresh``'s
        ``actor``, ``acted_at`` (later than ``seen``'s) and ``details`` on it, only if it
        is still as ``seen`` (its ``acted_at``), so of two repeats that retake one record,
        one wins.

        Returns:
            True when this call retook it.
        """
        ...

    async def find_action(
        self, instance_id: str, action: str, idempotency_key: str
    ) -> OperatorAction | None:
        """The action recorded with ``idempotency_key``, or None."""
        ...

    async def record_wakes(self, batch: WakeBatch) -> list[RecordedWake]:
        """Record a bulk wake's batch at once, in one transaction of a few statements
        whatever its size: the sweep runs the wakes, not the caller.

        An instance whose record of a wake with the same idempotency key exists is a
        repeat (nothing marked or recorded again). Each other instance not in
        ``batch.unmarked`` that is suspended on a wait other than a signal's (and not
        held by another transaction at that moment) is marked woken and made due at
        ``batch.at``: the next claim runs the wait it is parked on now
        (:attr:`flowpark.engine.records.InstanceRecord.woken`). Then each gets the record
        ``batch.details`` gives for what its mark found.

        Returns:
            One :class:`RecordedWake` per action, in ``batch.actions``' order.
        """
        ...

    async def actions_of(self, instance_id: str) -> list[OperatorAction]:
        """The instance's operator actions, oldest first."""
        ...

    async def count_matching(self, where: InstanceFilter) -> int:
        """How many instances ``where`` selects."""
        ...

    async def journal_of(self, instance_id: str) -> list[StepRow]:
        """Every journal row of the instance, in commit order (empty when unknown)."""
        ...


@dataclass(frozen=True)
class FlowActivity:
    """What one flow version's instances are doing at ``now``.

    Attributes:
        running / suspended: instances in that state now.
        due_soon: suspended with ``wake_at`` from ``now - overdue`` to ``now + due_within``
            (due and not yet late, or due within ``due_within``).
        overdue: suspended with ``wake_at`` earlier than ``now - overdue``.
        stuck: running with a lease that expired before ``now``.
        completed_recently / failed_recently: ended in that state (``updated_at``) since
            ``since``.
        failures: error code -> instances failed with it since ``since``.
    """

    flow_name: str
    flow_version: str
    running: int = 0
    suspended: int = 0
    due_soon: int = 0
    overdue: int = 0
    stuck: int = 0
    completed_recently: int = 0
    failed_recently: int = 0
    failures: tuple[tuple[str, int], ...] = ()
    #: ended cancelled (``updated_at``) since ``since``
    cancelled_recently: int = 0


@dataclass(frozen=True)
class StepWaiting:
    """``count`` suspended instances of a flow version wait at plan step ``step_id``."""

    flow_name: str
    flow_version: str
    step_id: int
    count: int


@dataclass(frozen=True)
class StepActivity:
    """Where one flow version's instances run and ended, by plan step.

    Attributes:
        running: step index -> running instances whose try in flight runs it.
        completed: instances that completed in the window.
        failed: step index -> instances that failed at it in the window.
    """

    running: dict[int, int]
    completed: int
    failed: dict[int, int]


@dataclass(frozen=True)
class AttemptStart:
    """A poll attempt (scope > 0) that started recently, with what its schedule is read from.

    Attributes:
        step_id: the poll body's step index; ``scope`` the attempt.
        started_at: when its first try started.
        previous_committed_at: when the previous attempt's successful row was written (the
            park after it asked for this attempt), or None when it is not in the journal.
        first_started_at: when attempt 0 started (the poll's budget starts there), or None.
        budget_ends_at: the poll's budget end in force when the previous attempt was
            written (an extension written later does not move the park it asked for), or
            None when no stored end is known.
        deferred_until / deferred_by: its first try's provider deferral (the last
            deferral's wake, ``budget`` or ``pushback``), or None.
    """

    instance_id: str
    flow_name: str
    flow_version: str
    step_id: int
    scope: int
    started_at: datetime
    previous_committed_at: datetime | None
    first_started_at: datetime | None
    budget_ends_at: datetime | None = None
    deferred_until: datetime | None = None
    deferred_by: str | None = None


class OverviewReads(Protocol):
    """What the console's overview and flow pages read (grouped counts, one snapshot
    each)."""

    async def flow_activity(
        self, now: datetime, *, overdue: timedelta, due_within: timedelta, since: datetime
    ) -> list[FlowActivity]:
        """Per flow and version (sorted), the counts of :class:`FlowActivity` at ``now``."""
        ...

    async def waiting_by_step(
        self, flow_name: str | None = None, flow_version: str | None = None
    ) -> list[StepWaiting]:
        """Suspended instances per flow version and the plan step they wait at."""
        ...

    async def step_activity(
        self, flow_name: str, flow_version: str, since: datetime
    ) -> StepActivity:
        """Running, completed and failed instances of a flow version by plan step."""
        ...

    async def attempt_starts(self, since: datetime) -> list[AttemptStart]:
        """Poll attempts after the first that started at or after ``since``, newest first."""
        ...
