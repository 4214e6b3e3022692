"""flowpark.runtime.loop: the event loop a node process runs on."""

from __future__ import annotations

import asyncio

import uvloop

from flowpark.runtime.loop import loop_factory, run


def test_run_returns_the_result_on_uvloop_and_closes_its_loop() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> int:
        seen.append(asyncio.get_running_loop())
        await asyncio.sleep(0)
        return 42

    assert run(main()) == 42
    assert isinstance(seen[0], uvloop.Loop)
    assert seen[0].is_closed()


def test_the_factory_makes_uvloop_loops() -> None:
    factory = loop_factory()
    assert factory is uvloop.new_event_loop
