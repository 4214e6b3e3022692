"""Input hygiene shared by the routes: JSON bodies, instance ids, Idempotency-Key headers.

A body - of a start or signal route, or of any route with a body model
(:class:`JsonBodyRoute`) - is JSON, sent as ``application/json`` or ``application/*+json``
(no ``Content-Type``, or any other, is 415 ``unsupported_media_type``; a request with no body
needs none), UTF-8 with no key twice in one object, nests at most ``MAX_DEPTH`` deep
and holds no U+0000 or lone surrogate; an instance id is at most ``MAX_INSTANCE_ID``
well-formed characters; an ``Idempotency-Key`` is at most ``MAX_KEY`` visible ASCII
characters.
"""

from __future__ import annotations

import json
import math
import re
import types
import unicodedata
from collections.abc import Callable, Coroutine
from typing import Any, Union, get_args, get_origin

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.responses import Response

from flowpark.api.auth import is_token_check
from flowpark.api.hygiene import controls_pattern
from flowpark.errors import (
    IdempotencyKeyInvalid,
    IdempotencyKeyMissing,
    InputInvalid,
    InstanceNotFound,
    UnsupportedMediaType,
    shown,
)

__all__ = [
    "IDEMPOTENCY_KEY_DOC",
    "INSTANCE_KEY_SCHEMA",
    "JsonBodyRoute",
    "MAX_DEPTH",
    "MAX_INSTANCE_ID",
    "MAX_KEY",
    "MAX_SEQUENCE",
    "check_instance_id",
    "check_storable",
    "idempotency_header",
    "json_body",
    "well_formed",
]

MAX_KEY = 200
#: Largest sequence a cursor may name (a signed 64-bit column).
MAX_SEQUENCE = 2**63 - 1
#: Deepest JSON nesting a body may have (payloads are stored and serialized again).
MAX_DEPTH = 64
#: Longest instance id a path may name (ids are UUIDs: a longer one names nothing).
MAX_INSTANCE_ID = 100
#: What an integer query parameter's value must be: decimal digits, maybe negative (``0.0``,
#: ``1e3`` or `` 5`` are no integer, though pydantic would take them).
_WHOLE = re.compile(r"-?[0-9]+")
#: Unicode categories no id or name may hold: control characters and surrogates.
_ILL_FORMED = frozenset({"Cc", "Cs"})


def well_formed(value: str, limit: int = MAX_INSTANCE_ID) -> bool:
    """``value`` could be an id or a name: at most ``limit`` characters, no control
    character (U+0000-U+001F, U+007F-U+009F) and no surrogate."""
    return len(value) <= limit and not any(unicodedata.category(c) in _ILL_FORMED for c in value)


def check_instance_id(instance_id: str) -> None:
    """Refuse, without a look-up, a path id that cannot name an instance (a NUL would
    even break the PostgreSQL query).

    Raises:
        InstanceNotFound: ``instance_not_found``.
    """
    if not well_formed(instance_id):
        echoed = shown(instance_id)
        raise InstanceNotFound(f"no instance {echoed!r}", instance_id=echoed)


