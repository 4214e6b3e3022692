"""The sweep of a node: claim due instances while run slots are free, start each run,
collect them as they end (see :meth:`flowpark.engine.node.engine.Engine.sweep`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from flowpark.engine.decide.deadlines import ends_at
from flowpark.engine.node.host import NodeEngine
from flowpark.engine.outcomes import RunOutcome
from flowpark.engine.records import Claim, StepKind
from flowpark.errors import FlowparkError, StaleFencingToken, StoreUnavailable
from flowpark.outages import OUTAGES

__all__ = ["NOT_RUNNABLE_EVERY", "SweepPass", "SweepReport", "nearest_deadline", "sweep"]

_NO_DEADLINE = datetime.max.replace(tzinfo=UTC)

#: How often a node's sweep counts (and warns of) the due instances whose flow version it
#: does not serve: on its first sweep, then at most once per this span (engine clock). The
#: count is a read of its own; on every idle sweep it was about half of a sweep's work.
NOT_RUNNABLE_EVERY = timedelta(seconds=30)

log = logging.getLogger("flowpark.engine")


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes:
        claimed: instances claimed.
        advanced: runs that parked or ended.
        failed_runs: runs that raised (a stale fencing token included).
        not_runnable: due instances of flow versions this node does not serve; None when
            this sweep did not count them (see :data:`NOT_RUNNABLE_EVERY`).
        outcomes: each run's outcome.
    """

    claimed: int = 0
    advanced: int = 0
    failed_runs: int = 0
    not_runnable: int | None = None
    outcomes: list[RunOutcome] = field(default_factory=list)


def nearest_deadline(claim: Claim) -> datetime:
    """The nearest deadline of a claimed instance, as far as its claim's snapshot tells:
    the flow deadline, or the latest stored wait end (a poll's budget, a retry window,
    a signal timeout); far in the future when none is known."""
    snapshot = claim.snapshot
    if snapshot is None:
        return _NO_DEADLINE
    ends = [ends_at(row) for row in snapshot.steps if row.kind is StepKind.DEADLINE]
    found = [d for d in (snapshot.instance.deadline_at, ends[-1] if ends else None) if d]
    return min(found) if found else _NO_DEADLINE


async def sweep(
    engine: NodeEngine, limit: int | None, again: Callable[[], bool] | None
) -> SweepReport:
    """One sweep of ``engine`` (:meth:`flowpark.engine.node.engine.Engine.sweep` tells the rules).

    Args:
        engine: the node's engine.
        limit: claim at most this many instances in all (None: no limit).
        again: asked when nothing more was due: True claims again.

    Returns:
        The report.

    Raises:
        StoreUnavailable: a claim failed (the runs already started finish first).
    """
    sweep_pass = SweepPass(engine, SweepReport(), limit, again)
    try:
        await sweep_pass.run()
    except asyncio.CancelledError:
        await sweep_pass.cancel()
        raise
    if sweep_pass.failure is not None:
        raise sweep_pass.failure
    report, began, runnable = sweep_pass.report, sweep_pass.began, sweep_pass.runnable
    engine.observer.swept((engine.clock.now() - began).total_seconds(), report.claimed)
    now = engine.clock.now()
    await engine.providers.flush(now)  # the calls' counts, into the store's tally
    counted = engine.not_runnable_counted_at
    if counted is None or now >= counted + NOT_RUNNABLE_EVERY or now < counted:
        engine.not_runnable_counted_at = now
        report.not_runnable = await engine.store.intake.count_not_runnable(now, runnable)
        if report.not_runnable:
            log.warning(
                "%d due instances belong to flows not registered on node %s",
                report.not_runnable,
                engine.config.node_id,
            )
    return report


class SweepPass:
    """The state of one :meth:`~flowpark.engine.node.engine.Engine.sweep`: the runs it started and
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
        engine: NodeEngine,
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
        # the node's flows call providers: deferred work nearest its deadline goes first
        self.by_deadline = bool(engine.catalog.providers())

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
                and self.engine.claiming
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
                self._report_run(self.runs.pop(waiter)[0], waiter)

    async def _claim(self, wanted: int) -> None:
        runs = self.engine.runs
        try:
            claims, held = await self._claim_with_slots(wanted, wait=not self.runs)
        except Exception as exc:  # noqa: BLE001 - re-raised once runs end
            self.failure, self.more, claims, held = exc, False, [], 0
        self.more = self.more and len(claims) == held  # fewer claims than slots: none due
        self.report.claimed += len(claims)
        if self.by_deadline and len(claims) > 1:
            claims = await self._by_deadline(claims)
        for claim in claims:
            # the run holds the slot taken for it until it ends, also when it goes on in
            # the background
            started = runs.begin(claim, gated=False)
            started[0].add_done_callback(lambda _: runs.gate.release())
            waiting = runs.outcome(claim, *started)
            self.runs[waiting] = (claim.instance_id, started[0])
            waiting.add_done_callback(self.ended.put_nowait)

    async def _by_deadline(self, claims: list[Claim]) -> list[Claim]:
        """The claims nearest their deadline first (runs begin, and take provider tokens,
        in this order), each with its snapshot (read here when the claim has none: its
        run then reads nothing again)."""
        loaded = []
        for claim in claims:
            if claim.snapshot is None:
                try:
                    snapshot = await self.engine.store.runs.load(claim.instance_id)
                except FlowparkError:
                    loaded.append(claim)  # its run meets the error and reports it
                    continue
                claim = replace(claim, snapshot=snapshot)
            loaded.append(claim)
        return sorted(loaded, key=nearest_deadline)

    async def _claim_with_slots(self, wanted: int, *, wait: bool) -> tuple[list[Claim], int]:
        """Hold up to ``wanted`` free run slots (waiting for one when ``wait``), claim that
        many due instances, and give back the slots no claim needed.

        Returns:
            ``(claims, slots held)``; each claim keeps one slot, for its run to release.
        """
        engine = self.engine
        gate = engine.runs.gate
        held = 0
        if wait:
            await gate.acquire()
            held = 1
        while held < wanted and not gate.locked():
            await gate.acquire()  # free: returns without waiting
            held += 1
        claims: list[Claim] = []
        try:
            if held and engine.claiming:
                now = engine.clock.now()
                claims = await engine.store.intake.claim_due(
                    engine.config.node_id, now, now + engine.lease, held, self.runnable
                )
        finally:
            for _ in range(held - len(claims)):
                gate.release()
        return claims, held

    def _report_run(self, instance_id: str, run: asyncio.Future[RunOutcome]) -> None:
        error = run.exception() if not run.cancelled() else asyncio.CancelledError()
        if error is None:
            self.report.advanced += 1
            self.report.outcomes.append(run.result())
            return
        self.report.failed_runs += 1
        if isinstance(error, StoreUnavailable):
            OUTAGES.unavailable("run", error)
        elif not isinstance(error, StaleFencingToken):
            log.error(
                "instance %s: run failed on node %s",
                instance_id,
                self.engine.config.node_id,
                exc_info=error,
            )

    async def cancel(self) -> None:
        """Cancel every run this pass started and wait for them (node shutdown)."""
        for waiter, (_, task) in self.runs.items():
            waiter.cancel()
            task.cancel()
        await asyncio.gather(
            *self.runs, *(task for _, task in self.runs.values()), return_exceptions=True
        )
