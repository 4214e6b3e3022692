"""Correlation keys (:class:`Correlations`): which live instance holds a provider's id.

A key is written with the journal row of the step that recorded it (a
:class:`~flowpark.engine.ports.values.Commit`'s ``correlations``) and released when its
instance finishes (:meth:`~flowpark.engine.ports.run.RunStore.finish`); this port reads
them, for the provider signal routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

__all__ = ["CorrelationHolder", "Correlations"]


@dataclass(frozen=True)
class CorrelationHolder:
    """A correlation key and the live instance holding it.

    Attributes:
        instance_id: the instance.
        flow_name / flow_version: the instance's flow and version.
        provider / key: the key.
        created_at: when the step that recorded it committed (engine clock, aware UTC).
    """

    instance_id: str
    flow_name: str
    flow_version: str
    provider: str
    key: str
    created_at: datetime


class Correlations(Protocol):
    """What the provider signal routes read of the correlation keys."""

    async def holder(self, flow: str, provider: str, key: str) -> CorrelationHolder | None:
        """The live (running or suspended) instance of ``flow`` holding ``key`` of
        ``provider``, or None.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        ...

    async def held(self, instance_id: str) -> list[CorrelationHolder]:
        """The keys ``instance_id`` holds (none once it has ended), by provider and key.

        Raises:
            StoreUnavailable: the database could not be reached.
        """
        ...
