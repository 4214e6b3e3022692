"""What capabilities see while they run: the bag view and the step context."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from flowpark.engine.records import ReviewRequest, StepKind
from flowpark.engine.values import execution_key, jsonable, revive
from flowpark.flows.capability import Complete, Fail, RecoveryError, Stream, bag_key
from flowpark.flows.correlation import check_correlation_key, check_provider_name

__all__ = [
    "BagView",
    "Beat",
    "ExecutionContext",
    "TryHost",
    "execution_key",
    "jsonable",
    "revive",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


class Beat(Enum):
    """What a heartbeat's write answers the try: go on, or stop (a cancel was requested)."""

    GO_ON = "go_on"
    CANCEL = "cancel"


class TryHost(Protocol):
    """What a try's context uses of its run (:class:`flowpark.engine.execute.executor.Executor`)."""

    @property
    def instance_id(self) -> str:
        """The instance's id."""

    @property
    def input(self) -> Any:
        """The instance's input (the plan's input model)."""

    @property
    def instance_key(self) -> str | None:
        """The instance's business key, if any."""

    def now(self) -> datetime:
        """The engine clock's instant (aware UTC)."""

    def new_id(self) -> str:
        """A fresh id (review items)."""

    async def sleep(self, delay: timedelta) -> None:
        """Sleep on the engine clock."""

    async def heartbeat(self, ctx: ExecutionContext, value: Any) -> Beat:
        """Record a heartbeat of the try ``ctx`` runs; whether the try goes on."""

    async def write_stream(self, stream: Stream, value: BaseModel) -> bool:
        """Append to a stream of the instance."""


class BagView:
    """Read-only view over an instance's input and state bag (``{bag_key: json}``)."""

    def __init__(self, instance_id: str, input: Any, bag: dict[str, Any]) -> None:
        self._instance_id = instance_id
        self._input = input
        self._bag = bag

    @property
    def input(self) -> Any:
        return self._input

    @property
    def instance_id(self) -> str:
        return self._instance_id

    def get(self, model: type[M]) -> M:
        """The bag's value of ``model``'s type. Raises KeyError when absent."""
        key = bag_key(model)
        if key not in self._bag:
            raise KeyError(f"no {key} in the state bag of {self._instance_id}")
        return revive(model, self._bag[key])

    def find(self, model: type[M]) -> M | None:
        key = bag_key(model)
        return revive(model, self._bag[key]) if key in self._bag else None


class ExecutionContext(BagView):
    """The :class:`flowpark.flows.StepContext` the engine hands a capability for one try."""

    def __init__(
        self,
        run: TryHost,
        *,
        bag: Mapping[str, Any] | None = None,
        step_id: int,
        scope: int,
        try_number: int,
        recovery_error: RecoveryError | None,
        checkpoint: Any,
        heartbeat_timeout: timedelta | None = None,
        kind: StepKind = StepKind.STEP,
    ) -> None:
        super().__init__(run.instance_id, run.input, dict(bag or {}))
        self._execution_key = execution_key(run.instance_id, step_id, scope, kind)
        self._run = run
        self._step_id = step_id
        self._scope = scope
        self._try_number = try_number
        self._recovery_error = recovery_error
        self._checkpoint = checkpoint
        self.heartbeat_timeout = heartbeat_timeout
        self.puts: dict[str, Any] = {}
        self.reviews: list[ReviewRequest] = []
        #: ``(provider, key)`` pairs recorded by ``correlate``, in order, without repeats
        self.correlations: list[tuple[str, str]] = []
        self._kind = kind
        self.last_heartbeat_at: datetime | None = None
        #: set by the try's limits: ends the try for a cancel; what a heartbeat that
        #: learned of one awaits until the limits cancel the capability's task
        self.on_cancel: Callable[[], Awaitable[None]] | None = None

    @property
    def try_number(self) -> int:
        return self._try_number

    @property
    def scope(self) -> int:
        return self._scope

    @property
    def execution_key(self) -> str:
        return self._execution_key

    @property
    def instance_key(self) -> str | None:
        return self._run.instance_key

    @property
    def now(self) -> datetime:
        return self._run.now()

    @property
    def recovery_error(self) -> RecoveryError | None:
        return self._recovery_error

    def put(self, value: BaseModel) -> None:
        key = bag_key(type(value))
        data = value.model_dump(mode="json", by_alias=True)
        self.puts[key] = data
        self._bag[key] = data

    def request_review(
        self, subject: str, reason: str, details: dict[str, Any] | None = None
    ) -> None:
        self.reviews.append(ReviewRequest(self._run.new_id(), subject, reason, details or {}))

    def correlate(self, provider: str, key: str) -> None:
        if self._kind is not StepKind.STEP:
            raise ValueError("a compensation records no correlation key")
        pair = (check_provider_name(provider), check_correlation_key(key))
        if pair not in self.correlations:
            self.correlations.append(pair)

    async def heartbeat(self, value: Any = None) -> None:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        else:
            value = to_jsonable_python(value)  # enums, datetimes ... as the store keeps them
        self._checkpoint = value
        if await self._run.heartbeat(self, value) is Beat.CANCEL and self.on_cancel is not None:
            # the try ends here: nothing after this heartbeat runs; the limits cancel the
            # capability's task while it waits (asyncio.CancelledError out of this call)
            await self.on_cancel()

    def last_heartbeat_value(self, model: type[T]) -> T | None:
        if self._checkpoint is None:
            return None
        if isinstance(model, type) and issubclass(model, BaseModel):
            return revive(model, self._checkpoint)
        return model(self._checkpoint)  # type: ignore[call-arg]

    async def write(self, stream: Stream, value: BaseModel) -> bool:
        return await self._run.write_stream(stream, value)

    async def sleep(self, delay: timedelta) -> None:
        await self._run.sleep(delay)

    def fail(self, code: str, message: str, **details: Any) -> Fail:
        return Fail(code, message, details)

    def complete(self, result: Any) -> Complete:
        return Complete(result)
