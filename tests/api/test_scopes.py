"""Named tokens with scopes: every ``/api`` route of the served OpenAPI document with a
token of each scope, with no token and with an unknown one (401 vs 403)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark.settings import SCOPES, parse_api_tokens
from tests.support.api import assert_problem
from tests.support.server import LiveServer, live_server

TOKENS = {scope: f"secret-{scope}-{uuid.uuid4().hex[:8]}" for scope in SCOPES}
SPEC = ",".join(f"{scope}-bot:{token}:{scope}" for scope, token in TOKENS.items())

#: the scope each route needs; a new route must be added here (the test fails otherwise)
NEEDS: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/instances"): "read",
    ("GET", "/api/v1/instances/counts"): "read",
    ("GET", "/api/v1/instances/{instance_id}"): "read",
    ("GET", "/api/v1/instances/{instance_id}/streams/{name}"): "read",
    ("GET", "/api/v1/reviews"): "read",
    ("GET", "/api/v1/reviews/{review_id}"): "read",
    ("POST", "/api/v1/reviews/{review_id}/claim"): "operate",
    ("POST", "/api/v1/reviews/{review_id}/resolve"): "operate",
    ("POST", "/api/v1/reviews/{review_id}/dismiss"): "operate",
    ("GET", "/api/v1/events"): "read",
    ("GET", "/api/v1/flows"): "read",
    ("GET", "/api/v1/flows/{name}"): "read",
    ("GET", "/api/v1/nodes"): "read",
    ("GET", "/api/v1/providers"): "read",
    ("GET", "/api/v1/providers/{name}"): "read",
    ("PUT", "/api/v1/providers/{name}/limit"): "operate",
    ("POST", "/api/v1/documents"): "start",
    ("POST", "/api/v1/jobs"): "start",
    ("POST", "/api/v1/documents/{instance_id}/signals/ocr.completed"): "signal",
    ("POST", "/api/v1/providers/ocr/signals/ocr.completed"): "signal",
    ("POST", "/api/v1/instances/{instance_id}/signals/{name}"): "signal",
    ("POST", "/api/v1/instances/{instance_id}/wake"): "operate",
    ("POST", "/api/v1/instances/{instance_id}/cancel"): "operate",
    ("POST", "/api/v1/instances/{instance_id}/compensations/retry"): "operate",
    ("POST", "/api/v1/instances/{instance_id}/budget"): "operate",
    ("POST", "/api/v1/instances/actions"): "operate",
    ("GET", "/api/v1/deliveries"): "read",
    ("POST", "/api/v1/deliveries/{delivery_id}/retry"): "operate",
}


@pytest.fixture(scope="module")
def scoped(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    import shutil

    path = tmp_path_factory.mktemp("scopes") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", api_tokens=SPEC, run_sweeper=False) as server:
        yield server


def _routes(spec: dict[str, Any]) -> list[tuple[str, str]]:
    return sorted(
        (method.upper(), path)
        for path, ops in spec["paths"].items()
        if path.startswith("/api/")
        for method in ops
    )


def _concrete(path: str) -> str:
    return path.replace("{instance_id}", str(uuid.uuid4())).replace("{name}", "ready")


async def _call(server: LiveServer, method: str, path: str, token: str | None) -> httpx.Response:
    async with server.client(token=token, timeout=10) as client:
        if method == "GET":
            return await client.get(_concrete(path))
        body = {"action": "wake", "dryRun": True}
        return await client.request(method, _concrete(path), json=body)


def test_every_api_route_names_its_scope(scoped: LiveServer) -> None:
    spec = httpx.get(f"{scoped.base_url}/openapi.json", timeout=10).json()
    assert set(_routes(spec)) == set(NEEDS), "a route without a scope in NEEDS (or one gone)"


@pytest.mark.parametrize(("method", "path"), sorted(NEEDS))
async def test_each_route_with_each_scope(
    scoped: LiveServer, method: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    needed = NEEDS[(method, path)]
    assert_problem(await _call(scoped, method, path, None), 401, "unauthorized")
    assert_problem(await _call(scoped, method, path, "not-a-token"), 401, "unauthorized")
    for scope, token in TOKENS.items():
        resp = await _call(scoped, method, path, token)
        if scope == needed:
            assert resp.status_code not in (401, 403), (scope, resp.text)
        else:
            body = assert_problem(resp, 403, "forbidden")
            assert body["missingScope"] == needed
            assert body["token"] == f"{scope}-bot"
            assert token not in resp.text
    for token in TOKENS.values():  # no token value is ever logged
        assert token not in caplog.text


def test_plain_tokens_hold_every_scope_and_named_ones_only_theirs() -> None:
    tokens = parse_api_tokens("plain, dash:a:b:c ,viewer:v-1:read,ops:o-1:read+operate")
    by_name = {t.name: t for t in tokens}
    assert by_name["token-1"].value == "plain"
    assert by_name["token-1"].scopes == frozenset(SCOPES)
    assert by_name["token-2"].value == "dash:a:b:c"  # not name:token:scopes: a plain token
    assert by_name["viewer"].scopes == frozenset({"read"})
    assert by_name["ops"].scopes == frozenset({"read", "operate"})
    assert "o-1" not in repr(by_name["ops"])
    with pytest.raises(ValueError, match="'ops'"):
        parse_api_tokens("ops:a:read,ops:b:read")


def test_an_entry_naming_an_unknown_scope_is_refused_not_given_every_scope() -> None:
    # read as a plain token, a misspelt scope would hold every scope it meant to withhold
    for spec in ("ops:ops-secret-2:read+operat", "plain,viewer:v-secret:raed"):
        with pytest.raises(ValueError, match="unknown scope") as refused:
            parse_api_tokens(spec)
        assert "secret" not in str(refused.value)  # names the entry, never its value
    assert "'operat'" in str(pytest.raises(ValueError, parse_api_tokens, "o:s:read+operat").value)
    # a value with colons whose last part is no scope list stays a plain token
    assert parse_api_tokens("x:y:Z9")[0].scopes == frozenset(SCOPES)


def test_a_node_warns_of_entries_that_look_named_but_are_plain_tokens(
    _sqlite_template: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import shutil

    path = tmp_path / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    spec = "admin:adm-secret-1,viewer:view-secret-3:read,plain-4,cfg:cfg-secret-5:Read9"
    caplog.set_level(logging.WARNING)
    with live_server(f"sqlite:///{path}", api_tokens=spec, run_sweeper=False):
        pass
    warned = [r.getMessage() for r in caplog.records if "is a plain token" in r.getMessage()]
    assert len(warned) == 2, warned  # no scope part, and a last part that is no scope list
    assert "entry token-1 " in warned[0] and "entry token-4 " in warned[1]
    assert "read+signal" in warned[0]  # the scopes it could have named
    for secret in ("adm-secret-1", "cfg-secret-5", "view-secret-3", "plain-4"):
        assert secret not in caplog.text


async def test_an_authorization_header_that_is_not_bearer_is_named_and_not_echoed(
    scoped: LiveServer,
) -> None:
    async with scoped.client(token=None, timeout=10) as client:
        missing = assert_problem(await client.get("/api/v1/flows"), 401, "unauthorized")
        assert missing["detail"] == "missing bearer token"
        for value in ("s3cret-value", "Basic s3cret-value", "Bearer"):
            resp = await client.get("/api/v1/flows", headers={"Authorization": value})
            body = assert_problem(resp, 401, "unauthorized")
            assert body["detail"] == "the Authorization header is not 'Bearer <token>'", value
            assert "s3cret" not in resp.text
