"""Bearer-token authentication for the ``/api`` routes."""

from __future__ import annotations

import hmac

from fastapi import Request

from app.errors import Unauthorized

__all__ = ["require_token"]


def _header_bytes(value: str) -> bytes:
    """The header value's bytes as sent: ASGI servers decode header bytes as Latin-1, so
    encoding back gives the raw bytes (UTF-8 for a UTF-8 token)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # not from the wire; compare its UTF-8 instead
        return value.encode("utf-8", "surrogateescape")


async def require_token(request: Request) -> str:
    """FastAPI dependency: the request must carry ``Authorization: Bearer <token>`` with a
    token from ``FLOWPARK_API_TOKENS``.

    The token is compared as bytes (the header's bytes against each token's UTF-8) in
    constant time, so any bytes in the header, ASCII or not, are simply a wrong token.

    Raises:
        Unauthorized: ``unauthorized`` (401) when missing or wrong.
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    tokens: frozenset[str] = request.app.state.settings.tokens
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token")
    sent = _header_bytes(token.strip(" \t"))
    # every token is compared (no early exit), so the time does not tell which one is near
    matches = [hmac.compare_digest(sent, t.encode("utf-8", "surrogateescape")) for t in tokens]
    if not any(matches):
        raise Unauthorized("unknown bearer token")
    return token
