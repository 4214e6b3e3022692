"""The rules a request line is held to, as the OpenAPI document states them and the server
enforces them: control characters refused (422) with a message true for each, and an
integer query parameter that takes decimal digits only."""

from __future__ import annotations

import httpx
import pytest

from flowpark.runtime.openapi import document
from tests.support.api import assert_problem


@pytest.mark.parametrize("value", ["%01", "%7F", "%C2%85", "a%09b"])
async def test_a_control_character_in_a_query_is_refused_with_the_rule_it_broke(
    client: httpx.AsyncClient, value: str
) -> None:
    body = assert_problem(await client.get(f"/api/v1/events?x={value}"), 422, "input_invalid")
    # (a store keeps U+0001 well: the rule is that no path, query or header holds one)
    assert "no store can keep" not in body["detail"]
    assert "may hold no control character" in body["detail"]
    assert body["errors"][0]["loc"] == ["query", "x"]


def test_the_openapi_document_states_the_control_character_rule() -> None:
    doc = document()
    assert "control character" in doc["info"]["description"]
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            described = operation["responses"]["422"]["description"]
            assert "no control character" in described, (method, path)


@pytest.mark.parametrize(
    "query",
    ["after=0.0", "after=1e3", "after=%205", "limit=10.0", "limit=0x10", "after=1&after=2.5"],
)
async def test_an_integer_query_parameter_takes_decimal_digits_only(
    client: httpx.AsyncClient, query: str
) -> None:
    body = assert_problem(await client.get(f"/api/v1/events?{query}"), 422, "input_invalid")
    assert body["errors"][0]["loc"][0] == "query"
    assert "must be an integer" in body["detail"]


async def test_integers_in_decimal_digits_are_taken(client: httpx.AsyncClient) -> None:
    for query in ("after=0", "limit=5&after=12"):
        resp = await client.get(f"/api/v1/events?{query}")
        assert resp.status_code == 200, (query, resp.text)
    # the schema's own bounds still answer as before
    assert_problem(await client.get("/api/v1/events?after=-1"), 422, "input_invalid")
    for route in ("/api/v1/reviews?limit=2.0", "/api/v1/deliveries?after=1.0"):
        assert_problem(await client.get(route), 422, "input_invalid")
