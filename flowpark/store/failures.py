"""Reading a stored failure, alike in every store (no SQL here)."""

from __future__ import annotations

__all__ = ["named_step"]


def named_step(details: object) -> int | None:
    """The step a failure's details name (``step_id``; ``step`` or ``node`` in failures
    stored by earlier releases), as the instance view reads it, or None."""
    if not isinstance(details, dict):
        return None
    for key in ("step_id", "step", "node"):
        value = details.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
