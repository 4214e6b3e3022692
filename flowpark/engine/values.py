"""Stored values: JSON data in and out of models, and the execution key (no engine state)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel
from pydantic_core import to_json, to_jsonable_python

from flowpark.engine.records import StepKind

__all__ = ["DECISION_KEY", "execution_key", "jsonable", "revive"]

M = TypeVar("M", bound=BaseModel)


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
    execution: another instance, step or scope, or the step's compensation.

    Args:
        instance_id: the instance's id.
        step_id: the plan step's index.
        scope: the attempt number inside a poll; 0 elsewhere.
        kind: ``StepKind.STEP`` for the capability, ``StepKind.COMPENSATION`` for its undo.

    Returns:
        ``"{instance_id}:{step_id}:{scope}"``, with ``":undo"`` appended for a
        compensation: visible ASCII when the instance id is (engine ids are), at most
        a few dozen characters.
    """
    key = f"{instance_id}:{step_id}:{scope}"
    return key + ":undo" if kind is StepKind.COMPENSATION else key


DECISION_KEY = "$decision"
"""The key under which a try's row records a capability's Fail or Complete decision."""