def _json_media_type(content_type: str | None) -> bool:
    """A body's ``Content-Type`` is JSON: ``application/json`` or ``application/*+json``, in
    any case, with any parameters (``charset`` is ignored: JSON is UTF-8).

    An absent or empty ``Content-Type`` is not JSON: one rule for every JSON body, whoever
    sends it. ``curl -d`` without a header sends ``application/x-www-form-urlencoded``:
    refused too, and the 415 says how to send JSON."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


async def _json_body(request: Request) -> Any:
    """The request's JSON body (``{}`` when empty: a request with no body needs no
    ``Content-Type``).

    Raises:
        UnsupportedMediaType: ``unsupported_media_type`` (415): a non-empty body sent
            without a ``Content-Type``, or with one that is not JSON.
        InputInvalid: 422: not JSON, too deep, or a string no store can keep.
    """
    return json_body(await request.body(), request.headers.get("content-type"))


def json_body(raw: bytes, content_type: str | None) -> Any:
    """A body's JSON by the rules of every route (``{}`` when empty), from its bytes and
    its ``Content-Type``: what :func:`_json_body` reads of a request, for a caller that
    holds the bytes (the harness's provider webhook).

    Raises:
        UnsupportedMediaType: ``unsupported_media_type`` (415): a non-empty body sent
            without a ``Content-Type``, or with one that is not JSON.
        InputInvalid: 422: not JSON, too deep, or a string no store can keep.
    """
    if not raw:
        return {}
    if not _json_media_type(content_type):
        sent = "no Content-Type" if content_type is None else repr(content_type)
        raise UnsupportedMediaType(
            "the body must be JSON, sent with Content-Type: application/json "
            f"(curl: --json, or -H 'Content-Type: application/json'), not {sent}",
        )
    try:
        # UTF-8 only (RFC 8259): json.loads would guess UTF-16 or UTF-32 from raw bytes
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputInvalid(f"the body is not UTF-8: {exc.reason} at byte {exc.start}") from None
    try:
        value = json.loads(
            text,
            parse_float=_finite,
            parse_constant=_no_constant,
            object_pairs_hook=_unique_keys,
        )
    except (ValueError, RecursionError) as exc:
        # ValueError: JSONDecodeError, integers longer than Python's int/str digit limit,
        # NaN/Infinity, a duplicated key; RecursionError: absurdly deep nesting
        raise InputInvalid(f"the body is not JSON: {exc}") from None
    _inspect(value)
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different; a repeated key (which parsers resolve
    differently: first wins, last wins) is refused."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        repeated = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {repeated[:80]!r} appears twice in one object")
    return value


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent; one out of a double's range (``1e999``)
    would silently become ``null`` when stored, so it is refused."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {text[:40]} is out of range")
    return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def check_storable(value: Any) -> None:
    """Check a payload that did not come as a JSON body (the console's form) by the body's
    rules.

    Raises:
        InputInvalid: a string or key holds U+0000 or a lone surrogate, or it nests deeper
            than ``MAX_DEPTH`` (``input_invalid``, 422; each error's ``loc`` starts
            ``body``).
    """
    _inspect(value)


def _inspect(value: Any) -> None:
    """Check a parsed body (iteratively: any depth is safe to walk).

    Raises:
        InputInvalid: it nests deeper than ``MAX_DEPTH``, or a string or key holds U+0000
            (PostgreSQL's text and jsonb refuse it) or a lone surrogate (not UTF-8).
    """
    stack: list[tuple[Any, int, tuple[str, ...]]] = [(value, 1, ("body",))]
    while stack:
        item, depth, loc = stack.pop()
        if isinstance(item, str):
            _check_text(item, loc)
            continue
        if isinstance(item, dict):
            for key in item:
                _check_text(key, (*loc, key))
            children: Any = ((v, (*loc, k)) for k, v in item.items())
        elif isinstance(item, list):
            children = ((v, (*loc, str(i))) for i, v in enumerate(item))
        else:
            continue
        if depth > MAX_DEPTH:
            raise InputInvalid(f"the body nests deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1, where) for child, where in children)


def _check_text(text: str, loc: tuple[str, ...]) -> None:
    if "\x00" in text:
        problem = "contains U+0000 (NUL), which cannot be stored"
    else:
        try:
            text.encode("utf-8")
            return
        except UnicodeEncodeError:
            problem = "contains a lone surrogate (not valid Unicode)"
    where = [part if well_formed(part) else shown(repr(part)) for part in loc]
    raise InputInvalid(
        f"a string in the body {problem}",
        errors=[{"loc": where, "msg": f"the string {problem}", "type": "string_unstorable"}],
    )


#: The body rules every start and signal route states in its docstring (OpenAPI).
_BODY_DOC = (
    " The body is JSON, sent with `Content-Type: application/json` (or another "
    "`application/*+json` type); a body sent with no `Content-Type`, or any other, is 415 "
    "`unsupported_media_type`; at most `max_body_bytes` (default 1 MiB), else 413 "
    "`body_too_large`; a body that is not UTF-8, an object with a repeated key or a "
    "string holding U+0000 is 422 `input_invalid`."
)


class JsonBodyRoute(APIRoute):
    """An API route whose JSON body FastAPI parses into a model (bulk actions, budget
    extensions) checks that body by the start and signal routes' rules, with the same
    check (:func:`_json_body`) and problem codes: JSON by its ``Content-Type`` (else 415
    ``unsupported_media_type``), UTF-8 (``json.loads`` would guess UTF-16 or UTF-32 from
    the bytes), no key twice in one object (FastAPI would keep the last), no NaN, no
    out-of-range number, no U+0000 or lone surrogate, at most ``MAX_DEPTH`` deep (else
    422 ``input_invalid``). The check is the route's last dependency, after its scope
    check; the rules are added to its OpenAPI description.

    A route that declares no body is left as FastAPI makes it (a body sent there is never
    read). A route that returns its answer model answers the fields the model was given
    (``response_model_exclude_unset``): a field it was not given is absent, one given as
    None is null. Every API router uses this class (``APIRouter(route_class=JsonBodyRoute)``); a
    test sends every operation with a JSON body in the OpenAPI document such bodies.

    A query parameter the document types ``integer`` (``limit``, ``after``) takes decimal
    digits only: ``after=0.0`` is 422 ``input_invalid`` (pydantic alone would read it as 0).
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The route's handler, checking its integer query parameters first."""
        handler = super().get_route_handler()
        names = _integer_queries(self.dependant)
        if not names:
            return handler

        async def checked(request: Request) -> Response:
            for name in names:
                for raw in request.query_params.getlist(name):
                    if _WHOLE.fullmatch(raw) is None:
                        why = f"the query parameter {name} must be an integer (decimal digits)"
                        raise InputInvalid(
                            why,
                            errors=[{"loc": ["query", name], "msg": why, "type": "int_parsing"}],
                        )
            return await handler(request)

        return checked

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        # an answer model leaves out the fields its view did not set (absent, not null)
        kwargs["response_model_exclude_unset"] = True
        super().__init__(path, endpoint, **kwargs)
        if self.body_field is None:
            return
        # built again with the check as its last dependency (FastAPI knows whether a route
        # takes a body only once it has read the endpoint's signature), after the token
        # checks the endpoint declares (``token: OperateToken``): they run first as the
        # route's dependencies, and the endpoint's parameter gets their cached answer
        checks = [
            Depends(sub.call)
            for sub in self.dependant.dependencies
            if is_token_check(sub.call) and sub.call is not None
        ]
        kwargs["dependencies"] = [
            *(kwargs.get("dependencies") or ()),
            *checks,
            Depends(_checked_body),
        ]
        super().__init__(path, endpoint, **kwargs)
        if self.description:
            self.description += "\n\n" + _BODY_DOC.strip()


def _integer_queries(dependant: Dependant) -> tuple[str, ...]:
    """The names (as sent) of ``dependant``'s query parameters typed ``int`` or ``int | None``."""
    names = []
    for field in dependant.query_params:
        annotation = field.field_info.annotation
        if get_origin(annotation) in (Union, types.UnionType):
            annotation = next((a for a in get_args(annotation) if a is not type(None)), None)
        if annotation is int:
            names.append(field.alias)
    return tuple(names)


async def _checked_body(request: Request) -> None:
    """Dependency: the request's body passes :func:`_json_body` (FastAPI has read it and
    keeps it; it parses it for the route's model)."""
    await _json_body(request)


def idempotency_header(value: str | None, *, required: bool) -> str | None:
    """The ``Idempotency-Key`` header's value, stripped (None when absent or blank).

    Raises:
        IdempotencyKeyMissing: ``required`` and none sent (400).
        IdempotencyKeyInvalid: longer than ``MAX_KEY`` characters, or not visible ASCII
            (a control character or a byte past 0x7E) (400).
    """
    if value is None or not value.strip():
        if required:
            raise IdempotencyKeyMissing("this route requires an Idempotency-Key header")
        return None
    if len(value) > MAX_KEY:
        raise IdempotencyKeyInvalid(f"Idempotency-Key is longer than {MAX_KEY} characters")
    key = value.strip()
    if not all("!" <= ch <= "~" or ch == " " for ch in key):
        # ASGI servers give header bytes as Latin-1: any byte past 0x7E (UTF-8 text) or a
        # control character shows here; a key must read the same in every log and store
        raise IdempotencyKeyInvalid(
            "Idempotency-Key must be visible ASCII (0x21-0x7E, inner spaces allowed)"
        )
    return key


def _same_json(a: Any, b: Any) -> bool:
    """Equal JSON values; unlike ``==``, ``true`` is not ``1`` (while ``1`` is ``1.0``, as
    a store may give a number back either way)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_same_json(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(b, dict | list):
        return False
    return bool(a == b)


#: The ``Idempotency-Key`` header as documented: printable, at most ``MAX_KEY`` characters.
IDEMPOTENCY_KEY_DOC = (
    "Repeats with the same key and body answer the first request. Visible ASCII "
    f"(0x21-0x7E, inner spaces allowed), at most {MAX_KEY} characters, else 400 "
    "`idempotency_key_invalid`; a value of spaces only is no key."
)
#: ``instanceKey`` in a start body (taken out before the flow's input is validated).
INSTANCE_KEY_SCHEMA: dict[str, Any] = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_KEY,
    "pattern": controls_pattern(),
    "description": (
        "A business id unique per flow among its running and suspended instances: a start "
        "with a key that one of them holds answers 409 `instance_key_in_use` (or that "
        "instance, when the Idempotency-Key and body match). No control character. Not "
        "part of the flow's input."
    ),
}
