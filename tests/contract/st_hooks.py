"""Schemathesis hooks for the contract run (``tests/contract/schemathesis.toml``).

* A generated ``Idempotency-Key`` is replaced by a fresh one: Schemathesis sends the same
  few keys (``0``, ``00`` ...) with different bodies, which the API rightly answers 422
  ``idempotency_key_reused`` (as the IETF Idempotency-Key draft asks); a fresh key keeps
  "a schema-valid request is accepted" meaningful. An invalid key (blank, too long) is left
  as generated, so its refusal is still tested.
* Four documented refusals of a schema-valid request, each depending on state the request
  cannot carry, are not counted as findings of the "schema-valid data is accepted" check
  (and of no other): 422 ``idempotency_key_reused`` (the key was used before with another
  body: a conflict with earlier requests, which no schema can state); 422 ``input_invalid``
  whose errors are all ``string_unstorable`` (a string holding U+0000 or a lone surrogate,
  which no store can keep: refused in any body, at any depth, where a JSON schema cannot
  say it) or ``invalid cursor`` (a cursor is opaque: only a ``nextCursor`` the API gave out
  is one); and, on the generic signal route only, 422 ``input_invalid`` naming the
  ``signal`` (the payload's schema is the one the instance's flow declares for that name;
  each flow's own signal route states it, and is held to it).
"""

from __future__ import annotations

import uuid
from typing import Any

import schemathesis

MAX_KEY = 200


@schemathesis.hook
def map_headers(context: Any, headers: dict[str, Any] | None) -> dict[str, Any] | None:
    """Give every valid ``Idempotency-Key`` a fresh value."""
    if not headers:
        return headers
    for name in list(headers):
        if name.lower() != "idempotency-key":
            continue
        value = headers[name]
        if isinstance(value, str) and value.strip() and len(value) <= MAX_KEY:
            headers[name] = uuid.uuid4().hex
    return headers


#: The generic signal route: any flow's signal, its payload's schema the instance's.
GENERIC_SIGNAL = "/api/v1/instances/{instance_id}/signals/{name}"


def _documented_refusal(case: Any, response: Any) -> bool:
    if response is None or response.status_code != 422:
        return False
    try:
        body = response.json()
    except Exception:  # not JSON: a finding, kept
        return False
    if not isinstance(body, dict):
        return False
    if body.get("code") == "idempotency_key_reused":
        return True
    path = getattr(getattr(case, "operation", None), "path", None)
    if path == GENERIC_SIGNAL and body.get("code") == "input_invalid" and body.get("signal"):
        return True
    errors = body.get("errors") or []
    if body.get("code") != "input_invalid" or not errors:
        return False
    return all(isinstance(e, dict) and _documented_error(e) for e in errors)


def _documented_error(error: dict[str, Any]) -> bool:
    if error.get("type") == "string_unstorable":
        return True
    # a cursor is opaque: only a `nextCursor` the API gave out is one
    loc = error.get("loc") or []
    return bool(loc) and loc[-1] == "cursor" and error.get("msg") == "invalid cursor"


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a documented refusal of schema-valid data (see above)."""
    return not (getattr(failure, "code", None) == "ST202" and _documented_refusal(case, response))
