"""Secrets never leave in text: URLs lose their passwords, configured secrets become ``***``.

Everything flowpark prints or logs passes through here: the CLI's lines (``flowpark db
upgrade``), every log record (:class:`RedactingFormatter`, the format of every handler
:func:`flowpark.runtime.logs.log_config` sets up, tracebacks included), and the 503 problems of
an unavailable store (which name no host or port at all).

The secrets of a process are registered once its settings are known
(:func:`register_secrets`): the API tokens, the console's cookie secret and the database
password.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = [
    "MASK",
    "RedactingFormatter",
    "redact",
    "redact_url",
    "register_secrets",
    "registered_secrets",
]

#: What a password or secret is replaced with.
MASK = "***"

#: Shortest registered secret that is masked inside text (a shorter one would mask
#: ordinary words; such a secret is weak anyway).
MIN_SECRET_LENGTH = 4

# scheme://user:password@host  ->  scheme://user:***@host (any scheme; the password ends at
# the last '@' before the host part). A '#' or '?' ends a URL's authority: in
# ``https://host:8443#@x`` or ``https://host:8443?next=a@b`` the '@' is in the fragment or
# query, and ``8443`` a port, not a password (left as it is).
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@#?]*:)(?P<pw>[^\s@/]*)@")
_PORT_THEN_REST = re.compile(r"\d*[#?]")
# ?password=...&token=... in a URL's query, or key=value in a libpq DSN (sslpassword: the
# passphrase of the client's SSL key). The value ends
# before the punctuation that closes a URL in a sentence (``...?password=pw: refused``,
# ``(...?token=t)``): a colon, comma, period or parenthesis followed by a space or the end.
_PARAM = re.compile(
    r"(?P<head>\b(?:password|sslpassword|passwd|pwd|token|secret|api_key|apikey|access_token)=)"
    r"(?P<value>[^\s&;'\"]+?)(?=[:,.)]*(?:[\s&;'\"]|$))",
    re.IGNORECASE,
)

_secrets: set[str] = set()


def register_secrets(values: Iterable[str | None]) -> None:
    """Add ``values`` to the secrets this process masks in everything it prints or logs.

    Args:
        values: secret strings (tokens, passwords); None and empty ones are skipped, and
            ones shorter than :data:`MIN_SECRET_LENGTH` characters are not masked inside
            text (URL passwords are masked whatever their length).
    """
    _secrets.update(v for v in values if v and len(v) >= MIN_SECRET_LENGTH)


def registered_secrets() -> frozenset[str]:
    """The secrets registered so far."""
    return frozenset(_secrets)


def redact_url(url: str) -> str:
    """``url`` with its password (``user:password@``) and secret query parameters
    (``password=``, ``token=`` ...) replaced by ``***``.

    Args:
        url: any URL (a database URL, a provider's base URL).

    Returns:
        The URL as text, safe to print: ``postgresql://app:***@db:5432/flowpark``.
    """
    return redact(url)


def redact(text: str) -> str:
    """``text`` with every URL password, secret query parameter and registered secret
    replaced by ``***``."""
    if not text:
        return text
    text = _USERINFO.sub(
        lambda m: f"{m['head']}{MASK}@" if m["pw"] and not _PORT_THEN_REST.match(m["pw"]) else m[0],
        text,
    )
    text = _PARAM.sub(lambda m: f"{m['head']}{MASK}", text)
    for secret in sorted(_secrets, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class RedactingFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose every formatted line (message, arguments and
    traceback) went through :func:`redact`."""

    def format(self, record: logging.LogRecord) -> str:
        """Format ``record`` with secrets masked."""
        return redact(super().format(record))
