"""Correlation keys in memory: the twin of :mod:`flowpark.store.correlations`, over the
state of a :class:`~flowpark.store.memory.MemoryStore`."""

from __future__ import annotations

from flowpark.engine.ports.correlations import CorrelationHolder
from flowpark.engine.ports.values import Commit, Correlation
from flowpark.engine.records import InstanceState
from flowpark.errors import CorrelationKeyInUse
from flowpark.store.memory_state import MemoryState

__all__ = ["MemoryCorrelations", "key_in_use"]

_LIVE = (InstanceState.RUNNING, InstanceState.SUSPENDED)


def key_in_use(instance_id: str, correlation: Correlation, holder: str) -> CorrelationKeyInUse:
    """The refusal of ``instance_id``'s commit of a key ``holder`` holds."""
    return CorrelationKeyInUse(
        f"correlation key {correlation.key!r} of provider {correlation.provider!r} is held "
        f"by another live instance of {correlation.flow_name} ({holder})",
        flow=correlation.flow_name,
        provider=correlation.provider,
        key=correlation.key,
        instance_id=instance_id,
        holder_id=holder,
    )


class MemoryCorrelations:
    """:class:`flowpark.engine.ports.Correlations` over a memory store's state, with the
    writes its commits and finishes make.

    Args:
        state: the store's state (shared with its other ports).
    """

    def __init__(self, state: MemoryState) -> None:
        self._s = state

    def record(self, commit: Commit) -> None:
        """Hold the commit's keys for its instance (before anything else of the commit is
        written).

        Raises:
            CorrelationKeyInUse: another instance holds one of them (nothing recorded).
        """
        if not commit.correlations:
            return
        for c in commit.correlations:
            held = self._s.correlations.get((c.flow_name, c.provider, c.key))
            if held is not None and held[0] != commit.instance_id:
                raise key_in_use(commit.instance_id, c, held[0])
        at = commit.rows[-1].committed_at
        for c in commit.correlations:
            self._s.correlations.setdefault(
                (c.flow_name, c.provider, c.key), (commit.instance_id, at)
            )

    def release(self, instance_id: str) -> None:
        """Drop the keys ``instance_id`` holds (its finish)."""
        for name, (holder, _) in list(self._s.correlations.items()):
            if holder == instance_id:
                del self._s.correlations[name]

    def _holders(self) -> list[CorrelationHolder]:
        found = []
        for (_, provider, key), (instance_id, at) in sorted(self._s.correlations.items()):
            inst = self._s.instances.get(instance_id)
            if inst is not None and inst.state in _LIVE:
                found.append(
                    CorrelationHolder(
                        instance_id, inst.flow_name, inst.flow_version, provider, key, at
                    )
                )
        return found

    async def holder(self, flow: str, provider: str, key: str) -> CorrelationHolder | None:
        """See :meth:`flowpark.engine.ports.Correlations.holder`."""
        for found in self._holders():
            if (found.flow_name, found.provider, found.key) == (flow, provider, key):
                return found
        return None

    async def held(self, instance_id: str) -> list[CorrelationHolder]:
        """See :meth:`flowpark.engine.ports.Correlations.held`."""
        return [found for found in self._holders() if found.instance_id == instance_id]
