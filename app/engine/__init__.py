"""The engine: runs an instance from its journal frontier until it parks or ends; clocks;
the sweep; leases. Imports nothing from fastapi, sqlalchemy, apscheduler or httpx."""

from app.engine.clock import Clock, SystemClock, VirtualClock
from app.engine.engine import Engine, EngineConfig, StartResult, SweepReport
from app.engine.journal import InstanceRecord, InstanceState, Snapshot, StepRow
from app.engine.roles import Claims, Journal, JournalWrites, Mailbox, ReadModel, Streams
from app.engine.stops import RunOutcome

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
