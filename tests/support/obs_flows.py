"""Flows with known counts for the observability tests, and a server process serving them.

* ``obs.poll``: a parked poll satisfied at its third attempt (scope 2): 3 attempts, 2 parks.
* ``obs.timeout``: one attempt, then its 0.3 s budget runs out (``flow.poll_not_satisfied``).
* ``obs.signal``: one attempt, then parked until the ``obs.nudge`` signal ends the wait.

Each attempt calls the provider at ``$OBS_PROVIDER_URL/probe`` over HTTP when that variable
is set (the trace test's provider records the ``traceparent`` it receives).

``python -m tests.support.obs_flows --port P`` serves these flows with ``create_app`` and
the settings of the ``FLOWPARK_*`` environment (one process, uvicorn).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from pydantic import BaseModel

from flowpark.flows import Backoff, Capability, Flow, HttpTrigger, Signal, StepContext
from flowpark.runtime.loading import Deps
from flowpark.settings import Settings
from tests.support.server import TOKEN, free_port

__all__ = ["NUDGE", "flows", "obs_server"]

ROOT = Path(__file__).resolve().parents[2]


class Probed(BaseModel):
    scope: int = 0


class Order(BaseModel):
    order_id: str = "o-1"


class Nudge(BaseModel):
    note: str = ""


NUDGE = Signal("obs.nudge", Nudge)


class _Probe(Capability):
    idempotent = True
    puts = (Probed,)

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def execute(self, ctx: StepContext) -> None:
        provider = os.environ.get("OBS_PROVIDER_URL")
        if provider:
            answer = await self.http.get(f"{provider}/probe", timeout=10)
            answer.raise_for_status()
        ctx.put(Probed(scope=ctx.scope))


class Probe(_Probe):
    id = "obs.probe"


class Never(_Probe):
    id = "obs.never"


class Wait(_Probe):
    id = "obs.wait"


def flows(deps: Deps) -> list[Flow]:
    """``obs.poll``, ``obs.timeout`` and ``obs.signal`` (HTTP triggers below
    ``/api/v1/obs/``), their capabilities calling through the node's client."""
    http = deps.http
    return [
        Flow(
            "obs.poll", "1.0.0", input=Order, trigger=HttpTrigger("POST", "/api/v1/obs/poll", False)
        )
        .poll_until(
            Probe(http),
            until=lambda bag: bag.get(Probed).scope >= 2,
            interval=Backoff.fixed("PT0.05S"),
            timeout="PT1H",
            reads=(Probed,),
        )
        .or_signal(NUDGE),
        Flow(
            "obs.timeout",
            "1.0.0",
            input=Order,
            trigger=HttpTrigger("POST", "/api/v1/obs/timeout", False),
        ).poll_until(
            Never(http), until=lambda bag: False, interval=Backoff.fixed("PT10S"), timeout="PT0.3S"
        ),
        Flow(
            "obs.signal",
            "1.0.0",
            input=Order,
            trigger=HttpTrigger("POST", "/api/v1/obs/signal", False),
        )
        .poll_until(
            Wait(http), until=lambda bag: False, interval=Backoff.fixed("PT1H"), timeout="PT2H"
        )
        .or_signal(NUDGE),
    ]


@contextmanager
def obs_server(
    database_url: str,
    log: Path,
    *,
    extra_env: dict[str, str] | None = None,
    log_level: str = "warning",
    **settings: str,
) -> Iterator[str]:
    """``python -m tests.support.obs_flows`` on a free port, output to ``log``; yields its
    base URL (not yet known to be up). ``extra_env``: more environment; ``settings``:
    ``FLOWPARK_<NAME>`` values by lower-case name."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(
        FLOWPARK_DATABASE_URL=database_url,
        FLOWPARK_API_TOKENS=TOKEN,
        FLOWPARK_SELF_URL=f"http://127.0.0.1:{port}",
        FLOWPARK_NODE_ID="obs-node",
        PYTHONUNBUFFERED="1",
        **{f"FLOWPARK_{k.upper()}": v for k, v in settings.items()},
    )
    env.update(extra_env or {})
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.obs_flows",
                "--port",
                str(port),
                "--log-level",
                log_level,
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:  # pragma: no cover - runs in the server process
    import uvicorn

    from flowpark.runtime.app import create_app
    from flowpark.runtime.logs import configure_logging, log_config

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    configure_logging(args.log_level)
    app = create_app(Settings(), flows=[flows])
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level=args.log_level,
        log_config=log_config(args.log_level),
    )


if __name__ == "__main__":  # pragma: no cover
    main()
