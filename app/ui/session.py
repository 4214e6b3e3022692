"""Console sign-in: an API token exchanged for a signed session cookie, and CSRF tokens.

The cookie (``flowpark_session``, ``HttpOnly``, ``SameSite=Strict``, path ``/ui``,
``Secure`` over HTTPS) holds, signed with itsdangerous and timestamped:

* ``t``: a fingerprint of the token (an HMAC of it under the console secret, never the
  token itself). Each request finds the configured token with that fingerprint again, with
  its name and scopes, so a token removed from ``FLOWPARK_API_TOKENS`` (or stripped of its
  ``read`` scope) ends its sessions at once;
* ``c``: the session's CSRF token, which every action form carries in a hidden ``csrf``
  field; a post whose field does not match is refused (403).

A session lasts ``console_session_seconds``; a cookie that is forged, altered, expired or
signed by another secret is no session at all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from app.api.auth import Principal
from app.settings import Settings

__all__ = [
    "COOKIE",
    "Session",
    "check_csrf",
    "clear_session",
    "notice_is_signed",
    "notice_signature",
    "current_session",
    "open_session",
    "principal_for",
    "sign_in",
]

COOKIE = "flowpark_session"
_SALT = "flowpark.console.session"


def principal_for(settings: Settings, token: str) -> Principal | None:
    """The principal (name, scopes) of ``token`` when it is one of the configured API
    tokens, else None. Every token is compared, in constant time, as the API does.
    """
    sent = token.encode("utf-8", "surrogateescape")
    found = None
    for candidate in settings.api_credentials:
        if hmac.compare_digest(sent, candidate.value.encode("utf-8", "surrogateescape")):
            found = candidate
    return Principal(found.name, found.scopes) if found is not None else None


@dataclass(frozen=True)
class Session:
    """A signed-in console user.

    Attributes:
        principal: the token's name and scopes.
        csrf: the session's CSRF token (hidden field of every action form).
    """

    principal: Principal
    csrf: str

    @property
    def can_operate(self) -> bool:
        """The token has the ``operate`` scope (wake, extend, cancel)."""
        return "operate" in self.principal.scopes


def _secret(settings: Settings) -> bytes:
    if settings.console_secret is not None:
        return settings.console_secret.get_secret_value().encode()
    joined = "\n".join(sorted(settings.tokens)).encode("utf-8", "surrogateescape")
    return hmac.new(b"flowpark console session key", joined, hashlib.sha256).digest()


def _serializer(settings: Settings) -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(_secret(settings), salt=_SALT)


def _fingerprint(settings: Settings, token: str) -> str:
    raw = token.encode("utf-8", "surrogateescape")
    return hmac.new(_secret(settings), raw, hashlib.sha256).hexdigest()[:32]


def sign_in(settings: Settings, token: str) -> Principal | None:
    """The principal of ``token`` when it is one of the configured API tokens and holds the
    ``read`` scope (what every console page needs), else None.
    """
    principal = principal_for(settings, token.strip())
    return principal if principal is not None and "read" in principal.scopes else None


def open_session(response: Response, request: Request, settings: Settings, token: str) -> None:
    """Set the session cookie for ``token`` (already checked with :func:`sign_in`) on
    ``response``, with a fresh CSRF token.
    """
    value = _serializer(settings).dumps(
        {"t": _fingerprint(settings, token.strip()), "c": secrets.token_urlsafe(24)}
    )
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(settings.console_session_seconds),
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session(response: Response) -> None:
    """Expire the session cookie on ``response`` (sign-out)."""
    response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")


def current_session(request: Request) -> Session | None:
    """The request's session, or None (no cookie, a bad or expired signature, or a token
    that is no longer configured).
    """
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    settings: Settings = request.app.state.settings
    try:
        data = _serializer(settings).loads(raw, max_age=int(settings.console_session_seconds))
    except BadSignature:  # includes SignatureExpired
        return None
    if not isinstance(data, dict):
        return None
    fingerprint, csrf = data.get("t"), data.get("c")
    if not isinstance(fingerprint, str) or not isinstance(csrf, str):
        return None
    for credential in settings.api_credentials:
        if hmac.compare_digest(_fingerprint(settings, credential.value), fingerprint):
            if "read" not in credential.scopes:
                return None
            return Session(Principal(credential.name, credential.scopes), csrf)
    return None


def check_csrf(session: Session, sent: str | None) -> bool:
    """``sent`` (the form's ``csrf`` field) is the session's CSRF token."""
    return sent is not None and hmac.compare_digest(sent.encode(), session.csrf.encode())


def notice_signature(settings: Settings, text: str) -> str:
    """The signature an action's redirect carries beside its notice (``?done=...&ds=...``),
    so the instance page shows only notices this console wrote, never text a crafted link
    puts there."""
    raw = b"notice\n" + text.encode("utf-8", "surrogateescape")
    return hmac.new(_secret(settings), raw, hashlib.sha256).hexdigest()[:32]


def notice_is_signed(settings: Settings, text: str, signature: str | None) -> bool:
    """``signature`` is :func:`notice_signature` of ``text``."""
    expected = notice_signature(settings, text).encode()
    return signature is not None and hmac.compare_digest(signature.encode(), expected)
