"""The operator CLI talks to a node through :class:`flowpark.client.Client` (the client's
retries and error tree), keeping its exit codes, and sends the local trial's documented
default token only to a loopback node when no token is given."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import flowpark.client
from flowpark.cli import EXIT_CONFLICT, EXIT_ERROR, EXIT_FORBIDDEN, EXIT_NOT_FOUND
from flowpark.cli._client import is_loopback
from flowpark.cli.main import app
from flowpark.client import Client

ID = "01a232b9-0995-7449-8556-23fef0c5e08e"
PAGE: dict[str, Any] = {"instances": [], "nextCursor": None}


def problem(status: int, code: str, detail: str, **extra: Any) -> httpx.Response:
    body = {"type": f"urn:flowpark:problem:{code}", "title": code, "status": status}
    return httpx.Response(
        status,
        json={**body, "detail": detail, "code": code, **extra},
        headers={"Content-Type": "application/problem+json"},
    )


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[httpx.Request]]:
    """Script the node's answers; returns the requests the CLI sent."""
    monkeypatch.delenv("FLOWPARK_TOKEN", raising=False)
    monkeypatch.delenv("FLOWPARK_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "200")

    def script(*answers: httpx.Response | Exception) -> list[httpx.Request]:
        sent: list[httpx.Request] = []
        queue = list(answers)

        def handle(request: httpx.Request) -> httpx.Response:
            sent.append(request)
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
            if isinstance(answer, Exception):
                raise answer
            return answer

        def make(url: str, token: str | None = None, http: object = None) -> Client:
            mock = httpx.Client(transport=httpx.MockTransport(handle))
            return Client(url, token=token, http=mock)

        # the CLI imports the client where it makes one
        monkeypatch.setattr(flowpark.client, "Client", make)
        return sent

    return script


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000", "http://127.0.0.2"],
)
def test_with_no_token_a_loopback_node_is_sent_the_dev_default(
    node: Callable[..., list[httpx.Request]], url: str
) -> None:
    sent = node(httpx.Response(200, json=PAGE))
    done = cli("instances", "list", "--url", url)
    assert done.exit_code == 0, done.output
    assert sent[0].headers["Authorization"] == "Bearer dev-token"


def test_with_no_token_any_other_node_is_sent_none_and_told_how_to_give_one(
    node: Callable[..., list[httpx.Request]],
) -> None:
    sent = node(problem(401, "unauthorized", "a bearer token is required"))
    done = cli("instances", "list", "--url", "https://flowpark.example.com")
    assert done.exit_code == EXIT_FORBIDDEN
    assert "Authorization" not in sent[0].headers
    assert done.stderr == (
        "error: unauthorized: a bearer token is required (pass --token or set FLOWPARK_TOKEN)\n"
    )


def test_a_given_token_is_sent_as_given_on_loopback_too(
    node: Callable[..., list[httpx.Request]], monkeypatch: pytest.MonkeyPatch
) -> None:
    sent = node(httpx.Response(200, json=PAGE))
    assert cli("instances", "list", "--token", "t0ken").exit_code == 0
    monkeypatch.setenv("FLOWPARK_TOKEN", "fr0m-env")
    assert cli("instances", "list").exit_code == 0
    assert [r.headers["Authorization"] for r in sent] == ["Bearer t0ken", "Bearer fr0m-env"]


