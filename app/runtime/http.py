"""The outbound HTTP client of a node: httpx's API over aiohttp's connection pool.

Capabilities call their providers (the OCR, the job service, ...) through one pooled
``httpx.AsyncClient`` per process, each call with its own timeout. The client is
:class:`httpx_aiohttp.HttpxAiohttpClient`: requests, responses, errors and timeouts are
httpx's, the sockets and HTTP/1.1 parsing are aiohttp's. httpx's own pool (httpcore) checks
every pooled connection for readability on every request and parses in pure Python; on the
sweep bench that was about 0.7 ms of node CPU per call against about 0.2 ms through
aiohttp (BENCHMARKS.md, "third session").

Differences callers may see: transport errors are still ``httpx.TransportError`` s, but a
refused or dropped connection can surface as ``httpx.ConnectTimeout`` rather than
``httpx.ConnectError`` (httpx-aiohttp's mapping); HTTP/2 is not offered.

The client keeps no cookies (neither httpx's jar nor aiohttp's): one client serves the
calls of every instance on the node, and a cookie one provider answer sets must not ride
along on another instance's call. A call that needs a cookie sends its own ``Cookie`` header.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient

__all__ = ["outbound_client"]


def outbound_client(timeout: float, *, max_connections: int = 200) -> httpx.AsyncClient:
    """A new pooled client for outbound calls (close it with ``await client.aclose()``).

    Args:
        timeout: default per-call timeout in seconds (connect, read, pool); a call may pass
            its own.
        max_connections: open connections at most, all hosts together.

    Returns:
        An ``httpx.AsyncClient`` (its aiohttp session is opened on first use, in the
        running loop).
    """
    limits = httpx.Limits(max_connections=max_connections)
    tls = httpx.create_ssl_context()

    def session() -> aiohttp.ClientSession:  # made on first use, in the running loop
        connector = aiohttp.TCPConnector(limit=max_connections, ssl=tls,
                                         keepalive_timeout=limits.keepalive_expiry)
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    client = HttpxAiohttpClient(timeout=timeout, limits=limits,
                                transport=AiohttpTransport(limits=limits, client=session))
    client._cookies = _NoCookies()  # httpx has no switch; its property setter copies a jar
    return client


class _NoCookies(httpx.Cookies):
    """httpx's cookie jar that takes in nothing a response sets (parsing ``Set-Cookie`` of
    every answer through ``http.cookiejar`` was also ~3% of a node's CPU per call)."""

    def extract_cookies(self, response: Any) -> None:
        return None
