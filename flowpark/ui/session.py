"""Console sign-in: an API token exchanged for a session, kept in the store and named by
a signed cookie, and CSRF tokens.

Each sign-in writes a ``flow_console_session`` row (:mod:`flowpark.store.console_sessions`); the
cookie (``flowpark_session``, ``HttpOnly``, ``SameSite=Strict``, path ``/ui`` or, under a
host application's prefix, ``/flowpark/ui``; ``Secure`` over HTTPS) holds, signed with
itsdangerous and timestamped:

* ``s``: the row's id. Every console request reads the row back (:func:`load_session`,
  once per request): sign-out ends it, and a session not seen for
  ``console_idle_seconds`` is over, on every node alike (a copy of the cookie opens
  nothing then);

* ``t``: a fingerprint of the token (an HMAC of it under the console secret, never the
  token itself). Each request finds the configured token with that fingerprint again, with
  its name and scopes, so a token removed from ``FLOWPARK_API_TOKENS`` (or stripped of its
  ``read`` scope) ends its sessions at once;
* ``c``: the session's CSRF token, which every action form carries in a hidden ``csrf``
  field; a post whose field does not match is refused (403).

A session lasts ``console_session_seconds`` at most; a cookie that is forged, altered,
expired or signed by another secret is no session at all.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import cast

from fastapi import Request
from fastapi.responses import Response
from itsdangerous import BadSignature, Signer, URLSafeTimedSerializer

from flowpark.api.auth import Principal
from flowpark.api.deps import engine_of, settings_of
from flowpark.engine.ports.nodes import ConsoleSessions
from flowpark.settings import Settings
from flowpark.ui.paths import ui_root

__all__ = [
    "COOKIE",
    "Session",
    "check_csrf",
    "clear_session",
    "notice_is_signed",
    "notice_signature",
    "current_session",
    "end_session",
    "load_session",
    "open_session",
    "principal_for",
    "sign_in",
]

COOKIE = "flowpark_session"
_SALT = "flowpark.console.session"
_NOTICE_SALT = "flowpark.console.notice"


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
        id: the session's row in the store.
        fingerprint: the cookie's token fingerprint (its row holds the same).
    """

    principal: Principal
    csrf: str
    id: str = ""
    fingerprint: str = ""

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


def _sessions(request: Request) -> ConsoleSessions:
    return cast(ConsoleSessions, request.app.state.console_sessions)


async def open_session(
    response: Response, request: Request, settings: Settings, token: str
) -> None:
    """Open a session for ``token`` (already checked with :func:`sign_in`): its row in the
    store, and its cookie on ``response`` with a fresh CSRF token.
    """
    session_id = secrets.token_urlsafe(24)
    fingerprint = _fingerprint(settings, token.strip())
    await _sessions(request).open(session_id, fingerprint, engine_of(request).clock.now())
    value = _serializer(settings).dumps(
        {"s": session_id, "t": fingerprint, "c": secrets.token_urlsafe(24)}
    )
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(settings.console_session_seconds),
        path=ui_root(request),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_session(response: Response, request: Request) -> None:
    """Expire the session cookie on ``response`` (sign-out from ``request``)."""
    response.delete_cookie(COOKIE, path=ui_root(request), httponly=True, samesite="strict")


async def end_session(request: Request) -> None:
    """End the request's session in the store (sign-out), on every node."""
    session = current_session(request)
    if session is not None and session.id:
        await _sessions(request).end(session.id, engine_of(request).clock.now())
    request.state.console_session = None


async def load_session(request: Request) -> Session | None:
    """Read the request's session once (the console's routes do it first), and keep it for
    :func:`current_session`: the cookie's, when its row in the store is open (not ended,
    seen within ``console_idle_seconds``, within ``console_session_seconds``).
    """
    session = _cookie_session(request)
    if session is not None:
        settings = settings_of(request)
        fingerprint = await _sessions(request).seen(
            session.id,
            engine_of(request).clock.now(),
            timedelta(seconds=settings.console_idle_seconds),
            timedelta(seconds=settings.console_session_seconds),
        )
        if fingerprint is None or not hmac.compare_digest(fingerprint, session.fingerprint):
            session = None
    request.state.console_session = session
    return session


def current_session(request: Request) -> Session | None:
    """The request's session as :func:`load_session` read it, or None (no cookie, a bad or
    expired signature, a token no longer configured, a session ended or idle too long)."""
    return getattr(request.state, "console_session", None)


def _cookie_session(request: Request) -> Session | None:
    """The session the cookie names, before the store is asked (None: no cookie, a bad or
    expired signature, or a token that is no longer configured)."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        return None
    settings = settings_of(request)
    try:
        data = _serializer(settings).loads(raw, max_age=int(settings.console_session_seconds))
    except BadSignature:  # includes SignatureExpired
        return None
    if not isinstance(data, dict):
        return None
    session_id, fingerprint, csrf = data.get("s"), data.get("t"), data.get("c")
    if not all(isinstance(v, str) for v in (session_id, fingerprint, csrf)):
        return None
    assert isinstance(session_id, str) and isinstance(fingerprint, str) and isinstance(csrf, str)
    for credential in settings.api_credentials:
        if hmac.compare_digest(_fingerprint(settings, credential.value), fingerprint):
            if "read" not in credential.scopes:
                return None
            principal = Principal(credential.name, credential.scopes)
            return Session(principal, csrf, session_id, fingerprint)
    return None


def check_csrf(session: Session, sent: str | None) -> bool:
    """``sent`` (the form's ``csrf`` field) is the session's CSRF token."""
    return sent is not None and hmac.compare_digest(sent.encode(), session.csrf.encode())


def _notice_signer(settings: Settings) -> Signer:
    return Signer(_secret(settings), salt=_NOTICE_SALT, digest_method=hashlib.sha256)


def notice_signature(settings: Settings, text: str) -> str:
    """The signature an action's redirect carries beside its notice (``?done=...&ds=...``),
    so the instance page shows only notices this console wrote, never text a crafted link
    puts there (an itsdangerous signature under the console secret)."""
    raw = text.encode("utf-8", "surrogateescape")
    return _notice_signer(settings).get_signature(raw).decode("ascii")


def notice_is_signed(settings: Settings, text: str, signature: str | None) -> bool:
    """``signature`` is :func:`notice_signature` of ``text`` (compared in constant time)."""
    if signature is None:
        return False
    raw = text.encode("utf-8", "surrogateescape")
    try:
        return _notice_signer(settings).verify_signature(raw, signature.encode("ascii"))
    except UnicodeEncodeError:
        return False
