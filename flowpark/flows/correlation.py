"""Correlation keys: the provider's own id for what a step started, and the signal route
that finds the instance by it.

A capability that starts something at a provider (a CI run, an OCR job) records the id the
provider minted with ``ctx.correlate(provider, key)``; the key is committed with the step's
journal row. A :class:`~flowpark.flows.capability.Signal` declared with
``correlate=Correlate(provider, key=...)`` then has one fixed route for every instance of
every flow that declares it, ``POST /api/v1/providers/{provider}/signals/{name}``: the
delivery's payload names the key, and the one live instance holding it receives the signal.

A key is unique among the live instances of a flow for its provider (a second instance
recording it fails its step with ``correlation_key_in_use``) and is released when its
instance ends (completed, failed or cancelled).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_CORRELATION_KEY",
    "Correlate",
    "check_correlation_key",
    "check_provider_name",
]

#: The longest correlation key a step may record (characters).
MAX_CORRELATION_KEY = 200

_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")


def check_provider_name(provider: str) -> str:
    """``provider`` if it is a provider's name: 1 to 64 of ``a-z 0-9 _ . -``, starting with
    a letter or digit (it is a URL segment).

    Raises:
        ValueError: it is not.
    """
    if not isinstance(provider, str) or _PROVIDER.fullmatch(provider) is None:
        raise ValueError(
            f"a provider's name is 1 to 64 of a-z, 0-9, '_', '.', '-' starting with a letter "
            f"or digit, not {provider!r}"
        )
    return provider


def check_correlation_key(key: str) -> str:
    """``key`` if it can be recorded: a non-empty string of at most
    :data:`MAX_CORRELATION_KEY` characters with no control character.

    Raises:
        ValueError: it cannot (a key that is not a string, empty, too long, or with a
            control character).
    """
    if not isinstance(key, str):
        raise ValueError(f"a correlation key is a str, not a {type(key).__name__}")
    if not key or len(key) > MAX_CORRELATION_KEY:
        raise ValueError(f"a correlation key has 1 to {MAX_CORRELATION_KEY} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ValueError("a correlation key has no control character")
    return key


@dataclass(frozen=True)
class Correlate:
    """How a signal's deliveries name their instance: by a provider's id that a step of
    the instance recorded (``ctx.correlate(provider, key)``).

    Attributes:
        provider: the provider's name (``ci``, ``ocr``; 1 to 64 of ``a-z 0-9 _ . -``): the
            route's ``{provider}`` segment and the namespace of its keys.
        key: a function of the signal's typed payload giving the provider's id the
            delivery is about (``lambda payload: payload.run_id``; a non-string id is
            turned into its ``str``), or None when the delivery names none (answered 204,
            nothing stored). What it raises is a 422 ``signal_payload_invalid``.

    Raises:
        ValueError: ``provider`` is not a provider's name.
    """

    provider: str
    key: Callable[[Any], Any]

    def __post_init__(self) -> None:
        check_provider_name(self.provider)
