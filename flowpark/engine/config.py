"""The engine's settings (:class:`EngineConfig`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

__all__ = ["EngineConfig"]


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings.

    Attributes:
        node_id: this node's name (lease owner, logs).
        lease: how long a claim holds an instance without renewal (default 30 s). A run
            renews it every ``lease / 3`` while a capability works, so node clocks may
            disagree by up to ``lease - lease / 3`` (20 s by default) without a live lease
            being taken over.
        sweep_batch: at most this many instances claimed per sweep statement (default 100).
        concurrency: instances advanced at once by this node (default 32); a sweep claims
            no more than its free run slots, so nothing it claimed waits for a slot.
        start_wait: how long :meth:`Engine.start` waits (on the engine clock) for a new
            instance to park or end before it answers with the instance ``running`` while
            the run goes on in the background; None (default): until it parks or ends (or
            reaches a heartbeating capability). The server sets it from
            ``FLOWPARK_START_WAIT_SECONDS`` (2 s).
        provider_limits: overrides of declared provider limits by provider name
            (``{"ocr": {"rate_per_second": 20}}``, from ``FLOWPARK_PROVIDER_LIMITS``).
        provider_wait: a try waits in process (on the engine clock) for its provider's
            call slot at most this far ahead; a later slot defers it (parked). None
            (default): 1 s, or zero under a :class:`~flowpark.engine.clock.VirtualClock`.
    """

    node_id: str = "node-1"
    lease: timedelta = timedelta(seconds=30)
    sweep_batch: int = 100
    concurrency: int = 32
    start_wait: timedelta | None = None
    provider_limits: Mapping[str, Mapping[str, float | None]] = field(default_factory=dict)
    provider_wait: timedelta | None = None
