"""Bounded requests on a real ``flowpark serve``: a request head past its size or count is
431 ``headers_too_large`` and one the HTTP parser refuses is 400 ``request_malformed``, both
problem+json over a raw socket; a client too slow with its head or body is cut off; one
that disconnects mid-body is one log line, never a 500 or a traceback."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flowpark.store.migrate import upgrade
from tests.support.eventually import eventually, eventually_sync
from tests.support.server import TOKEN, SubprocessServer, serve_subprocess

pytestmark = pytest.mark.slow

HEAD_TIMEOUT = 1.0
BODY_TIMEOUT = 1.5
#: longer than the head timeout: an idle connection between requests is bounded by this alone
KEEP_ALIVE = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("bounded")
    url = f"sqlite:///{folder / 'flowpark.db'}"
    upgrade(url)
    with serve_subprocess(
        url,
        folder / "serve.log",
        header_timeout_seconds=str(HEAD_TIMEOUT),
        body_timeout_seconds=str(BODY_TIMEOUT),
        keep_alive_seconds=str(KEEP_ALIVE),
        max_header_bytes="8192",
        max_headers="50",
    ) as live:

        def up() -> None:
            try:
                assert httpx.get(f"{live.base_url}/healthz", timeout=5).status_code == 200
            except httpx.TransportError as exc:
                raise AssertionError(str(exc)) from exc

        eventually_sync(up, timeout=60, what="serve up")
        yield live


def _connect(server: SubprocessServer) -> socket.socket:
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _answer(server: SubprocessServer, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``request`` raw and read the answer until the server closes the connection:
    ``(status, headers by lower-case name, body)``."""
    sock = _connect(server)
    try:
        sock.sendall(request)
        raw = _read_all(sock)
    finally:
        sock.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines)}
    return int(status_line.split()[1]), headers, body


def _problem(answer: tuple[int, dict[str, str], bytes], status: int, code: str) -> dict[str, Any]:
    got, headers, body = answer
    assert got == status, answer
    assert headers["content-type"] == "application/problem+json", headers
    assert headers["connection"] == "close" and int(headers["content-length"]) == len(body)
    problem: dict[str, Any] = json.loads(body)
    assert (problem["code"], problem["status"], problem["title"]) == (code, status, code)
    assert problem["type"] == f"urn:flowpark:problem:{code}"
    return problem


@pytest.mark.parametrize(
    "request_head",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01b\r\n\r\n",  # a control byte
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n",
        b"GET /health\x01z HTTP/1.1\r\nHost: x\r\n\r\n",  # one in the request line
        b"GET /healthz HTTP/9\r\nHost: x\r\n\r\n",  # no HTTP/1.x request line
        b"GET /healthz HTTP/1.1\r\nNo Colon Here\r\n\r\n",
    ],
    ids=["header-soh", "header-nul", "path-soh", "version", "no-colon"],
)
def test_a_request_the_parser_refuses_is_a_400_problem(
    server: SubprocessServer, request_head: bytes
) -> None:
    problem = _problem(_answer(server, request_head), 400, "request_malformed")
    assert "not valid HTTP/1.1" in problem["detail"]
    assert "\x01" not in problem["detail"] and "\x00" not in problem["detail"]


def test_a_long_path_or_header_block_is_a_431_problem(server: SubprocessServer) -> None:
    long_path = b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    long_header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 10_000 + b"\r\n\r\n"
    many = b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(80))
    for request in (long_path, long_header, many + b"\r\n"):
        problem = _problem(_answer(server, request), 431, "headers_too_large")
        assert (problem["maxHeaderBytes"], problem["maxHeaders"]) == (8192, 50)
    # a control character httptools passes (C1, as UTF-8) is the application's refusal
    status, headers, body = _answer(
        server, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-C1: a\xc2\x85b\r\nConnection: close\r\n\r\n"
    )
    assert (status, headers["content-type"]) == (422, "application/problem+json")
    assert json.loads(body)["code"] == "input_invalid"


def test_a_head_past_its_size_or_count_is_431(server: SubprocessServer) -> None:
    big = httpx.get(f"{server.base_url}/healthz", headers={"X-Big": "a" * 100_000}, timeout=10)
    assert big.status_code == 431
    many = httpx.get(
        f"{server.base_url}/healthz", headers={f"X-H{i}": "v" for i in range(80)}, timeout=10
    )
    assert many.status_code == 431
    assert httpx.get(f"{server.base_url}/healthz", timeout=10).status_code == 200


def test_a_client_too_slow_with_its_head_or_body_is_cut_off(server: SubprocessServer) -> None:
    for request in (
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",  # the head never ends
        b"POST /api/v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nIdempotency-Key: slow\r\n"
        b"Content-Length: 100\r\n\r\n{",  # the body never ends
    ):
        sock = _connect(server)
        began = time.monotonic()
        sock.sendall(request)
        answer = _read_all(sock)  # returns when the server closes the connection
        took = time.monotonic() - began
        sock.close()
        assert took < max(HEAD_TIMEOUT, BODY_TIMEOUT) + 5, took
        assert b"500" not in answer.split(b"\r\n", 1)[0]
    output = server.output()
    assert "too slow to send the request head" in output
    assert "too slow to send the request body" in output

    def cut_off_logged() -> None:  # the cut-off body's route logs its client as gone too
        assert server.output().count("disconnected before its POST") == 1

    eventually_sync(cut_off_logged, timeout=10, what="the cut-off body logged once")


def test_an_idle_connection_is_kept_for_the_keep_alive_time(server: SubprocessServer) -> None:
    sock = _connect(server)
    began = time.monotonic()
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = _read_all(sock)  # the answer, then nothing until the server closes the connection
    took = time.monotonic() - began
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    # kept past the head timeout (which bounds a started head only), closed at keep-alive
    assert KEEP_ALIVE - 0.2 <= took < KEEP_ALIVE + 5, took


def test_the_default_keep_alive_outlasts_the_clients_idle_expiry() -> None:
    """A client that reuses a pooled connection just as the node closes it gets a read
    error; the node's idle time must be longer than httpx's and aiohttp's own."""
    from flowpark.settings import Settings

    node = Settings().keep_alive_seconds
    assert node > httpx.Limits().keepalive_expiry  # type: ignore[operator]
    assert node > 15.0  # aiohttp's TCPConnector keepalive_timeout when not given


async def test_a_client_gone_mid_body_is_one_line_not_a_500(server: SubprocessServer) -> None:
    line = "disconnected before its POST /api/v1/documents body arrived"
    before = server.output().count(line)  # an earlier test's cut-off body may have one
    sock = _connect(server)
    sock.sendall(
        b"POST /api/v1/documents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer " + TOKEN.encode() + b"\r\nIdempotency-Key: gone\r\n"
        b'Content-Length: 1000\r\n\r\n{"documentId": '
    )
    sock.close()

    def logged() -> None:
        assert server.output().count(line) == before + 1

    await eventually(logged, timeout=10)
    output = server.output()
    assert "Traceback" not in output and " 500" not in output, output[-3000:]
    assert output.count(line) == before + 1  # one line for this client
