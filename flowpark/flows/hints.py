"""Hints for a payload that names a field its model does not have: the JSON names a model
takes, and the known name closest to a misnamed one ("did you mean jobId?").

A start's input refuses unknown fields outright (``flowpark.api.starts``); a signal's model
decides itself (by default it ignores them, so that a provider may send more than the flow
reads), and a refused payload's problem then names each unknown field that is close to a
known one, since that is most often why a required field is missing.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError
from pydantic.alias_generators import to_camel

from flowpark.errors import InputInvalid

__all__ = ["closest_name", "invalid_signal_payload", "json_names", "unknown_field_errors"]

#: How alike a misnamed field must be to a known name to be offered (difflib's ratio).
CUTOFF = 0.6


def json_names(model: type[BaseModel]) -> frozenset[str]:
    """The JSON names ``model`` takes: each field's alias (every choice of an
    ``AliasChoices``), else its name."""
    names: set[str] = set()
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias)
        elif isinstance(alias, AliasChoices):
            names.update(c for c in alias.choices if isinstance(c, str))
        else:
            names.add(field.alias or name)
    return frozenset(names)


def closest_name(name: str, known: frozenset[str] | set[str]) -> str | None:
    """The known name ``name`` most likely meant: its camelCase form when known
    (``job_id`` -> ``jobId``), else the closest by spelling, else None."""
    camel = to_camel(name)
    if camel != name and camel in known:
        return camel
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=CUTOFF)
    return close[0] if close else None


def unknown_field_errors(
    model: type[BaseModel], payload: Any, errors: list[Any]
) -> tuple[list[Any], list[str]]:
    """``errors`` (pydantic's, of validating ``payload`` against ``model``) with a hint for
    each field of ``payload`` the model does not know but that is close to a name it does.

    An ``extra_forbidden`` error of such a field gets ``(did you mean jobId?)`` in its
    message; a field the model ignored gets an error of its own, as a start's unknown field
    does (``unknown field (did you mean jobId?)``, type ``extra_forbidden``).

    Returns:
        The errors, and one text per hint (``jbId (did you mean jobId?)``) for the
        problem's detail (empty when there is none).
    """
    if not isinstance(payload, Mapping):
        return errors, []
    known = json_names(model)
    hinted = list(errors)
    texts: list[str] = []
    for key in payload:
        if not isinstance(key, str) or key in known:
            continue
        close = closest_name(key, known)
        if close is None:
            continue
        hint = f"did you mean {close}?"
        texts.append(f"{key[:40]} ({hint})")
        for i, error in enumerate(hinted):
            if isinstance(error, dict) and tuple(error.get("loc", ())) == (key,):
                hinted[i] = {**error, "msg": f"{error.get('msg', 'unknown field')} ({hint})"}
                break
        else:
            hinted.append(
                {"loc": (key,), "msg": f"unknown field ({hint})", "type": "extra_forbidden"}
            )
    return hinted, texts


def invalid_signal_payload(
    model: type[BaseModel], name: str, payload: Any, exc: ValidationError
) -> InputInvalid:
    """The 422 ``input_invalid`` of a payload of signal ``name`` that ``model`` refused:
    pydantic's errors, with a hint for each misnamed field (:func:`unknown_field_errors`),
    which the detail repeats (``payload of signal ocr.completed is invalid: unknown field
    jbId (did you mean jobId?)``)."""
    errors, hints = unknown_field_errors(
        model, payload, exc.errors(include_url=False, include_context=False)
    )
    detail = f"payload of signal {name} is invalid"
    if hints:
        detail += f": unknown field {', '.join(hints[:3])}"
    return InputInvalid(detail, errors=errors, signal=name)