def test_a_loopback_node_that_refuses_the_dev_default_says_how_to_set_the_token(
    node: Callable[..., list[httpx.Request]],
) -> None:
    node(problem(401, "unauthorized", "unknown bearer token"))
    done = cli("flows", "list")
    assert done.exit_code == EXIT_FORBIDDEN
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unauthorized: unknown bearer token (")
    assert "sent the local default dev-token" in lines[0]
    assert "pass --token or set FLOWPARK_TOKEN" in lines[0]


def test_a_read_is_retried_by_the_client_after_a_503(
    node: Callable[..., list[httpx.Request]],
) -> None:
    unavailable = problem(503, "store_unavailable", "the database does not answer")
    sent = node(unavailable, httpx.ConnectError("refused"), httpx.Response(200, json=PAGE))
    done = cli("instances", "list", "--token", "t")
    assert done.exit_code == 0, done.output
    assert len(sent) == 3 and "0 instance(s)" in done.stdout


def test_a_write_without_a_key_is_sent_once_and_a_keyed_one_again(
    node: Callable[..., list[httpx.Request]],
) -> None:
    unavailable = problem(503, "store_unavailable", "the database does not answer")
    woken = httpx.Response(200, json={"woken": True, "state": "running"})
    sent = node(unavailable, woken)
    done = cli("instances", "wake", ID, "--token", "t")
    assert done.exit_code == EXIT_ERROR
    assert done.stderr == "error: store_unavailable: the database does not answer\n"
    assert len(sent) == 1
    sent = node(unavailable, woken)
    done = cli("instances", "wake", ID, "--token", "t", "--key", "wake-1")
    assert done.exit_code == 0, done.output
    assert [r.headers["Idempotency-Key"] for r in sent] == ["wake-1", "wake-1"]


@pytest.mark.parametrize(
    ("answer", "exit_code", "line"),
    [
        (
            problem(404, "instance_not_found", f"no instance {ID!r}"),
            EXIT_NOT_FOUND,
            f"error: instance_not_found: no instance {ID!r}",
        ),
        (
            problem(404, "signal_not_declared", "no signal x"),
            EXIT_NOT_FOUND,
            "error: signal_not_declared: no signal x",
        ),
        (
            problem(409, "instance_ended", "it ended"),
            EXIT_CONFLICT,
            "error: instance_ended: it ended",
        ),
        (
            problem(403, "forbidden", "needs operate", missingScope="operate"),
            EXIT_FORBIDDEN,
            "error: forbidden: needs operate",
        ),
        (
            problem(
                422,
                "input_invalid",
                "the body is invalid",
                errors=[{"loc": ["body", "extendBy"], "msg": "must be positive"}],
            ),
            EXIT_ERROR,
            "error: input_invalid: the body is invalid (extendBy: must be positive)",
        ),
        (httpx.Response(502, text="Bad Gateway"), EXIT_ERROR, "error: http_502: Bad Gateway"),
    ],
)
def test_a_problem_keeps_its_code_and_exit_status(
    node: Callable[..., list[httpx.Request]], answer: httpx.Response, exit_code: int, line: str
) -> None:
    node(answer)
    done = cli("instances", "extend", ID, "--by", "1h", "--token", "t")
    assert done.exit_code == exit_code
    assert done.stderr.splitlines() == [line]


def test_a_key_the_node_cannot_take_is_refused_in_its_code_before_anything_is_sent(
    node: Callable[..., list[httpx.Request]],
) -> None:
    sent = node(httpx.Response(200, json={}))
    done = cli("instances", "cancel", ID, "--token", "t", "--key", "clé")
    assert done.exit_code == EXIT_ERROR
    assert done.stderr.startswith("error: idempotency_key_invalid: --key: ")
    assert sent == []


def test_a_loopback_node_is_reached_directly_never_through_a_proxy_of_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One listener is both the node and the proxy the environment names: a request sent
    # through a proxy names the whole URL on its request line, a direct one only the path.
    lines: list[str] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    body = json.dumps(PAGE).encode()

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                lines.append(connection.recv(65536).decode().split("\r\n")[0])
                head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                connection.sendall(head.encode() + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    for name in ("NO_PROXY", "no_proxy", "FLOWPARK_TOKEN", "FLOWPARK_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{port}")
    done = cli("instances", "list", "--url", f"http://127.0.0.1:{port}", "--json")
    thread.join(timeout=10)
    assert done.exit_code == 0, done.output
    assert lines == ["GET /api/v1/instances?limit=50 HTTP/1.1"]


def test_loopback_is_told_by_address_or_localhost_only() -> None:
    assert is_loopback("http://127.0.0.1:8000") and is_loopback("http://[::1]/")
    assert is_loopback("http://LOCALHOST:8000")
    assert not is_loopback("http://10.0.0.1:8000")
    assert not is_loopback("http://localhost.example.com")
    assert not is_loopback("http://127.0.0.1.nip.io")


@pytest.mark.parametrize(
    ("args", "path"),
    [
        (
            ["instances", "signal", ID, "a/b", "--data", "{}"],
            f"/api/v1/instances/{ID}/signals/a%2Fb",
        ),
        (["flows", "show", "../nodes"], "/api/v1/flows/..%2Fnodes"),
    ],
)
def test_an_id_or_name_is_sent_as_one_path_segment_whatever_it_holds(
    node: Callable[..., list[httpx.Request]], args: list[str], path: str
) -> None:
    sent = node(problem(404, "instance_not_found", "no such instance"))
    done = cli(*args, "--token", "t")
    assert done.exception is None or isinstance(done.exception, SystemExit), done.output
    assert done.exit_code == EXIT_NOT_FOUND
    assert sent[0].url.raw_path.decode().split("?")[0] == path


@pytest.mark.parametrize(
    ("command", "given"),
    [
        ("wake", "01a"),
        ("show", ""),
        ("show", "x/../../nodes"),
        ("cancel", "x?all=true"),
        ("retry-compensations", "a\x01b"),
        ("extend", "01a2 32b9"),
        ("signal", "not-an-id"),
    ],
)
def test_what_is_no_instance_id_is_a_usage_error_sent_nowhere(
    node: Callable[..., list[httpx.Request]], command: str, given: str
) -> None:
    sent = node(httpx.Response(200, json=PAGE))
    more = {"extend": ["--by", "1h"], "signal": ["ocr.completed"]}.get(command, [])
    done = cli("instances", command, given, *more)
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(f"error: usage: {given!r} is no instance id"), done.stderr
    assert sent == []


def test_a_full_id_in_capitals_is_sent_in_lower_case(
    node: Callable[..., list[httpx.Request]],
) -> None:
    sent = node(problem(404, "instance_not_found", "no instance"))
    done = cli("instances", "wake", ID.upper())
    assert done.exit_code == EXIT_NOT_FOUND
    assert [r.url.path for r in sent] == [f"/api/v1/instances/{ID}/wake"]


def test_the_consoles_short_form_finds_the_one_id_with_that_start_and_end(
    node: Callable[..., list[httpx.Request]],
) -> None:
    twin = ID[:-6] + "000000"  # the same start (made the same minute), another end
    page = {"instances": [{"instanceId": twin}, {"instanceId": ID}], "nextCursor": None}
    sent = node(httpx.Response(200, json=page), problem(404, "instance_not_found", "gone"))
    done = cli("instances", "wake", f"{ID[:8]}…{ID[-6:]}")
    assert done.exit_code == EXIT_NOT_FOUND, done.output
    assert sent[0].url.params["idPrefix"] == ID[:8]
    assert sent[1].url.path == f"/api/v1/instances/{ID}/wake"


def test_a_short_form_two_ids_match_asks_for_more(
    node: Callable[..., list[httpx.Request]],
) -> None:
    page = {"instances": [{"instanceId": ID}, {"instanceId": ID}], "nextCursor": None}
    node(httpx.Response(200, json=page))
    done = cli("instances", "wake", f"{ID[:8]}...{ID[-2:]}")
    assert done.exit_code == 2
    assert "more than one instance id matches" in done.stderr
