"""A property test over the whole OpenAPI document, on each store: a NUL, another control
character or a lone surrogate in any path, query or header parameter of any operation is
refused - 422 ``input_invalid`` (problem+json, ``string_unstorable``) from the app, or 400
``request_malformed`` (problem+json) from the node's HTTP protocol for raw control bytes in
a header - and never answers 500.

Requests are written on a raw socket (an HTTP client refuses to send such bytes), to a
real server on loopback; a lone surrogate travels as the bytes of its UTF-16-ish UTF-8 form
(``surrogatepass``), which is how a careless client would send one.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.eventually import eventually_sync
from tests.support.server import TOKEN, SubprocessServer, serve_subprocess

#: Characters no path, query or header may carry (tab is HTTP's own field whitespace).
BAD = st.one_of(
    st.just("\x00"),
    st.characters(min_codepoint=0x01, max_codepoint=0x1F),
    st.just("\x7f"),
    st.characters(min_codepoint=0x80, max_codepoint=0x9F),
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
)
PLAIN = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)


@dataclass(frozen=True)
class Param:
    """One parameter of one operation of the OpenAPI document."""

    method: str
    path: str
    where: str  # path, query or header
    name: str


def _params(doc: dict[str, Any]) -> list[Param]:
    found = []
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            for p in op.get("parameters", ()):
                found.append(Param(method.upper(), path, p["in"], p["name"]))
    return found


def _request(param: Param, value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    path = param.path
    for name in ("instance_id", "name", "delivery_id"):
        if name != param.name or param.where != "path":
            path = path.replace("{" + name + "}", "1")
    query = ""
    headers = [
        b"Host: 127.0.0.1",
        f"Authorization: Bearer {TOKEN}".encode(),
        b"Connection: close",
        b"Content-Length: 0",
    ]
    if param.where == "path":
        path = path.replace("{" + param.name + "}", quote(raw, safe=""))
    elif param.where == "query":
        query = f"?{param.name}={quote(raw, safe='')}"
    else:
        headers.append(param.name.encode() + b": " + raw)
    line = f"{param.method} {path}{query} HTTP/1.1".encode()
    return b"\r\n".join([line, *headers, b"", b""])


def _send(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, val = line.partition(":")
        headers[name.strip().lower()] = val.strip()
    return status, headers, body


def _check(port: int, param: Param, value: str) -> None:
    status, headers, body = _send(port, _request(param, value))
    shown = (param, value.encode("utf-8", "surrogatepass"), status, body[:300])
    assert status != 500, shown
    if status == 400:
        # the node's HTTP protocol refuses a raw control byte before the app: a problem too
        assert headers.get("content-type") == "application/problem+json", shown
        assert json.loads(body)["code"] == "request_malformed", shown
        assert param.where == "header" or any(c < " " or c == "\x7f" for c in value), shown
        return
    assert status == 422, shown
    assert headers["content-type"] == "application/problem+json", shown
    problem = json.loads(body)
    assert problem["code"] == "input_invalid", shown
    assert problem["errors"][0]["type"] == "string_unstorable", shown
    assert problem["errors"][0]["loc"][0] == param.where, shown


@pytest.fixture
def server(store_url: str, tmp_path: Path) -> Iterator[SubprocessServer]:
    # a child process: hypothesis must see no other thread of this one drawing randoms
    with serve_subprocess(store_url, tmp_path / "server.log") as child:

        def ready() -> None:
            assert child.process.poll() is None, child.output()
            try:
                assert httpx.get(f"{child.base_url}/healthz", timeout=2).status_code == 200
            except httpx.TransportError as exc:
                raise AssertionError(f"not answering yet: {exc!r}") from exc

        eventually_sync(ready, timeout=30, interval=0.1, what="/healthz")
        yield child
        log = child.output()
        assert "Traceback" not in log, log[-5000:]


@pytest.mark.slow
# hypothesis warns when the global random state moves while it draws; in a pytest-xdist
# worker a thread left by an earlier in-process test of the worker can move it (the strategies
# here draw from hypothesis only), so that one warning is not this test's failure
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
def test_no_parameter_takes_an_unstorable_character(server: SubprocessServer) -> None:
    doc = httpx.get(f"{server.base_url}/openapi.json", timeout=10).json()
    params = _params(doc)
    assert {p.where for p in params} == {"path", "query", "header"}, params
    port = int(server.base_url.rsplit(":", 1)[1])

    @settings(
        max_examples=400,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(param=st.sampled_from(params), head=PLAIN, bad=BAD, tail=PLAIN)
    def check(param: Param, head: str, bad: str, tail: str) -> None:
        if param.where == "header" and bad == "\t":
            bad = "\x0b"  # a tab is HTTP's own whitespace in a header: taken, not refused
        _check(port, param, head + bad + tail)

    check()
    # and every parameter once, with a NUL in the middle of a plain value
    for param in params:
        _check(port, param, "a\x00b")
    # the server is still well: a plain read answers
    ok = httpx.get(
        f"{server.base_url}/api/v1/instances",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=10,
    )
    assert ok.status_code == 200, ok.text
