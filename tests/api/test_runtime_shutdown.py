"""Shutdown of the runtime: when the lifespan stops the sweeper, no sweep may still be
running (the lifespan disposes the database and closes the HTTP client right after), and
stopping is not an error worth a traceback in the log; a lifespan ended leaves no task of
its own behind (one would use the disposed database on a connection nobody closes)."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from flowpark.engine.clock import SystemClock
from flowpark.engine.node.engine import SweepReport
from flowpark.runtime.app import create_app
from flowpark.runtime.scheduler import Sweeper
from tests.support.eventually import eventually
from tests.support.server import server_settings


class BlockingEngine:
    """Stands in for the engine: its sweep blocks until released."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(node_id="test-node")
        self.clock = SystemClock()  # the sweeper stamps its last sweep with it
        self.wake_listeners: list[Any] = []
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.running = 0
        self.outcomes: list[str] = []
        self.claiming = True

    def stop_claiming(self) -> None:
        self.claiming = False

    async def sweep(self, **_: Any) -> SweepReport:
        self.running += 1
        self.entered.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.outcomes.append("cancelled")
            raise
        finally:
            self.running -= 1
        self.outcomes.append("finished")
        return SweepReport()


async def test_stop_returns_only_when_no_sweep_is_running(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    engine = BlockingEngine()
    sweeper = Sweeper(engine, 0.05)  # type: ignore[arg-type]
    sweeper.start()
    await eventually(engine.entered.is_set, timeout=5, what="a sweep started")
    # the in-flight sweep would finish shortly; stop may wait for it or cancel it
    asyncio.get_running_loop().call_later(0.1, engine.release.set)

    await sweeper.stop()

    assert engine.running == 0, "a sweep is still running after Sweeper.stop() returned"
    assert not engine.claiming, "a stopping node must claim no more instances"
    assert engine.outcomes, engine.outcomes
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


async def test_stop_cancels_a_sweep_that_outlives_the_grace() -> None:
    engine = BlockingEngine()  # never released
    sweeper = Sweeper(engine, 0.05)  # type: ignore[arg-type]
    sweeper.start()
    await eventually(engine.entered.is_set, timeout=5, what="a sweep started")

    await sweeper.stop(grace_seconds=0.05)

    assert engine.running == 0
    assert engine.outcomes == ["cancelled"]


async def test_stop_lets_an_in_flight_sweep_finish_within_the_grace() -> None:
    engine = BlockingEngine()
    sweeper = Sweeper(engine, 0.05)  # type: ignore[arg-type]
    sweeper.start()
    await eventually(engine.entered.is_set, timeout=5, what="a sweep started")
    asyncio.get_running_loop().call_later(0.05, engine.release.set)

    await sweeper.stop(grace_seconds=10)

    assert engine.outcomes[-1] == "finished"
    assert "cancelled" not in engine.outcomes


async def test_a_sweep_not_yet_begun_when_stop_begins_never_begins() -> None:
    engine = BlockingEngine()
    engine.release.set()  # a sweep would end at once
    sweeper = Sweeper(engine, 3600)  # type: ignore[arg-type]
    sweeper.start()
    # e.g. the scheduler's task for a wake, created but not yet run: a sweep it began
    # after stop() returned would use the database the lifespan disposes next
    late = asyncio.ensure_future(sweeper.run_once())

    await sweeper.stop()
    await late

    assert engine.outcomes == [], "a sweep ran after Sweeper.stop() began"


@pytest.mark.parametrize("run_sweeper", [False, True])
async def test_a_lifespan_ended_right_after_its_start_leaves_no_task_behind(
    store_url: str, run_sweeper: bool
) -> None:
    app = create_app(server_settings(store_url, "http://127.0.0.1:9", run_sweeper=run_sweeper))
    before = asyncio.all_tasks()

    async with app.router.lifespan_context(app):
        pass

    # e.g. the gauges' first refresh, started with the telemetry: it must not run after the
    # lifespan disposed the database (a new pool and connection nobody closes)
    assert asyncio.all_tasks() - before == set()


async def test_a_node_runs_every_periodic_job_on_one_scheduler(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from apscheduler.schedulers.asyncio import AsyncIOScheduler

    started: list[AsyncIOScheduler] = []
    start = AsyncIOScheduler.start

    def counted(self: AsyncIOScheduler, *args: Any, **kwargs: Any) -> None:
        started.append(self)
        start(self, *args, **kwargs)

    monkeypatch.setattr(AsyncIOScheduler, "start", counted)
    settings = server_settings(
        store_url,
        "http://127.0.0.1:9",
        retention="P30D",
        subscribers=[
            {"name": "audit", "url": "http://127.0.0.1:9/hook", "secret": "whsec_" + "A" * 32}
        ],
    )
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        jobs = {job.id for job in started[0].get_jobs()}
    assert len(started) == 1, started
    assert {"flowpark.sweep", "flowpark.delivery", "flowpark.retention"} <= jobs
    assert "flowpark.liveness" in jobs
    assert "flowpark.metrics" in jobs
    assert started[0].get_jobs() == []  # each part removed its jobs as it stopped
    # shut down with the node (APScheduler shuts an asyncio scheduler down on the loop's
    # next turn)
    await eventually(lambda: not started[0].running, timeout=5, what="the scheduler shut down")
