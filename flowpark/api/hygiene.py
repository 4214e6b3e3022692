"""Input hygiene of the request line and headers, before any route (and so any store) sees
the request: a path, a query parameter (name or value) or a header value that holds a
control character or a lone surrogate is answered 422 ``input_invalid`` (U+0000 and a lone
surrogate no store can keep; the other control characters no log or id can show).

Refused, once percent-decoded and read as UTF-8:

* in the path and the query string: bytes that are not UTF-8 (which is how a lone
  surrogate, U+D800-U+DFFF, can arrive: it has no UTF-8 form), and every control character
  (U+0000-U+001F, U+007F-U+009F; a tab too);
* in a header value: the same, but a tab (HTTP's own field whitespace) is allowed; the
  ``Authorization`` header is left to the bearer check, which answers 401 ``unauthorized``
  for any value that is no token (it is compared as bytes and never stored). (The
  node's HTTP protocol refuses raw C0 control bytes and DEL in the request line and
  headers itself, 400 ``request_malformed`` as a problem, before the app:
  :mod:`flowpark.runtime.protocol`.)

The problem's ``errors`` say where: ``{"loc": ["query", "flow"], "msg": ..., "type":
"string_unstorable"}`` (``["path"]``, ``["header", "<name>"]``), the same ``type`` a body's
unstorable string gets.

The same rule holds for the free text a request stores (a review's note, an instance key):
it may hold no control character - C0 (U+0000-U+001F), DEL (U+007F), C1 (U+0080-U+009F) -
which a terminal reads as a command (ESC and U+009B begin escape sequences; OSC can set a
window title or a clipboard), except a tab and a line feed in text made of lines (a note).
:func:`control_in` finds one, :func:`controls_pattern` states the rule as the JSON-schema
``pattern`` the OpenAPI document gives those fields (both from one list of code points), and
:data:`NoteText` and :data:`LineText` apply it to a request model's field (422
``input_invalid``).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import unquote_to_bytes

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema
from starlette.types import ASGIApp, Receive, Scope, Send

from flowpark.api.problems import problem
from flowpark.errors import ErrorCode

__all__ = [
    "LINES",
    "RULE",
    "TEXT_RULE",
    "InputHygiene",
    "LineText",
    "NoteText",
    "control_in",
    "controls_pattern",
    "unreadable",
]

#: Unicode categories refused: control characters and surrogates.
_REFUSED = frozenset({"Cc", "Cs"})
#: The ASCII characters of those categories (U+0000-U+001F, U+007F), found by one scan;
#: a header value may hold a tab.
_ASCII_REFUSED = re.compile(rb"[\x00-\x1f\x7f]")
_ASCII_HEADER_REFUSED = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: The rule, as the problem's detail and the OpenAPI document state it.
RULE = (
    "a path, query parameter or header value may hold no control character "
    "(U+0000-U+001F, U+007F-U+009F; a header value may hold a tab) and no lone surrogate"
)
#: Longest name of a query parameter or header shown in a problem's ``loc``.
_SHOWN = 80
#: The control characters text made of lines (a note) may hold: a tab and a line feed.
LINES = "\t\n"
#: The rule for stored free text, as a refusal states it.
TEXT_RULE = (
    "stored text may hold no control character (U+0000-U+001F, U+007F-U+009F; a note may "
    "hold a tab and a line feed)"
)
#: Every control character (Unicode category Cc): C0, DEL and C1.
_CONTROLS = tuple(c for c in range(0xA0) if unicodedata.category(chr(c)) == "Cc")


@functools.cache
def _refused_class(allowed: str) -> str:
    """The regex class body of the control characters not in ``allowed``, as ranges of
    ``\\xHH`` escapes (read alike by Python's ``re`` and ECMA-262, JSON Schema's dialect)."""
    codes = [c for c in _CONTROLS if chr(c) not in allowed]
    ranges: list[list[int]] = []
    for code in codes:
        if ranges and ranges[-1][1] == code - 1:
            ranges[-1][1] = code
        else:
            ranges.append([code, code])
    return "".join(f"\\x{a:02x}" if a == b else f"\\x{a:02x}-\\x{b:02x}" for a, b in ranges)


def controls_pattern(allowed: str = "") -> str:
    """The JSON-schema ``pattern`` of text with no control character but those in
    ``allowed`` (e.g. ``^[^\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f]*$`` for :data:`LINES`)."""
    return f"^[^{_refused_class(allowed)}]*$"


@functools.cache
def _finder(allowed: str) -> re.Pattern[str]:
    return re.compile(f"[{_refused_class(allowed)}]")


def control_in(text: str, allowed: str = "") -> str | None:
    """The first control character of ``text`` not in ``allowed``, or None (the rule
    :func:`controls_pattern` states)."""
    found = _finder(allowed).search(text)
    return None if found is None else found.group()


def _checked(allowed: str) -> Any:
    def check(value: str) -> str:
        found = control_in(value, allowed)
        if found is not None:
            raise ValueError(f"holds U+{ord(found):04X} (a control character): {TEXT_RULE}")
        return value

    return check


@dataclass(frozen=True)
class _Pattern:
    """Gives a string's JSON schema the ``pattern`` of its rule."""

    pattern: str

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema["pattern"] = self.pattern
        return schema


