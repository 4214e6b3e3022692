"""How a run stops: the values it answers (:class:`Halt`, :class:`RunOutcome`) and the
exceptions that carry a stop out of the walk.

::

    Exception
     +-- Interrupt        the walk unwinds (fail, cancel) or completes early
     +-- Park             the instance was parked: the walk stops here
    BaseException
     +-- CancelRequested  out of a heartbeat: the try stops, the instance unwinds
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from app.engine.journal import InstanceRecord, InstanceState, SignalRecord
from app.errors import FlowFailure

__all__ = [
    "DECISION_KEY",
    "CancelRequested",
    "Halt",
    "Interrupt",
    "Park",
    "RunOutcome",
    "cancelled",
]

DECISION_KEY = "$decision"
"""The key under which a try's row records a capability's Fail or Complete decision."""


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


class Interrupt(Exception):
    """The walk must stop and unwind (fail/cancel) or complete early.

    Args:
        ending: the state the instance ends in.
        failure: why it fails or is cancelled.
        result: an early completion's output.
    """

    def __init__(
        self, ending: InstanceState, failure: FlowFailure | None = None, result: Any = None
    ) -> None:
        super().__init__(ending)
        self.ending = ending
        self.failure = failure
        self.result = result


def cancelled() -> Interrupt:
    """The interrupt of a requested cancel.

    Returns:
        An :class:`Interrupt` ending the instance ``cancelled`` (``flow.cancelled``).
    """
    return Interrupt(
        InstanceState.CANCELLED, FlowFailure("flow.cancelled", "the instance was cancelled")
    )


class Park(Exception):
    """The instance was parked (committed ``suspended``): the walk stops with ``halt``.

    Args:
        halt: the parked state and its wake.
    """

    def __init__(self, halt: Halt) -> None:
        super().__init__(halt.state)
        self.halt = halt


class CancelRequested(BaseException):
    """Raised out of ``ctx.heartbeat`` when the instance is to be cancelled.

    A ``BaseException``, as ``asyncio.CancelledError`` is: capabilities (provider clients
    above all) often catch ``Exception`` around a call, and such a handler must not swallow
    the cancel and keep the try going.
    """
