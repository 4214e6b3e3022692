"""Group commit: concurrent operations of one kind run as one statement.

A :class:`Lane` collects the operations its callers submit while a batch is in flight and
runs them together as the next batch (one statement, or one short transaction, over
PostgreSQL arrays). Each caller awaits its own answer. Under load, N concurrent starts or
journal commits cost one round trip, one plan and one WAL flush instead of N; with one
caller a batch is that one operation, so a lone caller waits no longer than before.

Failure is per batch: the lane's ``run`` decides, per item, an answer or an exception (for
example ``None`` meaning "not applied: ask again on the one-at-a-time path").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from flowpark.engine.ports.values import Correlation
from flowpark.engine.records import EmittedEvent, NewInstance, StepRow

__all__ = ["CommitAnswer", "CommitItem", "FinishItem", "Lane", "Lanes"]

log = logging.getLogger("flowpark.store")

T = TypeVar("T")
R = TypeVar("R")


class Lane(Generic[T, R]):
    """Batches concurrent ``submit`` calls into calls of ``run``.

    Args:
        run: runs one batch; returns one answer (or exception instance) per item, in the
            items' order. An exception raised by ``run`` is every item's answer.
        max_batch: at most this many items per batch.
        parallel: at most this many batches in flight at once (each holds a connection).
        observe: told the size of each batch as it starts (metrics), if given.
    """

    def __init__(
        self,
        run: Callable[[Sequence[T]], Awaitable[Sequence[R | BaseException]]],
        *,
        max_batch: int = 200,
        parallel: int = 2,
        observe: Callable[[int], None] | None = None,
    ) -> None:
        self._run = run
        self._observe = observe
        self._max_batch = max_batch
        self._parallel = parallel
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._flushers = 0
        self._tasks: set[asyncio.Future[None]] = set()
        self.batches = 0
        self.items = 0

    async def submit(self, item: T) -> R:
        """Queue ``item`` for the next batch and wait for its answer.

        Raises:
            Whatever ``run`` answered for this item (or raised for its batch).
        """
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._queue.append((item, future))
        if self._flushers < self._parallel:
            self._flushers += 1
            task = asyncio.ensure_future(self._flush())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # the batch runs in its own task: a cancelled caller (its future cancelled) does
        # not cut a statement that carries other callers' work; its own item may still be
        # applied, as a statement in flight would be
        return await future

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let the callers of this loop iteration join the batch
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                self.batches += 1
                self.items += len(batch)
                if self._observe is not None:
                    self._observe(len(batch))
                try:
                    answers: Sequence[R | BaseException] = await self._run(
                        [item for item, _ in batch]
                    )
                    if len(answers) != len(batch):
                        raise RuntimeError(f"lane answered {len(answers)} of {len(batch)}")
                except BaseException as exc:  # noqa: BLE001 - every caller gets the error
                    answers = [exc] * len(batch)
                    if isinstance(exc, asyncio.CancelledError):
                        for (_, future), _answer in zip(batch, answers, strict=True):
                            if not future.done():
                                future.cancel()
                        raise
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():
                        continue
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            self._flushers -= 1
            if self._queue and self._flushers < self._parallel:
                # this flusher was cancelled with items queued behind its batch: they get
                # a flusher of their own instead of waiting for the next submit
                self._flushers += 1
                task = asyncio.ensure_future(self._flush())
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark an answer seen: a caller cancelled while its batch ran does not read it."""
    if not future.cancelled():
        future.exception()


@dataclass(frozen=True)
class CommitItem:
    """A journal row to commit under ``token``, optionally parking the instance with it.

    Attributes:
        park: ``(now, wake_at, wake_step_id, wake_scope, accept_signal, owner, wake_kind,
            woken)`` or None.
        events: outbox events written with the row (an emit's commit; not with ``park``).
        deferred: a row of the same instance committed before ``row``, with it (not with
            ``park``).
        correlations: correlation keys recorded with the row (not with ``park``).
    """

    token: int
    row: StepRow
    lease_until: datetime
    park: tuple[datetime, datetime | None, int, int, str | None, str, str | None, bool] | None = (
        None
    )
    events: tuple[EmittedEvent, ...] = ()
    deferred: StepRow | None = None
    correlations: tuple[Correlation, ...] = ()


@dataclass(frozen=True)
class CommitAnswer:
    """What a batched commit did: the row is in; ``parked`` unless a cancel was requested
    (``cancel_requested``) or an accepted signal waits (``signal_pending``)."""

    cancel_requested: bool
    parked: bool = False
    signal_pending: bool = False


@dataclass(frozen=True)
class FinishItem:
    """Complete the instance ``id`` under ``token`` with ``result`` at ``now``."""

    id: str
    token: int
    now: datetime
    result: Any


@dataclass(frozen=True)
class Lanes:
    """The PostgreSQL store's group-commit lanes (filled by
    :class:`~flowpark.store.batched.PgBatches`)."""

    create: Lane[NewInstance, bool | None]
    commit: Lane[CommitItem, CommitAnswer | None]
    park: Lane[CommitItem, CommitAnswer | None]
    finish: Lane[FinishItem, bool | None]
