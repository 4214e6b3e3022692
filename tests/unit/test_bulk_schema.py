"""The bulk action's schema says which filters narrow the selection exactly as the server
decides it (``BulkFilter.is_empty``): every filter field, set alone, is one of the schema's
ways to narrow, so a generated client never calls a filter the server takes invalid."""

from __future__ import annotations

from typing import Any

import pytest

from flowpark.api.bulk import BulkAction, BulkFilter

#: a value of each filter field that narrows the selection
NARROWING_VALUES: dict[str, Any] = {
    "flow": "document.process",
    "version": "1.0.0",
    "state": ["suspended"],
    "overdue": 600,
    "stuck": True,
    "errorCode": "job_failed",
    "compensationFailed": True,
    "waiting": "poll",
    "instanceKey": "k-1",
    "displayKey": "invoice-42",
    "createdAfter": "2026-01-01T00:00:00Z",
    "createdBefore": "2026-01-01T00:00:00Z",
}


def _ways() -> list[dict[str, Any]]:
    ways: list[dict[str, Any]] = BulkAction.model_json_schema()["then"]["properties"]["filter"][
        "anyOf"
    ]
    return ways


def test_every_filter_field_is_named() -> None:
    aliases = {f.alias or name for name, f in BulkFilter.model_fields.items()}
    assert aliases == set(NARROWING_VALUES)


@pytest.mark.parametrize("field", sorted(NARROWING_VALUES))
def test_a_filter_of_one_field_narrows_for_the_server_and_the_schema(field: str) -> None:
    body = {field: NARROWING_VALUES[field]}
    assert not BulkFilter.model_validate(body).is_empty()
    named = [way for way in _ways() if way["required"] == [field]]
    assert len(named) == 1, f"the schema lists no way to narrow by {field}"
