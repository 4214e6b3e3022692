"""The body of a bulk action (``POST /api/v1/instances/actions``): the list's filters as
JSON, and the rule that a filter naming no field needs ``"all": true``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from flowpark.api.models import INSTANT_TEXT, JSON_INTEGER
from flowpark.engine.ports.operator import InstanceFilter
from flowpark.engine.records import InstanceState, WakeKind

__all__ = ["MAX_BULK", "BulkAction", "BulkFilter"]

#: Most instances one bulk action request acts on.
MAX_BULK = 1000
_MAX_TEXT = 200


class BulkFilter(BaseModel):
    """The list's filters as a JSON body (the same names as the query parameters)."""

    model_config = ConfigDict(extra="forbid")

    flow: str | None = Field(default=None, max_length=_MAX_TEXT)
    version: str | None = Field(default=None, max_length=_MAX_TEXT)
    state: list[InstanceState] = Field(default_factory=list, max_length=5)
    # strict: a JSON string or 0/1 is not taken for a number or a boolean
    overdue: Annotated[float | None, JSON_INTEGER] = Field(default=None, ge=0, le=10 * 365 * 86400)
    stuck: bool = Field(default=False, strict=True)
    error_code: str | None = Field(default=None, alias="errorCode", max_length=_MAX_TEXT)
    compensation_failed: bool = Field(default=False, alias="compensationFailed", strict=True)
    waiting: WakeKind | None = None
    instance_key: str | None = Field(default=None, alias="instanceKey", max_length=_MAX_TEXT)
    display_key: str | None = Field(default=None, alias="displayKey", max_length=_MAX_TEXT)
    created_after: Annotated[AwareDatetime | None, INSTANT_TEXT] = Field(
        default=None, alias="createdAfter"
    )
    created_before: Annotated[AwareDatetime | None, INSTANT_TEXT] = Field(
        default=None, alias="createdBefore"
    )

    def is_empty(self) -> bool:
        """No field narrows the selection: the filter selects every instance."""
        return not (
            self.flow is not None
            or self.version is not None
            or self.state
            or self.overdue is not None
            or self.stuck
            or self.error_code is not None
            or self.compensation_failed
            or self.waiting is not None
            or self.instance_key is not None
            or self.display_key is not None
            or self.created_after is not None
            or self.created_before is not None
        )

    def to_filter(
        self, now: datetime, fields: tuple[tuple[str, str, str], ...] = ()
    ) -> InstanceFilter:
        """The read model's filter, measured at ``now`` (``fields``: the display keys)."""
        return InstanceFilter(
            flow=self.flow,
            version=self.version,
            states=tuple(dict.fromkeys(self.state)),
            overdue_seconds=self.overdue,
            stuck=self.stuck,
            error_code=self.error_code,
            compensation_failed=self.compensation_failed,
            waiting=self.waiting,
            instance_key=self.instance_key,
            created_after=self.created_after,
            created_before=self.created_before,
            now=now,
            display_fields=fields,
            display_value=self.display_key,
        )


_NOT_NULL: dict[str, Any] = {"not": {"type": "null"}}
#: A filter narrows the selection when one of its fields does: (JSON schema of each way).
_NARROWING: list[dict[str, Any]] = [
    *(
        {"required": [name], "properties": {name: _NOT_NULL}}
        for name in (
            "flow",
            "version",
            "overdue",
            "errorCode",
            "waiting",
            "instanceKey",
            "displayKey",
            "createdAfter",
            "createdBefore",
        )
    ),
    {"required": ["state"], "properties": {"state": {"type": "array", "minItems": 1}}},
    {"required": ["stuck"], "properties": {"stuck": {"const": True}}},
    {
        "required": ["compensationFailed"],
        "properties": {"compensationFailed": {"const": True}},
    },
]


def _bulk_schema(schema: dict[str, Any]) -> None:
    """The examples, and the rule :meth:`BulkFilter.is_empty` enforces: ``"all": true`` or
    a filter with a field that narrows (else 422 ``bulk_filter_missing``)."""
    schema["examples"] = [
        {"action": "wake", "filter": {"waiting": "poll", "overdue": 600}, "limit": 100},
        {"action": "cancel", "filter": {"flow": "document.process"}, "dryRun": True},
        {"action": "wake", "all": True, "dryRun": True},
    ]
    # without "all": true, the filter must narrow (if/then: generated clients read past it)
    schema["if"] = {"not": {"required": ["all"], "properties": {"all": {"const": True}}}}
    schema["then"] = {"required": ["filter"], "properties": {"filter": {"anyOf": _NARROWING}}}


class BulkAction(BaseModel):
    """``POST /api/v1/instances/actions``: act on the instances a filter selects."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_bulk_schema)

    action: Literal["wake", "cancel"]
    filter: BulkFilter = Field(default_factory=BulkFilter)
    all_: bool = Field(
        default=False,
        alias="all",
        strict=True,
        description="Act on every instance: required when `filter` names no field.",
    )
    dry_run: bool = Field(default=False, alias="dryRun", strict=True)
    limit: Annotated[int, JSON_INTEGER] = Field(default=100, ge=1, le=MAX_BULK)
    cursor: str | None = Field(default=None, max_length=400)
