"""The one error contract: every code is an :class:`ErrorCode` in one naming scheme, has one
status (or answers 500 ``internal_error``), and the docs' table is the enum's."""

from __future__ import annotations

import inspect
import logging
import re
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

import flowpark.errors as errors
from flowpark.api.problems import STATUS, errors_page, install_problem_handlers
from flowpark.errors import CLI_EXIT, ErrorCode, FlowparkError

ROOT = Path(__file__).resolve().parents[2]
#: Codes that are never answered as themselves: an API answer is 500 internal_error.
INTERNAL = {
    ErrorCode.EMBEDDING_INVALID,
    ErrorCode.DEFINITION_INVALID,
    ErrorCode.FLOWS_UNLOADABLE,
    ErrorCode.JOURNAL_CONFLICT,
    ErrorCode.JOURNAL_MISMATCH,
    ErrorCode.STALE_FENCING_TOKEN,
}


def test_every_code_has_a_status_or_is_named_internal() -> None:
    assert set(STATUS) | INTERNAL | set(CLI_EXIT) == set(ErrorCode)
    assert not set(STATUS) & INTERNAL
    assert not (set(STATUS) | INTERNAL) & set(CLI_EXIT)  # the CLI's own: no node answers them
    assert STATUS[ErrorCode.INTERNAL_ERROR] == 500
    # 500 is only ever internal_error: a mapped code is a refusal the caller can act on
    assert [c for c, s in STATUS.items() if s >= 500 and s != 503] == [ErrorCode.INTERNAL_ERROR]


def test_codes_follow_one_naming_scheme() -> None:
    for code in ErrorCode:
        assert re.fullmatch(r"[a-z]+(_[a-z]+)+|[a-z]+", code.value), code
        assert code.name == code.value.upper(), code
        assert code.meaning and not code.meaning.endswith("."), code


def test_each_error_class_has_its_own_code() -> None:
    classes = [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, FlowparkError) and "code" in vars(cls)
    ]
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes)), codes
    assert all(isinstance(c, ErrorCode) for c in codes)
    # every code but internal_error (the answer to anything unexpected) is some error's
    assert set(ErrorCode) - set(codes) <= {ErrorCode.INTERNAL_ERROR, *CLI_EXIT}


def test_docs_error_table_is_generated_from_the_enum() -> None:
    page = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert page == errors_page(), (
        "docs/errors.md differs from the error codes; refresh it with "
        "`python -m flowpark.api.problems > docs/errors.md`"
    )
    for code in ErrorCode:
        assert f"| `{code}` |" in page


def _app(exc: Exception) -> FastAPI:
    app = FastAPI()
    install_problem_handlers(app)

    @app.get("/boom")
    async def boom() -> None:
        raise exc

    return app


async def _get(app: FastAPI, path: str = "/boom") -> httpx.Response:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        return await http.get(path)


@pytest.mark.parametrize(
    "exc",
    [
        errors.JournalConflict("duplicate execution row", instance_id="i-1"),
        errors.StaleFencingToken("token 3 is older than 4"),
        errors.DefinitionError("broken", findings=["poll.requires_durable"]),
        KeyError("no such thing"),
    ],
    ids=["journal-conflict", "stale-token", "definition", "key-error"],
)
async def test_an_engine_invariant_or_a_bug_is_500_internal_error_and_logged(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="flowpark.api"):
        resp = await _get(_app(exc))

    assert resp.status_code == 500
    assert resp.headers["content-type"] == "application/problem+json"
    body = resp.json()
    assert body["code"] == "internal_error" and body["status"] == 500
    # nothing of the cause is sent; it is in the log
    assert "instanceId" not in body and str(exc) not in resp.text
    assert any(r.levelno >= logging.ERROR for r in caplog.records)


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (errors.Unauthorized("missing bearer token"), 401),
        (errors.IdempotencyKeyMissing("send one"), 400),
        (errors.UnsupportedMediaType("not JSON"), 415),
        (errors.InstanceEnded("ended", instance_id="i-1"), 409),
        (errors.StoreUnavailable("down"), 503),
    ],
)
async def test_a_mapped_code_answers_its_status_with_its_fields(
    exc: FlowparkError, status: int
) -> None:
    resp = await _get(_app(exc))

    assert resp.status_code == status == STATUS[exc.code]
    body = resp.json()
    assert body["code"] == exc.code and body["type"] == f"urn:flowpark:problem:{exc.code}"
    if status == 503:  # the cause names hosts and ports: logged, never answered
        assert exc.message not in body["detail"] and resp.headers["retry-after"] == "1"
    else:
        assert body["detail"] == exc.message
    assert body.get("instanceId") == exc.fields.get("instance_id")
    assert ("www-authenticate" in resp.headers) is (status == 401)


async def test_starlette_refusals_carry_codes_from_the_enum() -> None:
    app = _app(KeyError())
    missing = await _get(app, "/nowhere")
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t"
    ) as http:
        wrong = await http.delete("/boom")
    assert (wrong.status_code, wrong.json()["code"]) == (405, "method_not_allowed")
    assert wrong.headers["allow"] == "GET"
