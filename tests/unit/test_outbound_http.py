"""The node's outbound client (flowpark.runtime.http): httpx's API over aiohttp, real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from flowpark.runtime.http import outbound_client


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """A TCP server on loopback that reads requests and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def accept(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.fixture
async def echo_server() -> AsyncIterator[str]:
    """A one-route HTTP/1.1 server: answers every request with its method, path and body."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            method, path, _ = lines[0].split(" ")
            length = next(
                (
                    int(v)
                    for k, _, v in (h.partition(": ") for h in lines[1:])
                    if k.lower() == "content-length"
                ),
                0,
            )
            body = await reader.readexactly(length)
            payload = json.dumps({"method": method, "path": path, "body": body.decode()}).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def test_requests_and_answers_are_httpx_ones(echo_server: str) -> None:
    client = outbound_client(5)
    try:
        assert isinstance(client, httpx.AsyncClient)
        resp = await client.post(f"{echo_server}/jobs", json={"pages": 3})
        assert isinstance(resp, httpx.Response) and resp.status_code == 200
        assert resp.json() == {"method": "POST", "path": "/jobs", "body": '{"pages":3}'}
        # the pooled connection is reused: a second call on the same socket
        assert (await client.get(f"{echo_server}/jobs/1")).json()["path"] == "/jobs/1"
    finally:
        await client.aclose()


async def test_a_call_that_gets_no_answer_times_out(silent_server: str) -> None:
    client = outbound_client(30)
    try:
        with pytest.raises(httpx.TimeoutException):
            await client.get(f"{silent_server}/jobs/1", timeout=0.2)
    finally:
        await client.aclose()


async def test_a_refused_connection_is_a_transport_error() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = outbound_client(5)
    try:
        with pytest.raises(httpx.TransportError):
            await client.get(f"http://127.0.0.1:{port}/")
    finally:
        await client.aclose()


@pytest.fixture
async def cookie_setter() -> AsyncIterator[tuple[str, list[list[str]]]]:
    """A loopback HTTP/1.1 server that answers every request ``200 ok`` with a
    ``Set-Cookie``; yields its base URL and the head lines of each request it read."""
    heads: list[list[str]] = []
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            heads.append(head.decode().split("\r\n"))
            writer.write(
                b"HTTP/1.1 200 OK\r\nset-cookie: session=abc; Path=/\r\ncontent-length: 2\r\n\r\nok"
            )
            await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", heads
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


def _cookie_lines(head: list[str]) -> list[str]:
    return [line for line in head if line.lower().startswith("cookie:")]


async def test_the_client_keeps_no_cookies_between_calls(
    cookie_setter: tuple[str, list[list[str]]],
) -> None:
    """One client serves every instance's calls: a cookie set by one answer is not sent on
    the next call (neither httpx's jar nor aiohttp's keeps it)."""
    base, heads = cookie_setter
    client = outbound_client(5)
    try:
        for _ in range(2):
            resp = await client.get(f"{base}/a")
            assert resp.headers["set-cookie"].startswith("session=abc")
        own = await client.get(f"{base}/b", headers={"Cookie": "mine=1"})
        assert own.status_code == 200
    finally:
        await client.aclose()
    assert [_cookie_lines(h) for h in heads[:2]] == [[], []]
    assert [line.lower() for line in _cookie_lines(heads[2])] == ["cookie: mine=1"]
    assert not client.cookies


async def test_a_proxy_named_by_the_environment_is_used(
    monkeypatch: pytest.MonkeyPatch,
    cookie_setter: tuple[str, list[list[str]]],
) -> None:
    """trust_env as with httpx: HTTP_PROXY routes the call through the proxy (here the
    loopback server, answering for the origin and recording the request line)."""
    proxy, heads = cookie_setter
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    client = outbound_client(5)
    try:
        for _ in range(2):
            resp = await client.get("http://origin.invalid/status")
            assert resp.text == "ok"
    finally:
        await client.aclose()
    assert [h[0] for h in heads] == ["GET http://origin.invalid/status HTTP/1.1"] * 2
    assert [_cookie_lines(h) for h in heads] == [[], []]  # no jar on the proxied transport
    assert not client.cookies


async def test_a_failed_connect_is_named_for_what_it_is_not_a_timeout() -> None:
    import socket as _socket

    from flowpark.runtime.http import NameNotResolved, outbound_client

    listener = _socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    client = outbound_client(5.0)
    try:
        with pytest.raises(NameNotResolved) as unresolved:
            await client.get("http://no-such-name.invalid/x")
        assert "the name no-such-name.invalid does not resolve" in str(unresolved.value)
        assert isinstance(unresolved.value, httpx.ConnectError)
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get(f"http://127.0.0.1:{port}/x")
        assert not isinstance(refused.value, httpx.ConnectTimeout)
        assert "refused" in str(refused.value)
    finally:
        await client.aclose()


def test_the_cli_says_a_node_name_does_not_resolve(retries_at_once: list[float]) -> None:
    from typer.testing import CliRunner

    from flowpark.cli.main import app

    done = CliRunner().invoke(
        app, ["instances", "list", "--url", "http://no-such-name.invalid:8000", "--token", "t"]
    )
    assert done.exit_code == 3
    assert len(retries_at_once) == 3  # the read was sent again before the CLI gave up
    assert "the name no-such-name.invalid does not resolve" in done.stderr
