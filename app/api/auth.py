"""Bearer-token authentication for the ``/api`` routes."""

from __future__ import annotations

import hmac

from fastapi import Request

from app.api.problems import ApiProblem

__all__ = ["require_token"]


async def require_token(request: Request) -> str:
    """FastAPI dependency: the request must carry ``Authorization: Bearer <token>`` with a
    token from ``FLOWPARK_API_TOKENS``.

    Raises:
        ApiProblem: 401 ``unauthorized`` when missing or wrong.
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    tokens: frozenset[str] = request.app.state.settings.tokens
    if scheme.lower() != "bearer" or not token:
        raise ApiProblem(401, "unauthorized", "missing bearer token")
    if not any(hmac.compare_digest(token.strip(), t) for t in tokens):
        raise ApiProblem(401, "unauthorized", "unknown bearer token")
    return token
