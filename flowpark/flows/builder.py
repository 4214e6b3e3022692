"""The authoring API: ``Flow`` and its block builder.

Example::

    flow = (
        Flow("document.process", "1.0.0", input=ProcessDocument, output=DocumentResult,
             trigger=HttpTrigger("POST", "/api/v1/documents"), deadline=timedelta(hours=6))
        .step(UploadToOcr(ocr)).compensate_with(CancelOcrJob(ocr))
        .poll_until(CheckOcrStatus(ocr), until=is_terminal, interval=OCR_POLLING,
                    timeout=OCR_BUDGET)
        .on_timeout(lambda b: b.step(Escalate()).fail("document.not_read_in_time", "..."))
        .step(ExtractFields(ocr))
        .emit("document.processed", processed_event)
        .returns(result)
    )

The builder records what it is told; :func:`flowpark.flows.rules.compile_flow` checks the
definition rules and freezes it into a :class:`~flowpark.flows.plan.Plan`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Self, TypeAlias

from pydantic import BaseModel

from flowpark.flows.capability import Bag, Capability, Signal, SignalMatch
from flowpark.flows.durations import Backoff, DurationLike, to_timedelta
from flowpark.flows.plan import HttpTrigger, Profile

__all__ = ["Block", "Flow"]

BlockSpec: TypeAlias = "Callable[[Block], Block] | Block"


@dataclass
class StepItem:
    capability: Any
    compensation: Capability | None = None
    on_failure: list[Item] | None = None


@dataclass
class PollItem:
    body: Any
    until: Callable[[Bag], bool]
    interval: Backoff
    timeout: timedelta
    reads: tuple[type[BaseModel], ...] = ()
    signal: Signal | None = None
    on_timeout: list[Item] | None = None
    compensation: Capability | None = None
    match: SignalMatch | None = None
    warn_before: timedelta | None = None
    on_warning: Any = None


@dataclass
class AwaitItem:
    signal: Signal
    timeout: timedelta | None
    on_timeout: list[Item] | None = None
    match: SignalMatch | None = None
    warn_before: timedelta | None = None
    on_warning: Any = None


def warning_lead(warn_before: DurationLike | float | None, timeout: timedelta) -> timedelta | None:
    """How long before a wait's end its warning comes, from ``warn_before``: a duration
    (``timedelta`` or ISO-8601, e.g. ``"PT10M"``) or a fraction of ``timeout`` (``0.25``: when
    a quarter of the budget is left); None for no warning.

    Raises:
        ValueError: the lead is not strictly between 0 and ``timeout`` (a fraction not
            strictly between 0 and 1, a duration as long as the budget or longer).
    """
    if warn_before is None:
        return None
    if isinstance(warn_before, bool) or not isinstance(warn_before, timedelta | str | float):
        raise ValueError(
            f"warn_before must be a duration (timedelta or ISO-8601) or a fraction of the "
            f"budget (a float between 0 and 1), got {warn_before!r}"
        )
    if isinstance(warn_before, float):
        if not 0.0 < warn_before < 1.0:
            raise ValueError(f"warn_before {warn_before!r}: a fraction must be between 0 and 1")
        return timeout * warn_before
    lead = to_timedelta(warn_before, name="warn_before")
    if not timedelta(0) < lead < timeout:
        raise ValueError(
            f"warn_before {lead} must be positive and shorter than the timeout {timeout}"
        )
    return lead


@dataclass
class FailItem:
    code: str
    message: str


@dataclass
class EmitItem:
    name: str
    factory: Callable[[Bag], BaseModel | dict[str, Any]]
    reads: tuple[type[BaseModel], ...] = ()


Item = StepItem | PollItem | AwaitItem | FailItem | EmitItem


@dataclass
class Misuse:
    """A builder call that did not fit where it was made (reported as a definition error)."""

    code: str
    message: str


class Block:
    """An ordered list of steps; a flow's body and every nested block are Blocks.

    Every method returns the block, so calls chain. Modifiers (``compensate_with``,
    ``on_failure``, ``or_signal``, ``on_timeout``) apply to the step added last.
    """

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.misuses: list[Misuse] = []

    # -- steps -------------------------------------------------------------------------
    def step(self, capability: Capability) -> Self:
        """Run ``capability`` once (retried by its own policy)."""
        self.items.append(StepItem(capability))
        return self

    def poll_until(
        self,
        capability: Capability,
        *,
        until: Callable[[Bag], bool],
        interval: Backoff,
        timeout: DurationLike,
        reads: tuple[type[BaseModel], ...] = (),
        warn_before: DurationLike | float | None = None,
        on_warning: Capability | None = None,
    ) -> Self:
        """Run ``capability`` until ``until`` holds, parking between attempts.

        Args:
            capability: the body: one idempotent capability (rules ``poll.*``).
            until: predicate over the state bag, asked after every successful attempt.
            interval: the :class:`Backoff` between attempts (jittered when it says so).
            timeout: budget from attempt 0's start (``timedelta`` or ISO-8601).
            reads: bag types ``until`` reads (checked against earlier puts).
            warn_before: a warning this long before the budget ends (a duration, e.g.
                ``"PT10M"``, or a fraction of ``timeout``, e.g. ``0.25``): at that instant,
                stored with the budget, the event ``budget.warning`` is written to the
                outbox once and the wait goes on. None (default): no warning.
            on_warning: a capability run once at the warning (after its event), e.g. one
                that requests a review or notifies someone; its own retry policy retries
                it while the wait goes on, and the wait neither ends nor moves for it (a
                try that fails for good is recorded, and the wait goes on). None
                (default): the event only.

        Raises:
            TypeError: ``interval`` is not a :class:`Backoff`.
            ValueError: ``warn_before`` is not strictly between 0 and ``timeout``, or
                ``on_warning`` without ``warn_before``.
        """
        if not isinstance(interval, Backoff):
            raise TypeError(
                f"interval must be a Backoff (e.g. Backoff.exponential('PT5S', 'PT5M')), "
                f"got {type(interval).__name__}"
            )
        budget = to_timedelta(timeout, name="timeout")
        lead = warning_lead(warn_before, budget)
        if on_warning is not None and lead is None:
            raise ValueError("on_warning needs warn_before: the instant it runs at")
        self.items.append(
            PollItem(
                capability, until, interval, budget, reads, warn_before=lead, on_warning=on_warning
            )
        )
        return self

    def await_signal(
        self,
        signal: Signal,
        *,
        timeout: DurationLike | None = None,
        match: SignalMatch | None = None,
        warn_before: DurationLike | float | None = None,
        on_warning: Capability | None = None,
    ) -> Self:
        """Park until ``signal`` is delivered (its payload goes into the bag), or ``timeout``
        from reaching this step runs out (then ``on_timeout``, else
        ``flow.signal_not_received``).

        Args:
            signal: the signal to wait for.
            timeout: ``timedelta`` or ISO-8601 duration; None waits without bound.
            match: ``match(bag, payload) -> bool``: whether a delivered signal belongs to
                this wait (``payload`` is the validated signal model). A signal it
                refuses is kept, marked ``matched: false``, and ends nothing; None
                accepts every signal of the name. A match that raises refuses.
            warn_before: a warning this long before ``timeout`` ends (a duration or a
                fraction of it; as :meth:`poll_until`'s): the event ``budget.warning``,
                once, without ending the wait.
            on_warning: a capability run once at the warning, as :meth:`poll_until`'s;
                the wait takes its signal meanwhile.

        Raises:
            ValueError: ``warn_before`` without a ``timeout``, or not strictly between 0
                and it; ``on_warning`` without ``warn_before``.
        """
        limit = None if timeout is None else to_timedelta(timeout, name="timeout")
        if warn_before is not None and limit is None:
            raise ValueError("warn_before needs a timeout: a wait without one never ends")
        lead = warning_lead(warn_before, limit) if limit is not None else None
        if on_warning is not None and lead is None:
            raise ValueError("on_warning needs warn_before: the instant it runs at")
        self.items.append(
            AwaitItem(signal, limit, match=match, warn_before=lead, on_warning=on_warning)
        )
        return self

    def fail(self, code: str, message: str = "") -> Self:
        """End the flow as failed with ``code``; completed steps' compensations unwind."""
        self.items.append(FailItem(code, message or code))
        return self

    def emit(
        self,
        name: str,
        factory: Callable[[Bag], BaseModel | dict[str, Any]],
        *,
        reads: tuple[type[BaseModel], ...] = (),
    ) -> Self:
        """Write the event ``factory(bag)`` named ``name`` to the outbox, exactly once."""
        self.items.append(EmitItem(name, factory, reads))
        return self

    # -- modifiers ---------------------------------------------------------------------
    def compensate_with(self, capability: Capability) -> Self:
        """Undo the last step with ``capability`` when the flow later fails or is cancelled."""
        last = self.items[-1] if self.items else None
        if isinstance(last, StepItem | PollItem):
            last.compensation = capability
        else:
            self._misuse("compensate_with", "a step")
        return self

    def on_failure(self, block: BlockSpec) -> Self:
        """Route the last step's exhausted failure to ``block`` (which sees
        ``ctx.recovery_error``) instead of failing the flow; success skips the block."""
        last = self.items[-1] if self.items else None
        if isinstance(last, StepItem):
            last.on_failure = self._nested(block)
        else:
            self._misuse("on_failure", "a step")
        return self

    def or_signal(self, signal: Signal, *, match: SignalMatch | None = None) -> Self:
        """Let a delivered ``signal`` end the last poll's wait early.

        Args:
            signal: the signal that ends the wait.
            match: ``match(bag, payload) -> bool``: whether a delivered signal belongs to
                this wait, e.g. ``lambda bag, s: s.job_id == bag.get(Job).job_id``. A
                signal it refuses is kept, marked ``matched: false``, and ends nothing
                (the poll goes on); None accepts every signal of the name. A match that
                raises refuses.
        """
        last = self.items[-1] if self.items else None
        if isinstance(last, PollItem):
            last.signal = signal
            last.match = match
        else:
            self._misuse("or_signal", "a poll")
        return self

    def on_timeout(self, block: BlockSpec) -> Self:
        """Run ``block`` when the last poll's or await's budget runs out. The block rejoins
        the flow after it unless it ends with ``fail``."""
        last = self.items[-1] if self.items else None
        if isinstance(last, PollItem | AwaitItem):
            last.on_timeout = self._nested(block)
        else:
            self._misuse("on_timeout", "a poll or an await_signal")
        return self

    def _nested(self, block: BlockSpec) -> list[Item]:
        built = block(Block()) if callable(block) and not isinstance(block, Block) else block
        if not isinstance(built, Block):
            raise TypeError("a block must be a Block or a callable returning the Block it got")
        self.misuses.extend(built.misuses)
        return list(built.items)

    def _misuse(self, method: str, needs: str) -> None:
        self.misuses.append(Misuse("builder.modifier_misplaced", f"{method}() must follow {needs}"))


class Flow(Block):
    """A named, versioned flow definition.

    Args:
        name: stable name, e.g. ``document.process``.
        version: version string, e.g. ``1.0.0``; instances finish on the version they
            started with.
        input: pydantic model of the input.
        output: pydantic model of the result, or None.
        profile: :class:`Profile` (default durable).
        trigger: :class:`HttpTrigger` or None.
        deadline: bound on a whole instance from its start (``timedelta`` or ISO-8601).
        streams: streams the flow's capabilities write.
        display_key: the input field (its JSON name, e.g. ``documentId``) that names an
            instance to people: lists, search and the CLI show and find instances by it
            (rule ``flow.display_key_unknown`` when the input has no such field).
    """

    def __init__(
        self,
        name: str,
        version: str,
        *,
        input: type[BaseModel],
        output: type[BaseModel] | None = None,
        profile: Profile = Profile.DURABLE,
        trigger: HttpTrigger | None = None,
        deadline: DurationLike | None = None,
        streams: tuple[Any, ...] = (),
        display_key: str | None = None,
    ) -> None:
        super().__init__()
        self.display_key = display_key
        self.name = name
        self.version = version
        self.input_model = input
        self.output_model = output
        self.profile = profile
        self.trigger = trigger
        self.deadline = None if deadline is None else to_timedelta(deadline, name="deadline")
        self.streams = tuple(streams)
        self.returns_factory: Callable[[Bag], Any] | None = None
        self.returns_reads: tuple[type[BaseModel], ...] = ()

    def returns(
        self, factory: Callable[[Bag], Any], *, reads: tuple[type[BaseModel], ...] = ()
    ) -> Flow:
        """Build the instance's result from the bag when it reaches the end."""
        self.returns_factory = factory
        self.returns_reads = reads
        return self
