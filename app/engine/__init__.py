"""The engine: a pure decider (what an instance does next, from its plan, journal, mailbox
and the clock's instant) and an executor that carries each decision out under a lease;
clocks; the sweep. Imports nothing from fastapi, sqlalchemy, apscheduler or httpx."""

from app.engine.clock import Clock, SystemClock, VirtualClock
from app.engine.config import EngineConfig
from app.engine.engine import Engine, StartResult, SweepReport
from app.engine.journal import InstanceRecord, InstanceState, Snapshot, StepRow
from app.engine.outcomes import RunOutcome
from app.engine.roles import Claims, Journal, JournalWrites, Mailbox, ReadModel, Streams

__all__ = [
    "Claims",
    "Clock",
    "Engine",
    "EngineConfig",
    "InstanceRecord",
    "InstanceState",
    "Journal",
    "JournalWrites",
    "Mailbox",
    "ReadModel",
    "RunOutcome",
    "Snapshot",
    "StartResult",
    "StepRow",
    "Streams",
    "SweepReport",
    "SystemClock",
    "VirtualClock",
]
