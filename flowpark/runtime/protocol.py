"""uvicorn's HTTP protocol (httptools) with the bounds flowpark enforces itself.

Per connection, before the application sees a request: its head (request line and headers)
is at most ``FLOWPARK_MAX_HEADER_BYTES`` bytes and ``FLOWPARK_MAX_HEADERS`` headers (else
``431 Request Header Fields Too Large`` and the connection is closed); it arrives within
``FLOWPARK_HEADER_TIMEOUT_SECONDS`` of the connection or of the request's first byte, and its
body within ``FLOWPARK_BODY_TIMEOUT_SECONDS`` of the head (else the connection is closed,
logged as one warning line). uvicorn itself bounds the keep-alive idle time
(``timeout_keep_alive``, ``FLOWPARK_KEEP_ALIVE_SECONDS``); body size is bounded by the application
(``FLOWPARK_MAX_BODY_BYTES``). See ``docs/operating.md`` for what a reverse proxy in front
should enforce as well.

Every refusal it answers is ``application/problem+json``, as the application's are: a head
past its bounds is 431 ``headers_too_large``, and a request httptools cannot parse (a
control byte in the request line or a header value, a malformed request line or header) is
400 ``request_malformed`` - uvicorn's own answer to that is a plain-text 400, written before
any application code runs, so this protocol writes the problem instead (the same body the
application's handlers build, by :func:`flowpark.api.problems.problem`). The connection is
closed after either. What httptools passes (a DEL or a C1 control, a lone surrogate's
bytes) the application refuses itself (422 ``input_invalid``, :mod:`flowpark.api.hygiene`).
The answers this protocol does not make: a too slow head or body gets none (the
connection is closed); and uvicorn still answers a plain-text ``500 Internal Server
Error`` for an application that fails before it starts an answer, which flowpark's
handlers never leave it to (every exception is answered as a problem).

Why a subclass of uvicorn's protocol, not a setting or a middleware: the head is bounded
before any ASGI app is called, and uvicorn 0.54's ``Config`` has no head bound for httptools
(``h11_max_incomplete_event_size`` bounds the h11 protocol's head only, answers 400 rather
than 431 and counts no headers; there is no head or body timeout besides the keep-alive
idle time). The body's size is bounded by an ASGI middleware (``BodyLimit``). The body's
time could be read there too, but an ASGI app cannot close a connection without answering
(it would take a ``408`` problem and an error code of its own), so it stays here, where a
too slow body closes the connection as a too slow head does.
"""

from __future__ import annotations

import asyncio
import logging
from functools import cache
from http import HTTPStatus
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from flowpark.api.problems import problem
from flowpark.errors import ErrorCode
from flowpark.settings import Settings

__all__ = ["BoundedHttpToolsProtocol"]

log = logging.getLogger("flowpark.http")


@cache
def _limits() -> tuple[int, int, float, float]:
    settings = Settings()
    return (
        settings.max_header_bytes,
        settings.max_headers,
        settings.header_timeout_seconds,
        settings.body_timeout_seconds,
    )


class _HeadTooLarge(Exception):
    """Raised inside a parser callback: the request head passed a bound."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """:class:`uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` with the head and
    timing bounds of the module docstring (pass it as ``uvicorn.Config(http=...)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._max_bytes, self._max_headers, self._head_s, self._body_s = _limits()
        self._head_bytes = 0
        self._head_count = 0
        self._too_large = False
        self._deadline: asyncio.TimerHandle | None = None

    # -- timers ------------------------------------------------------------------------
    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expired, what)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self, what: str) -> None:
        self._deadline = None
        client = "%s:%d" % self.client if self.client else "a client"  # noqa: UP031
        log.warning("%s was too slow to send the request %s: connection closed", client, what)
        self.transport.close()

    # -- connection and parser callbacks -----------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self._head_s, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._too_large:
            return  # refused already; the connection is closing
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if self._too_large:
                self._refuse_head()
                return
            self.logger.warning("Invalid HTTP request received: %s", exc)
            self.send_400_response(str(exc))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = 0
        self._head_count = 0
        self._arm(self._head_s, "head")

    def on_url(self, url: bytes) -> None:
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4, 1)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._arm(self._body_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def _count(self, size: int, headers: int) -> None:
        self._head_bytes += size
        self._head_count += headers
        if self._head_bytes > self._max_bytes or self._head_count > self._max_headers:
            self._too_large = True
            raise _HeadTooLarge  # stops the parser; data_received answers 431

    def send_400_response(self, msg: str) -> None:
        """Refuse a request httptools could not parse: 400 ``request_malformed`` as a
        problem (uvicorn's own is plain text), then close the connection.

        Args:
            msg: the parser's reason (a fixed phrase of llhttp's, never the request's
                bytes), e.g. ``Invalid header value char``.
        """
        self._disarm()
        reason = msg.strip().rstrip(".")[:100] or "unparsable"
        self._answer_problem(
            ErrorCode.REQUEST_MALFORMED,
            f"the request is not valid HTTP/1.1 ({reason}), so no route saw it; the "
            "connection is closed",
        )

    def _refuse_head(self) -> None:
        self._disarm()
        client = "%s:%d" % self.client if self.client else "a client"  # noqa: UP031
        log.warning(
            "%s sent a request head past %d bytes or %d headers: 431, connection closed",
            client,
            self._max_bytes,
            self._max_headers,
        )
        self._answer_problem(
            ErrorCode.HEADERS_TOO_LARGE,
            f"the request head (request line and headers) is past {self._max_bytes} bytes "
            f"or {self._max_headers} headers; the connection is closed",
            maxHeaderBytes=self._max_bytes,
            maxHeaders=self._max_headers,
        )

    def _answer_problem(self, code: ErrorCode, detail: str, **fields: Any) -> None:
        """Write the problem answer for ``code`` (``connection: close``) and close."""
        answer = problem(code, detail, **fields)
        status = HTTPStatus(answer.status_code)
        head = [f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode("ascii")]
        for name, value in [*self.server_state.default_headers, *answer.raw_headers]:
            head.append(name + b": " + value + b"\r\n")
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + bytes(answer.body))
        self.transport.close()