#: A request's stored text made of lines (a note): no control character but a tab and a
#: line feed (422 ``input_invalid``), stated as its schema's ``pattern``.
NoteText = Annotated[str, AfterValidator(_checked(LINES)), _Pattern(controls_pattern(LINES))]
#: A request's stored one-line text (a key): no control character at all.
LineText = Annotated[str, AfterValidator(_checked("")), _Pattern(controls_pattern())]


def unreadable(raw: bytes, *, header: bool = False) -> str | None:
    """Why ``raw`` (percent-decoded bytes of a path or query part, or a header value)
    cannot be taken, or None when it can.

    Args:
        raw: the bytes as sent (already percent-decoded for a path or query part).
        header: ``raw`` is a header value: a tab is allowed.

    Returns:
        A phrase such as ``"holds U+0000"``, or None.
    """
    if raw.isascii():  # most values: their control characters are the C0 set and DEL
        found = (_ASCII_HEADER_REFUSED if header else _ASCII_REFUSED).search(raw)
        return None if found is None else f"holds U+{found.group()[0]:04X} (a control character)"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "is not UTF-8 (a lone surrogate has no UTF-8 form)"
    for ch in text:
        if header and ch == "\t":
            continue
        if unicodedata.category(ch) in _REFUSED:
            return f"holds U+{ord(ch):04X} (a control character)"
    return None


def _shown(name: bytes) -> str:
    text = name.decode("latin-1")[:_SHOWN]
    return text if unreadable(name) is None else repr(text)


def _query_refusal(query: bytes) -> tuple[list[str], str] | None:
    for part in query.split(b"&"):
        if not part:
            continue
        name, _, value = part.partition(b"=")
        decoded_name = unquote_to_bytes(name.replace(b"+", b" "))
        why = unreadable(decoded_name)
        if why is not None:
            return ["query"], f"a query parameter's name {why}"
        why = unreadable(unquote_to_bytes(value.replace(b"+", b" ")))
        if why is not None:
            shown = _shown(decoded_name)
            return ["query", shown], f"the query parameter {shown} {why}"
    return None


def _refusal(scope: Scope) -> tuple[list[str], str] | None:
    """Where and why the request's path, query or headers cannot be taken (None: they
    can)."""
    raw_path = scope.get("raw_path")
    path = (
        unquote_to_bytes(raw_path)
        if raw_path
        else scope.get("path", "").encode("utf-8", "surrogatepass")
    )
    why = unreadable(path)
    if why is not None:
        return ["path"], f"the path {why}"
    found = _query_refusal(scope.get("query_string", b""))
    if found is not None:
        return found
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            continue
        why = unreadable(value, header=True)
        if why is not None:
            shown = _shown(name)
            return ["header", shown], f"the header {shown} {why}"
    return None


class InputHygiene:
    """ASGI middleware: a request whose path, query string or headers break the rules of
    this module is answered 422 ``input_invalid`` (problem+json) before routing.

    Args:
        app: the application to hand every other request to.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: refuse an unreadable request line or header, else pass it on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = _refusal(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        loc, why = found
        response = problem(
            ErrorCode.INPUT_INVALID,
            f"{why}: {RULE}",
            errors=[{"loc": loc, "msg": why, "type": "string_unstorable"}],
        )
        await response(scope, receive, send)
