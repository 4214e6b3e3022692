"""What waits on providers now (:class:`ProviderWaits`): the parked instances grouped by the
step they wake at and why, from which the API and the console count, per provider, the
instances waiting for it and those deferred (``wake_kind`` ``provider_budget`` or
``provider_pushback``). The store knows no provider: the flow's plan maps a step to the
provider its capability calls."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["DEFERRAL_KINDS", "OldestWait", "ProviderWaits", "WaitGroup"]

#: The wake kinds of a deferred call.
DEFERRAL_KINDS = ("provider_budget", "provider_pushback")


@dataclass(frozen=True)
class WaitGroup:
    """Parked instances of one flow version that wake at one step, for one reason.

    Attributes:
        flow / version: the flow version.
        step_id: the plan step they wake at.
        wake_kind: why (``poll``, ``retry``, ``provider_budget``, ``provider_pushback`` ...).
        count: how many.
        oldest_since: the earliest instant one of them was parked (aware UTC).
        next_wake: the earliest ``wake_at`` among them (aware UTC).
    """

    flow: str
    version: str
    step_id: int
    wake_kind: str
    count: int
    oldest_since: datetime
    next_wake: datetime | None


@dataclass(frozen=True)
class OldestWait:
    """The instance of a group parked the longest ago.

    Attributes:
        instance_id: its id.
        since: when it was parked (aware UTC).
        wake_at: when it wakes (aware UTC).
    """

    instance_id: str
    since: datetime
    wake_at: datetime | None


class ProviderWaits(Protocol):
    """Reads of what waits (SQL: :class:`flowpark.store.provider_waits.SqlProviderWaits`;
    memory: :class:`flowpark.store.provider_waits.MemoryProviderWaits`)."""

    async def wait_groups(self) -> list[WaitGroup]:
        """Every group of parked instances that wake at a step (flow, version, step,
        kind), by flow, version, step and kind: one grouped read.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        ...

    async def oldest(
        self, flow: str, version: str, step_id: int, kinds: Sequence[str]
    ) -> OldestWait | None:
        """The instance of ``flow`` ``version`` parked at ``step_id`` with one of
        ``kinds`` that was parked the longest ago, or None."""
        ...
