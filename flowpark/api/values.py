"""What an execution put, as the instance views show it: redacted by the capability's own
hook (:meth:`flowpark.flows.capability.Capability.redact`), then bounded in size."""

from __future__ import annotations

import json
import logging
from typing import Any

from flowpark.engine.records import StepKind, StepRow
from flowpark.flows.capability import Capability
from flowpark.flows.plan import CapabilityStep, Plan

__all__ = ["MAX_VALUE_CHARS", "capability_of", "shown_values"]

log = logging.getLogger("flowpark.api")

#: A put value whose JSON text is longer than this is shown as its first characters.
MAX_VALUE_CHARS = 1000
#: What a row's values become when the capability's redaction hook failed.
HIDDEN = "*** (hidden: the capability's redaction failed)"
#: What they become on a node that does not serve the flow version (no hook to ask).
UNSERVED = "*** (hidden: this node does not serve this flow version)"


def capability_of(plan: Plan | None, row: StepRow) -> Capability | None:
    """The capability that wrote ``row`` (its step's, or the step's compensation), or None
    when this node does not have the flow version or the row is no execution."""
    if plan is None or not 0 <= row.step_id < len(plan.steps):
        return None
    step = plan.steps[row.step_id]
    if not isinstance(step, CapabilityStep):
        return None
    if row.kind is StepKind.COMPENSATION:
        return step.compensation
    return step.capability if row.kind is StepKind.STEP else None


def _bounded(value: Any) -> tuple[Any, bool]:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    if len(text) <= MAX_VALUE_CHARS:
        return value, False
    return f"{text[:MAX_VALUE_CHARS]}… ({len(text)} characters)", True


def shown_values(plan: Plan | None, row: StepRow) -> tuple[dict[str, Any], bool]:
    """``row``'s put values as shown: through the capability's redaction, each value's JSON
    text cut at :data:`MAX_VALUE_CHARS` (a cut value becomes a string ending with its full
    length).

    Returns:
        ``(values, truncated)``: ``{bag_key: value}`` and whether a value was cut. On a
        node that does not serve the flow version (no hook to ask), or when the hook
        raises, every value of the row is hidden.
    """
    if not row.values:
        return {}, False
    if plan is None:
        return {key: UNSERVED for key in row.values}, False
    values = dict(row.values)
    capability = capability_of(plan, row)
    if capability is not None:
        try:
            values = dict(capability.redact(values))
        except Exception:  # noqa: BLE001 - a flow's code: hide, never fail the page
            log.warning("the redaction of %s raised; its values are hidden", capability.id)
            return {key: HIDDEN for key in row.values}, False
    shown: dict[str, Any] = {}
    truncated = False
    for key, value in values.items():
        shown[key], cut = _bounded(value)
        truncated = truncated or cut
    return shown, truncated
