"""Bearer-token authentication and scopes for the ``/api`` routes.

Tokens come from ``FLOWPARK_API_TOKENS`` (:func:`flowpark.settings.parse_api_tokens`): each has
a name and scopes. Every route names the scope it needs (:func:`require_scope`): ``read``
(lists, views, streams, flows, events, reviews), ``start`` (start routes), ``signal``
(signal routes), ``operate`` (wake, extend budget, cancel, bulk actions). No token, or an
unknown one: 401 ``unauthorized``; a known token without the scope: 403 ``forbidden``
naming the missing scope. Token values are compared in constant time and never logged or
echoed; the name is what the instance history records.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from flowpark.errors import Forbidden, Unauthorized
from flowpark.settings import ApiToken

__all__ = [
    "BEARER",
    "InstanceCheck",
    "Principal",
    "authenticate",
    "is_token_check",
    "require_scope",
    "require_token",
]

#: The OpenAPI security scheme ``bearer`` (Swagger UI's "Authorize"): every route that
#: depends on :func:`require_scope` or :func:`require_token` carries it. It reads nothing
#: itself (``auto_error=False``): :func:`authenticate` checks the header.
BEARER = HTTPBearer(
    scheme_name="bearer",
    description=(
        "A token from `FLOWPARK_API_TOKENS`: `Authorization: Bearer <token>`. A route needs "
        "a scope of the token (`read`, `start`, `signal`, `operate`): 403 `forbidden` "
        "without it."
    ),
    auto_error=False,
)


#: A flows module's check of a token for one instance: ``check(token, instance_id)`` answers
#: the credential (name, scopes) the token is for that instance, or None.
InstanceCheck: TypeAlias = Callable[[str, str], ApiToken | None]


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: the token's name and scopes (never its value)."""

    name: str
    scopes: frozenset[str]


def _header_bytes(value: str) -> bytes:
    """The header value's bytes as sent: ASGI servers decode header bytes as Latin-1, so
    encoding back gives the raw bytes (UTF-8 for a UTF-8 token)."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # not from the wire; compare its UTF-8 instead
        return value.encode("utf-8", "surrogateescape")


def authenticate(request: Request) -> Principal:
    """The principal of the request's ``Authorization: Bearer <token>``.

    The token is compared as bytes (the header's bytes against each token's UTF-8) with
    :func:`hmac.compare_digest`, against every accepted token (no early exit), so neither
    a byte nor the position of a match shows in the time taken.

    Raises:
        Unauthorized: ``unauthorized`` (401) when missing or unknown.
    """
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    tokens: tuple[ApiToken, ...] = getattr(
        request.app.state, "credentials", request.app.state.settings.api_credentials
    )
    if not header:
        raise Unauthorized("missing bearer token")
    if scheme.lower() != "bearer" or not token.strip():
        # the header's value is a secret whatever its form: never echoed
        raise Unauthorized("the Authorization header is not 'Bearer <token>'")
    sent = _header_bytes(token.strip(" \t"))
    found: ApiToken | None = None
    for candidate in tokens:
        if hmac.compare_digest(sent, candidate.value.encode("utf-8", "surrogateescape")):
            found = candidate
    if found is None:
        found = _instance_credential(request, sent)
    if found is None:
        raise Unauthorized("unknown bearer token")
    return Principal(found.name, found.scopes)


def _instance_credential(request: Request, sent: bytes) -> ApiToken | None:
    """The credential a flows module's instance check (``Deps.accept_for_instance``)
    makes of ``sent`` for the path's instance, or None: such a token opens the routes of
    that one instance only."""
    instance_id = request.path_params.get("instance_id")
    checks: tuple[InstanceCheck, ...] = getattr(request.app.state, "instance_credentials", ())
    if not isinstance(instance_id, str) or not checks:
        return None
    token = sent.decode("utf-8", "replace")
    for check in checks:
        found = check(token, instance_id)
        if found is not None:
            return found
    return None


#: The dependencies that check a request's token (see :func:`is_token_check`).
_TOKEN_CHECKS: set[Callable[..., Any]] = set()


def is_token_check(call: Callable[..., Any] | None) -> bool:
    """``call`` is a dependency of this module that checks the request's token
    (:func:`require_token`, or one :func:`require_scope` made)."""
    return call is require_token or call in _TOKEN_CHECKS


def require_scope(scope: str) -> Callable[[Request], Awaitable[Principal]]:
    """A FastAPI dependency: the request's token must hold ``scope``.

    Returns:
        The dependency; it answers the :class:`Principal`.

    Raises (from the dependency):
        Unauthorized: ``unauthorized`` (401), no or an unknown token.
        Forbidden: ``forbidden`` (403), the token lacks ``scope`` (``missingScope``).
    """

    async def dependency(
        request: Request, _scheme: HTTPAuthorizationCredentials | None = Depends(BEARER)
    ) -> Principal:
        principal = authenticate(request)
        if scope not in principal.scopes:
            raise Forbidden(
                f"token {principal.name!r} lacks the {scope!r} scope",
                missing_scope=scope,
                token=principal.name,
            )
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{scope}"
    _TOKEN_CHECKS.add(dependency)
    return dependency


async def require_token(
    request: Request, _scheme: HTTPAuthorizationCredentials | None = Depends(BEARER)
) -> str:
    """FastAPI dependency: any accepted token (whatever its scopes); answers its name.

    Raises:
        Unauthorized: ``unauthorized`` (401) when missing or wrong.
    """
    principal = authenticate(request)
    request.state.principal = principal
    return principal.name
