"""The engine: runs an instance from its journal frontier until it parks or ends; clocks;
the sweep; leases. Imports nothing from fastapi, sqlalchemy, apscheduler or httpx."""

from app.engine.clock import Clock, SystemClock, VirtualClock
from app.engine.engine import Engine, EngineConfig, StartResult, SweepReport
from app.engine.journal import InstanceRecord, InstanceState, Journal, Snapshot, StepRow
from app.engine.runner import RunOutcome

__all__ = [
    "Clock",
    "Engine",
    "EngineConfig",
    "InstanceRecord",
    "InstanceState",
    "Journal",
    "RunOutcome",
    "Snapshot",
    "StartResult",
    "StepRow",
    "SweepReport",
    "SystemClock",
    "VirtualClock",
]
