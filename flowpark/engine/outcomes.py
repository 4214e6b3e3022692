"""What a run answers: :class:`Halt` (how one run stopped), :class:`RunOutcome` (the
result of advancing one instance) and :class:`StartResult` (a start's answer)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flowpark.engine.records import InstanceRecord, InstanceState, SignalRecord

__all__ = ["Halt", "RunOutcome", "StartResult"]


@dataclass(frozen=True)
class Halt:
    """Why a run stopped: the state it left the instance in."""

    state: InstanceState
    wake_at: datetime | None = None


@dataclass(frozen=True)
class RunOutcome:
    """The result of advancing one instance."""

    instance_id: str
    state: InstanceState
    wake_at: datetime | None = None
    tries: int = 0
    runnable: bool = True
    instance: InstanceRecord | None = None  # as the run left it (state == ``state``)
    # the signals this run took, as it marked them (``taken_at``, ``taken_step_id``)
    signals_taken: tuple[SignalRecord, ...] = ()


@dataclass(frozen=True)
class StartResult:
    """A start's answer: the instance after its first advance, and whether it is new."""

    instance: InstanceRecord
    created: bool
    result: Any = None
