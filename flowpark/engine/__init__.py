"""The engine: a pure decider (what an instance does next, from its plan, journal, mailbox
and the clock's instant) and an executor that carries each decision out under a lease;
clocks; the sweep. Imports nothing from fastapi, sqlalchemy, apscheduler or httpx."""

from flowpark.engine.clock import Clock, SystemClock, VirtualClock
from flowpark.engine.config import EngineConfig
from flowpark.engine.node.engine import Engine, StartResult, SweepReport
from flowpark.engine.outcomes import RunOutcome
from flowpark.engine.ports import (
    Commit,
    Intake,
    Mailbox,
    Park,
    ReadModel,
    RunStore,
    Store,
    Streams,
)
from flowpark.engine.records import InstanceRecord, InstanceState, Snapshot, StepRow

__all__ = [
    "Clock",
    "Commit",
    "Engine",
    "EngineConfig",
    "InstanceRecord",
    "InstanceState",
    "Intake",
    "Mailbox",
    "Park",
    "ReadModel",
    "RunOutcome",
    "RunStore",
    "Snapshot",
    "StartResult",
    "StepRow",
    "Store",
    "Streams",
    "SweepReport",
    "SystemClock",
    "VirtualClock",
]
