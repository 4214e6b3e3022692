"""A flowpark node serving the deadline kill-test flows: ``python tests/e2e/deadline_node.py
PORT`` (settings from ``FLOWPARK_*``; the provider at ``FLOWPARK_OCR_BASE_URL``).

Flows (each capability calls ``GET {provider}/probe/{scenario}``; the test's provider
answers ``{"done": false}``, 500, or holds the call until the caller goes away):

* ``kill.poll`` (``POST /api/v1/kill-poll``): a poll of ``kill.probe`` every second with a
  :data:`BUDGET` budget and no ``on_timeout`` (it fails ``flow.poll_not_satisfied``);
  ``kill.probe`` retries a failed try after 0.5 s, up to 5 tries.
* ``kill.heartbeat`` (``POST /api/v1/kill-heartbeat``): one heartbeating ``kill.watch``
  (heartbeat timeout 10 s) retried every 0.5 s within :data:`WINDOW` in all.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from flowpark.flows import (  # noqa: E402
    Backoff,
    Capability,
    CapabilityOptions,
    Flow,
    HttpTrigger,
    RetryPolicy,
    StepContext,
)
from flowpark.runtime.app import create_app  # noqa: E402
from flowpark.runtime.loading import Deps  # noqa: E402
from flowpark.settings import Settings  # noqa: E402

BUDGET = timedelta(seconds=8)
WINDOW = timedelta(seconds=20)
HEARTBEAT = timedelta(seconds=10)  # the least allowed


class Scenario(BaseModel):
    scenario: str


class Probed(BaseModel):
    done: bool = False


class Probe(Capability):
    id = "kill.probe"
    idempotent = True
    puts = (Probed,)
    options = CapabilityOptions(
        execute_timeout=timedelta(minutes=2),
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=0.5), backoff_coefficient=1.0, maximum_tries=5
        ),
    )

    def __init__(self, http: httpx.AsyncClient, base: str) -> None:
        self.http, self.base = http, base

    async def execute(self, ctx: StepContext) -> None:
        resp = await self.http.get(f"{self.base}/probe/{ctx.input.scenario}", timeout=120)
        resp.raise_for_status()
        ctx.put(Probed.model_validate(resp.json()))


class Watch(Capability):
    id = "kill.watch"
    idempotent = True
    options = CapabilityOptions(
        execute_timeout=timedelta(minutes=2),
        heartbeat_timeout=HEARTBEAT,
        retry=RetryPolicy(
            initial_interval=timedelta(seconds=0.5),
            backoff_coefficient=1.0,
            total_duration=WINDOW,
        ),
    )

    def __init__(self, http: httpx.AsyncClient, base: str) -> None:
        self.http, self.base = http, base

    async def execute(self, ctx: StepContext) -> None:
        async def beat() -> None:
            while True:
                await ctx.heartbeat({"alive": True})
                await asyncio.sleep(0.2)

        beating = asyncio.ensure_future(beat())
        try:
            resp = await self.http.get(f"{self.base}/probe/{ctx.input.scenario}", timeout=120)
            resp.raise_for_status()
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)


def flows(deps: Deps) -> list[Flow]:
    """The two flows, calling the scripted provider at ``FLOWPARK_OCR_BASE_URL``."""
    http = deps.http
    base = os.environ["FLOWPARK_OCR_BASE_URL"].rstrip("/")
    poll = Flow(
        "kill.poll",
        "1.0.0",
        input=Scenario,
        trigger=HttpTrigger("POST", "/api/v1/kill-poll", idempotent=False),
    )
    poll.poll_until(
        Probe(http, base),
        until=lambda bag: bag.get(Probed).done,
        interval=Backoff.fixed(timedelta(seconds=1)),
        timeout=BUDGET,
        reads=(Probed,),
    )
    watch = Flow(
        "kill.heartbeat",
        "1.0.0",
        input=Scenario,
        trigger=HttpTrigger("POST", "/api/v1/kill-heartbeat", idempotent=False),
    )
    watch.step(Watch(http, base))
    return [poll, watch]


if __name__ == "__main__":
    app = create_app(Settings(), flows=[flows])
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
