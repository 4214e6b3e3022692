"""The CLI's compensation commands against a scripted node: ``instances retry-compensations``
(its request, its lines, its exit codes), ``instances list --compensation-failed`` and the
``compensation failed`` line of ``instances show``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from flowpark.cli import EXIT_CONFLICT, EXIT_ERROR
from tests.unit.test_cli_client import ID, PAGE, cli, node, problem

__all__ = ["node"]  # the scripted node fixture, shared


def _view(state: str, **fields: Any) -> dict[str, Any]:
    """An instance view of the sample flow in ``state`` with ``fields`` (camelCase)."""
    view: dict[str, Any] = {
        "instanceId": ID,
        "flow": "document.process",
        "version": "1.0.0",
        "state": state,
        "createdAt": "2026-12-02T09:00:00Z",
    }
    return {**view, **fields}


RETRIED: dict[str, Any] = {
    "instanceId": ID,
    "retried": [
        {
            "stepId": 0,
            "scope": 0,
            "capabilityId": "ocr.cancel",
            "step": {"stepId": 0, "kind": "capability", "label": "ocr.upload"},
        }
    ],
    "state": "cancelled",
    "stillFailed": 0,
    "actionId": "a-1",
    "actor": "ops",
    "actedAt": "2026-12-02T10:00:00Z",
}


def test_retry_compensations_posts_the_retry_and_exits_0_once_cleared(
    node: Callable[..., list[httpx.Request]],
) -> None:
    sent = node(httpx.Response(200, json=RETRIED))
    done = cli("instances", "retry-compensations", ID, "--key", "r-1", "--token", "t")
    assert done.exit_code == 0, done.output
    (request,) = sent
    assert request.method == "POST"
    assert request.url.path == f"/api/v1/instances/{ID}/compensations/retry"
    assert request.headers["Idempotency-Key"] == "r-1"
    assert "retried ocr.cancel undoing step 0 (ocr.upload)" in done.output
    assert "cancelled, no compensation failed" in done.output


def test_retry_compensations_exits_1_while_one_is_still_failed(
    node: Callable[..., list[httpx.Request]],
) -> None:
    node(httpx.Response(200, json={**RETRIED, "stillFailed": 1}))
    done = cli("instances", "retry-compensations", ID, "--token", "t", "--json")
    assert done.exit_code == EXIT_ERROR, done.output
    assert '"stillFailed": 1' in done.output


def test_retry_compensations_of_an_instance_with_none_failed_is_a_conflict(
    node: Callable[..., list[httpx.Request]],
) -> None:
    node(problem(409, "compensation_not_failed", "nothing failed for good"))
    done = cli("instances", "retry-compensations", ID, "--token", "t")
    assert done.exit_code == EXIT_CONFLICT, done.output
    assert "compensation_not_failed" in done.output


def test_list_sends_the_compensation_failed_filter(
    node: Callable[..., list[httpx.Request]],
) -> None:
    sent = node(httpx.Response(200, json=PAGE))
    done = cli("instances", "list", "--compensation-failed", "--token", "t")
    assert done.exit_code == 0, done.output
    assert sent[0].url.params["compensationFailed"] == "true"
    plain = node(httpx.Response(200, json=PAGE))
    cli("instances", "list", "--token", "t")
    assert "compensationFailed" not in plain[0].url.params


def test_show_prints_each_compensation_that_failed(
    node: Callable[..., list[httpx.Request]],
) -> None:
    failure = {
        "code": "compensation_failed",
        "capabilityId": "ocr.cancel",
        "stepId": 0,
        "scope": 0,
        "step": {"stepId": 0, "kind": "capability", "label": "ocr.upload"},
        "error": {"code": "ConnectTimeout", "message": "timed out"},
        "tries": 15,
        "failedAt": "2026-12-02T10:00:00Z",
    }
    view = _view(
        "cancelled",
        error={"code": "flow.cancelled", "message": "the instance was cancelled"},
        compensationFailures=[failure],
    )
    node(httpx.Response(200, json=view))
    done = cli("instances", "show", ID, "--token", "t")
    assert done.exit_code == 0, done.output
    assert (
        "compensation failed: ocr.cancel undoing step 0 (ocr.upload) after 15 tries: "
        "ConnectTimeout: timed out"
    ) in done.output


def test_show_names_a_compensation_waiting_for_its_next_try(
    node: Callable[..., list[httpx.Request]],
) -> None:
    view = _view(
        "suspended",
        waiting={
            "kind": "retry",
            "stepId": 0,
            "capabilityId": "ocr.cancel",
            "attempt": None,
            "wakeAt": "2026-12-02T10:00:00Z",
            "undoes": {"stepId": 0, "kind": "capability", "label": "ocr.upload"},
        },
    )
    node(httpx.Response(200, json=view))
    done = cli("instances", "show", ID, "--token", "t")
    assert done.exit_code == 0, done.output
    assert "waiting: retry compensation ocr.cancel undoing step 0 (ocr.upload)" in done.output


def test_show_says_an_attempt_started_before_it_was_due_was_early(
    node: Callable[..., list[httpx.Request]],
) -> None:
    attempt = {"attempt": 4, "outcome": "success", "durationSeconds": 0.01, "tries": []}
    view = _view(
        "suspended",
        attempts=[
            {**attempt, "attempt": 3, "latenessSeconds": 0.25},
            {**attempt, "latenessSeconds": -36.695},  # an operator's wake, 36.7 s before due
        ],
    )
    node(httpx.Response(200, json=view))
    done = cli("instances", "show", ID, "--token", "t")
    assert done.exit_code == 0, done.output
    assert "36.695 early" in done.output and "-36.695" not in done.output
    assert " 0.25 " in done.output
