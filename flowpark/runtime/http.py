"""The outbound HTTP client of a node: httpx's API over aiohttp's connection pool.

Capabilities call their providers (the OCR, the job service, ...) through one pooled
``httpx.AsyncClient`` per process, each call with its own timeout. The client is
:class:`httpx_aiohttp.HttpxAiohttpClient`: requests, responses, errors and timeouts are
httpx's, the sockets and HTTP/1.1 parsing are aiohttp's. httpx's own pool (httpcore) checks
every pooled connection for readability on every request and parses in pure Python; on the
sweep bench that was about 0.7 ms of node CPU per call against about 0.2 ms through
aiohttp (measured with the `sweep` benchmark, see BENCHMARKS.md).

Differences callers may see: transport errors are still ``httpx.TransportError`` s; HTTP/2
is not offered. httpx-aiohttp maps every failure to connect to ``httpx.ConnectTimeout``;
this client puts them right: a host name that does not resolve raises
:class:`NameNotResolved` (an ``httpx.ConnectError``: "the name ci.local does not resolve"),
a refused or dropped connection ``httpx.ConnectError``; only a connect that timed out is a
``ConnectTimeout``.

The client keeps no cookies (neither httpx's jar nor aiohttp's): one client serves the
calls of every instance on the node, and a cookie one provider answer sets must not ride
along on another instance's call. A call that needs a cookie sends its own ``Cookie`` header.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport, HttpxAiohttpClient

__all__ = ["NameNotResolved", "outbound_client"]


class NameNotResolved(httpx.ConnectError):
    """The host name of an outbound call does not resolve (DNS): a journal row of the
    failed try names this type, not a timeout."""


def _connect_error(exc: httpx.ConnectTimeout, request: httpx.Request) -> httpx.TransportError:
    """The error a failed connect really is (see the module docstring)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, aiohttp.ClientConnectorDNSError | socket.gaierror):
            return NameNotResolved(
                f"the name {request.url.host} does not resolve ({cause})", request=request
            )
        if isinstance(cause, ConnectionRefusedError | ConnectionResetError):
            return httpx.ConnectError(
                f"connection to {request.url.host}:{request.url.port or ''} refused ({cause})",
                request=request,
            )
        if isinstance(cause, TimeoutError | asyncio.TimeoutError):
            return exc
        cause = cause.__cause__ or cause.__context__
    return exc


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

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        """Send ``request``; a failed connect raises the error it really is."""
        try:
            return await super().send(request, **kwargs)
        except httpx.ConnectTimeout as exc:
            real = _connect_error(exc, request)
            if real is exc:
                raise
            raise real from exc

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
