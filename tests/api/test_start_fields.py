"""A start body of a user's flow (a plain pydantic input, unknown fields ignored by default)
names only its input's fields and ``instanceKey``: anything else is 422 ``input_invalid``
naming the field (a misspelt ``instance_key`` is not dropped in silence), and nothing
starts."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.api.operator_support import Operated, operated
from tests.engine.flows import poll_flow
from tests.support.api import assert_problem

ROUTE = "/api/v1/t-poll"


@pytest.fixture
async def op(_sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Operated]:
    # the route's check, before any store: one store is enough
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    async with operated(f"sqlite:///{tmp_path / 'flowpark.db'}", [poll_flow()]) as running:
        yield running


async def test_an_unknown_field_is_refused_and_named(op: Operated) -> None:
    async with op.client() as client:
        refused = await client.post(
            ROUTE,
            json={"order_id": "o-1", "instance_key": "k-1"},
            headers={"Idempotency-Key": "s-1"},
        )
        assert_problem(refused, 422, "input_invalid")
        [error] = refused.json()["errors"]
        assert error["loc"] == ["instance_key"]
        assert "did you mean instanceKey?" in error["msg"]
        listed = await client.get("/api/v1/instances", params={"flow": "t.poll"})
        assert listed.json()["instances"] == []  # nothing started

        started = await client.post(
            ROUTE,
            json={"order_id": "o-1", "instanceKey": "k-1"},
            headers={"Idempotency-Key": "s-2"},
        )
        assert started.status_code == 202, started.text
        view = (await client.get(f"/api/v1/instances/{started.json()['instanceId']}")).json()
        assert view["instanceKey"] == "k-1"
        spec = (await client.get("/openapi.json")).json()
        body = spec["paths"][ROUTE]["post"]["requestBody"]["content"]["application/json"]
        assert body["schema"]["additionalProperties"] is False
