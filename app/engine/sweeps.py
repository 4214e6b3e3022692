"""One sweep pass of a node: claim due instances while run slots are free, start each run,
collect them as they end (see :meth:`app.engine.engine.Engine.sweep`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from app.engine.stops import RunOutcome

if TYPE_CHECKING:
    from app.engine.engine import Engine, SweepReport

__all__ = ["SweepPass"]


class SweepPass:
    """The state of one :meth:`~app.engine.engine.Engine.sweep`: the runs it started and
    the report it fills.

    Args:
        engine: the node's engine.
        report: the report to fill (``claimed``, ``advanced``, ``failed_runs``, outcomes).
        limit: claim at most this many instances in all (None: no limit).
        again: asked when nothing more was due: True claims again (an in-process wake).

    Attributes:
        failure: a claim's error, raised by the sweep once its runs ended.
        began: the engine-clock instant the pass began.
        runnable: the ``(flow, version)`` pairs this node serves.
    """

    def __init__(
        self,
        engine: Engine,
        report: SweepReport,
        limit: int | None,
        again: Callable[[], bool] | None,
    ) -> None:
        self.engine = engine
        self.report = report
        self.limit = limit
        self.again = again
        self.began: datetime = engine.clock.now()
        self.runnable = engine.catalog.runnable()
        self.failure: BaseException | None = None
        self.runs: dict[asyncio.Future[RunOutcome], tuple[str, asyncio.Future[RunOutcome]]] = {}
        # runs report here as they end (one callback each, not asyncio.wait's add and remove
        # of a callback on every run in flight per ended run)
        self.ended: asyncio.Queue[asyncio.Future[RunOutcome]] = asyncio.Queue()
        self.more = True

    async def run(self) -> None:
        """Claim and start runs while any is due and slots are free; return once every run
        this pass started has ended or gone on in the background.

        Raises:
            asyncio.CancelledError: the sweep was cancelled (the caller cancels the runs).
        """
        config = self.engine.config
        batch = config.sweep_batch
        refill = max(1, min(batch, config.concurrency) // 4)
        while True:
            limit = self.limit
            wanted = batch if limit is None else min(batch, limit - self.report.claimed)
            if (
                self.more
                and self.engine._claiming
                and wanted > 0
                and (not self.runs or config.concurrency - len(self.runs) >= refill)
            ):
                await self._claim(wanted)
            if not self.more and self.failure is None and self.again is not None and self.again():
                self.more = True
                if not self.runs:
                    continue
            if not self.runs:
                return
            done = [await self.ended.get()]
            while not self.ended.empty():
                done.append(self.ended.get_nowait())
            for waiter in done:
                self.engine._report_run(self.report, self.runs.pop(waiter)[0], waiter)

    async def _claim(self, wanted: int) -> None:
        engine = self.engine
        try:
            claims, held = await engine._claim_with_slots(wanted, self.runnable, wait=not self.runs)
        except Exception as exc:  # noqa: BLE001 - re-raised once runs end
            self.failure, self.more, claims, held = exc, False, [], 0
        self.more = self.more and len(claims) == held  # fewer claims than slots: none due
        self.report.claimed += len(claims)
        for claim in claims:
            # the run holds the slot taken for it until it ends, also when it goes on in
            # the background
            started = engine._begin_run(claim, gated=False)
            started[0].add_done_callback(lambda _: engine._gate.release())
            waiting = engine._outcome(claim, *started)
            self.runs[waiting] = (claim.instance_id, started[0])
            waiting.add_done_callback(self.ended.put_nowait)

    async def cancel(self) -> None:
        """Cancel every run this pass started and wait for them (node shutdown)."""
        for waiter, (_, task) in self.runs.items():
            waiter.cancel()
            task.cancel()
        await asyncio.gather(
            *self.runs, *(task for _, task in self.runs.values()), return_exceptions=True
        )
