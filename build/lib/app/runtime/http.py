"""The outbound HTTP client of a node: httpx's API over aiohttp's connection pool.

Capabilities call their providers (the OCR, the job service, ...) through one pooled
``httpx.AsyncClient`` per process, each call with its own timeout. The client is
:class:`httpx_aiohttp.HttpxAiohttpClient`: requests, responses, errors and timeouts are
httpx's, the sockets and HTTP/1.1 parsing are aiohttp's. httpx's own pool (httpcore) checks
every pooled connection for readability on every request and parses in pure Python; on the
sweep bench that was about 0.7 ms of node CPU per call against about 0.2 ms through
aiohttp (measured with the `sweep` benchmark, see BENCHMARKS.md).

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

    Proxies and CA bundles come from the environment as with httpx (``HTTP_PROXY``,
    ``HTTPS_PROXY``, ``NO_PROXY``, ``SSL_CERT_FILE``; ``trust_env``).

    Args:
        timeout: default per-call timeout in seconds (connect, read, pool); a call may pass
            its own.
        max_connections: open connections at most, all hosts together.

    Returns:
        An ``httpx.AsyncClient`` (its aiohttp sessions are opened on first use, in the
        running loop).
    """
    client = _CookielessClient(
        timeout=timeout, limits=httpx.Limits(max_connections=max_connections)
    )
    client._cookies = _NoCookies()  # httpx has no switch; its property setter copies a jar
    return client


class _CookielessClient(HttpxAiohttpClient):
    """httpx-aiohttp's client whose transports (direct, and one per proxy the environment
    names) open aiohttp sessions without a cookie jar."""

    def _init_transport(self, *args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return _cookieless(super()._init_transport(*args, **kwargs))

    def _init_proxy_transport(self, *args: Any, **kwargs: Any) -> httpx.AsyncBaseTransport:
        return _cookieless(super()._init_proxy_transport(*args, **kwargs))


def _cookieless(transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
    """Have an aiohttp transport open its session with the connector it would have made
    (its limits and TLS context) and aiohttp's ``DummyCookieJar``."""
    if not isinstance(transport, AiohttpTransport) or transport.client is not None:
        return transport
    limits, tls = transport.limits, transport.ssl_context

    def session() -> aiohttp.ClientSession:  # called on the transport's first request
        connector = aiohttp.TCPConnector(
            limit=limits.max_connections or 0, ssl=tls, keepalive_timeout=limits.keepalive_expiry
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    transport.client = session
    return transport


class _NoCookies(httpx.Cookies):
    """httpx's cookie jar that takes in nothing a response sets (parsing ``Set-Cookie`` of
    every answer through ``http.cookiejar`` was also ~3% of a node's CPU per call)."""

    def extract_cookies(self, response: Any) -> None:
        return None
