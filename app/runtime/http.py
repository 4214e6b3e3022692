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
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import HttpxAiohttpClient

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
    return HttpxAiohttpClient(timeout=timeout,
                              limits=httpx.Limits(max_connections=max_connections))
