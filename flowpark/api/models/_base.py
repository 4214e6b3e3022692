"""The base of the answer models and the helpers they share: camelCase aliases, strict
instants and integers, example values."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["INSTANT_TEXT", "JSON_INTEGER", "ApiModel"]

_NUMBER = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*")


def _instant_text(value: Any) -> Any:
    """Only ISO-8601 text is an instant: pydantic would read a number (or a numeric
    string) as Unix seconds, which the documented ``date-time`` format does not allow."""
    if isinstance(value, bool | int | float) or (
        isinstance(value, str) and _NUMBER.fullmatch(value)
    ):
        raise ValueError("an instant is ISO-8601 text with a UTC offset or Z")
    return value


def _json_integer(value: Any) -> Any:
    """A JSON number (``90`` or ``90.0``), never a string or a boolean."""
    if isinstance(value, str | bool):
        raise ValueError("must be a JSON number")
    return value


#: ``Annotated`` metadata: an instant is ISO-8601 text (``2026-01-31T12:00:00Z``), never a
#: number read as Unix seconds.
INSTANT_TEXT = BeforeValidator(_instant_text)
#: ``Annotated`` metadata: a number is a JSON number (not a string, not a boolean).
JSON_INTEGER = BeforeValidator(_json_integer)

_ID = "01936b2e-7a40-7c3e-9a51-5f1d2c3b4a59"
_AT = "2026-12-01T09:30:00.125000Z"
_LATER = "2026-12-01T09:30:04.500000Z"
_HREF = f"/api/v1/documents/{_ID}/signals/ocr.completed"


class ApiModel(BaseModel):
    """Base of the answer models: camelCase aliases, unknown fields refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _examples(*values: dict[str, Any]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": list(values)})
