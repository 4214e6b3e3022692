"""One run's view of its instance's signal mailbox: the untaken signals it knows, the
match that decides which wait a signal belongs to, and taking a signal (journaled)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from app.engine.context import revive
from app.engine.journal import Outcome, SignalRecord, StepKind, StepRow
from app.flows.capability import bag_key

if TYPE_CHECKING:
    from app.engine.runner import Run

__all__ = ["RunMailbox"]

log = logging.getLogger("flowpark.engine")


class RunMailbox:
    """The signals of one run: those waiting untaken, and those it took or refused.

    Args:
        run: the run whose instance's mailbox this is.
        signals: the untaken signals its claim loaded.

    Attributes:
        signals: the untaken signals as this run last read them.
        taken: signals this run took or refused, as it marked them.
    """

    def __init__(self, run: Run, signals: list[SignalRecord]) -> None:
        self.run = run
        self.signals = list(signals)
        self.taken: list[SignalRecord] = []

    async def refresh(self) -> None:
        """Re-read untaken signals when this run has worked since it loaded them (a signal
        may have arrived meanwhile); a fresh claim's snapshot is current already."""
        run = self.run
        if run.tries or run.pending_wake is None:
            self.signals = await run.journal.mailbox.pending_signals(run.instance_id)

    def pending(self, name: str) -> SignalRecord | None:
        """The oldest untaken signal named ``name``.

        Args:
            name: the signal's name.

        Returns:
            The signal, or None when none waits.
        """
        for signal in self.signals:
            if signal.name == name and signal.taken_at is None:
                return signal
        return None

    async def matching(
        self,
        node_index: int,
        name: str,
        model: type[BaseModel],
        match: Callable[[Any, Any], bool] | None,
    ) -> SignalRecord | None:
        """The first waiting signal ``name`` that belongs to the wait at ``node_index``.

        It belongs when the wait's ``match`` holds over the bag and the payload (every one
        does without a match). Each earlier signal of that name the match refuses is marked
        refused (``matched`` false, out of the mailbox), so it neither ends this wait nor
        wakes it again. A match that raises refuses (logged).

        Args:
            node_index: the waiting node.
            name: the signal's name.
            model: the signal's payload model.
            match: the wait's correlation, ``match(bag, payload)``; None: any.

        Returns:
            The signal, or None when none waits.
        """
        run = self.run
        while (signal := self.pending(name)) is not None:
            if match is None or self._matches(signal, model, match):
                return signal
            await run.flush()
            now = run.now()
            ack = await run.journal.mailbox.refuse_signal(
                run.instance_id, run.token, signal.id, node_index, now
            )
            self.signals = [s for s in self.signals if s.id != signal.id]
            self.taken.append(
                replace(signal, taken_at=now, taken_step_id=node_index, matched=False)
            )
            run.after_ack(ack)
            log.info(
                "instance %s: signal %s (%s) does not match the wait at node %d: kept, refused",
                run.instance_id,
                signal.id,
                name,
                node_index,
            )
        return None

    def _matches(
        self, signal: SignalRecord, model: type[BaseModel], match: Callable[[Any, Any], bool]
    ) -> bool:
        try:
            return bool(match(self.run.view(), revive(model, signal.payload)))
        except Exception as exc:  # noqa: BLE001 - user code: a match that raises refuses
            log.warning(
                "instance %s: the match of signal %s raised %s: %s (refused)",
                self.run.instance_id,
                signal.name,
                type(exc).__name__,
                exc,
            )
            return False

    async def take(
        self, node_index: int, scope: int, signal: SignalRecord, model: type[BaseModel]
    ) -> None:
        """Take ``signal`` at node ``node_index``: mark it taken and journal it in one write.

        Args:
            node_index: the node whose wait the signal ends.
            scope: the row's scope (a poll's attempt number; 0 elsewhere).
            signal: the signal to take.
            model: its payload model (the payload goes into the bag under its key).
        """
        run = self.run
        await run.flush()
        now = run.now()
        payload = revive(model, signal.payload).model_dump(mode="json", by_alias=True)
        row = StepRow(
            run.instance_id,
            node_index,
            scope,
            StepKind.SIGNAL,
            signal.name,
            Outcome.SUCCESS,
            now,
            now,
            values={bag_key(model): payload},
        )
        ack = await run.journal.mailbox.take_signal(run.token, signal.id, row)
        run.engine.observer.signal_taken(run.plan.name, (now - signal.received_at).total_seconds())
        self.signals = [s for s in self.signals if s.id != signal.id]
        self.taken.append(replace(signal, taken_at=now, taken_step_id=node_index))
        run.record(row)
        run.apply(row)
        run.after_ack(ack)
