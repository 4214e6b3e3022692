"""What capabilities see while they run: the bag view and the step context."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_json, to_jsonable_python

from app.engine.journal import ReviewRequest, StepKind
from app.flows.capability import Complete, Fail, RecoveryError, Stream, bag_key

if TYPE_CHECKING:
    from app.engine.runner import Run

__all__ = ["BagView", "ExecutionContext", "execution_key", "jsonable", "revive"]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def revive(model: type[M], data: Any) -> M:
    """Validate stored JSON data back into ``model`` in JSON mode, so models with strict
    fields (a strict ``datetime`` stored as an ISO string) read back what they wrote."""
    return model.model_validate_json(to_json(data))


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (models by alias, datetimes as ISO strings ...).

    Args:
        value: a model or any value pydantic can serialise.

    Returns:
        JSON data (dicts, lists, strings, numbers, booleans, None).

    Raises:
        pydantic_core.PydanticSerializationError: a value JSON cannot hold.
    """
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return to_jsonable_python(value, by_alias=True)


def execution_key(
    instance_id: str, step_id: int, scope: int, kind: StepKind = StepKind.STEP
) -> str:
    """The stable key of one capability execution, for its provider's idempotency key.

    The same for every try and every re-execution (after a crash, an outage, a lost lease)
    of the capability at ``(instance_id, step_id, scope)``; different for any other
    execution: another instance, node or scope, or the node's compensation.

    Args:
        instance_id: the instance's id.
        step_id: the plan node's index.
        scope: the attempt number inside a poll; 0 elsewhere.
        kind: ``StepKind.STEP`` for the capability, ``StepKind.COMPENSATION`` for its undo.

    Returns:
        ``"{instance_id}:{step_id}:{scope}"``, with ``":undo"`` appended for a
        compensation: visible ASCII when the instance id is (engine ids are), at most
        a few dozen characters.
    """
    key = f"{instance_id}:{step_id}:{scope}"
    return key + ":undo" if kind is StepKind.COMPENSATION else key


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
    """The :class:`app.flows.StepContext` the engine hands a capability for one try."""

    def __init__(
        self,
        run: Run,
        *,
        step_id: int,
        scope: int,
        try_number: int,
        recovery_error: RecoveryError | None,
        checkpoint: Any,
        heartbeat_timeout: timedelta | None = None,
        kind: StepKind = StepKind.STEP,
    ) -> None:
        super().__init__(run.instance_id, run.input, dict(run.bag))
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
        self.last_heartbeat_at: datetime | None = None

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
        return self._run.instance.instance_key

    @property
    def now(self) -> datetime:
        now: datetime = self._run.engine.clock.now()
        return now

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
        self.reviews.append(
            ReviewRequest(self._run.engine.new_id(), subject, reason, details or {})
        )

    async def heartbeat(self, value: Any = None) -> None:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", by_alias=True)
        else:
            value = to_jsonable_python(value)  # enums, datetimes ... as the store keeps them
        self._checkpoint = value
        await self._run.heartbeat(self, value)

    def last_heartbeat_value(self, model: type[T]) -> T | None:
        if self._checkpoint is None:
            return None
        if isinstance(model, type) and issubclass(model, BaseModel):
            return revive(model, self._checkpoint)
        return model(self._checkpoint)  # type: ignore[call-arg]

    async def write(self, stream: Stream, value: BaseModel) -> bool:
        return await self._run.write_stream(stream, value)

    async def sleep(self, delay: timedelta) -> None:
        await self._run.engine.clock.sleep(delay)

    def fail(self, code: str, message: str, **details: Any) -> Fail:
        return Fail(code, message, details)

    def complete(self, result: Any) -> Complete:
        return Complete(result)
