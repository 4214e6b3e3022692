"""The errors :class:`~flowpark.client.Client` and :class:`~flowpark.client.AsyncClient`
raise: one class per family of the node's problem ``code`` s, each carrying the problem
document (RFC 9457) the node answered.

::

    ClientError                     every error of the client
    ├── TransportError              the node could not be reached, or did not answer in time
    ├── WaitTimeout                 wait() ran out of time; .instance: the last view read
    └── ProblemError                the node answered a problem: .problem, .status, .code
        ├── Unauthorized            401 unauthorized, signature_invalid
        ├── Forbidden               403 forbidden, metrics_forbidden
        ├── NotFound                404 flow_not_found, signal_not_declared, stream_not_declared,
        │   │                           delivery_not_found, not_found; 405 method_not_allowed
        │   └── InstanceNotFound    404 instance_not_found
        ├── Conflict                409 instance_busy, no_budget, delivery_not_failed,
        │   │                           action_in_progress (retried where safe first)
        │   ├── InstanceEnded       409 instance_ended
        │   └── InstanceKeyInUse    409 instance_key_in_use (.problem["instanceId"])
        ├── InvalidRequest          400, 413, 415, 422, 431: input_invalid, idempotency_key_missing,
        │   │                           idempotency_key_invalid, bulk_filter_missing,
        │   │                           body_too_large, unsupported_media_type,
        │   │                           signal_payload_invalid, request_malformed,
        │   │                           headers_too_large
        │   └── IdempotencyKeyReused  422 idempotency_key_reused
        └── ServerError             500 internal_error; 503 store_unavailable, not_ready,
                                        schema_behind_head (retried where safe first)

A code the client does not know (a newer node's) is raised as the family of its status.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ClientError",
    "Conflict",
    "Forbidden",
    "IdempotencyKeyReused",
    "InstanceEnded",
    "InstanceKeyInUse",
    "InstanceNotFound",
    "InvalidRequest",
    "NotFound",
    "Problem",
    "ProblemError",
    "ServerError",
    "TransportError",
    "Unauthorized",
    "WaitTimeout",
    "problem_error",
]


class Problem(BaseModel):
    """An RFC 9457 problem document as the node answers it; fields other than these (such
    as ``instanceId`` or ``missingScope``) are kept as extra fields (``problem["instanceId"]``
    or ``problem.model_extra``).

    Attributes:
        type: ``urn:flowpark:problem:<code>``.
        title: a short summary of the code.
        status: the HTTP status.
        detail: what happened, in a sentence.
        code: the stable error code (see docs/errors.md).
        errors: the field errors of a 422 ``input_invalid`` (``loc``, ``msg``, ``type``).
    """

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str = ""
    status: int = 0
    detail: str = ""
    code: str = ""
    errors: list[dict[str, Any]] | None = None

    def __getitem__(self, name: str) -> Any:
        """An extra field of the problem (e.g. ``instanceId``). Raises KeyError."""
        extra = self.model_extra or {}
        if name in extra:
            return extra[name]
        if name in type(self).model_fields:
            return getattr(self, name)
        raise KeyError(name)


class ClientError(Exception):
    """Base of every error the client raises."""


class TransportError(ClientError):
    """The node could not be reached, the connection broke, or no answer came in time
    (after the retries that were safe). Whether a non-idempotent call took effect is
    unknown: read the instance back, or repeat it with the same idempotency key."""


class WaitTimeout(ClientError):
    """:meth:`~flowpark.client.Client.wait` ran out of time before the instance ended.

    Attributes:
        instance: the last :class:`~flowpark.api.models.InstanceView` read (not ended).
    """

    def __init__(self, message: str, instance: Any) -> None:
        super().__init__(message)
        self.instance = instance


class ProblemError(ClientError):
    """The node answered an error: an ``application/problem+json`` document.

    Attributes:
        problem: the :class:`Problem` document.
        status: its HTTP status.
        code: its stable ``code`` (``instance_not_found``, ...).
    """

    def __init__(self, problem: Problem) -> None:
        fields = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}"
            for e in (problem.errors or [])[:3]
        )
        super().__init__(
            f"{problem.status} {problem.code}: {problem.detail}"
            + (f" ({fields})" if fields else "")
        )
        self.problem = problem
        self.status = problem.status
        self.code = problem.code


class Unauthorized(ProblemError):
    """401: no bearer token, an unknown one, or a signature that does not verify."""


class Forbidden(ProblemError):
    """403: the token lacks the route's scope (``problem["missingScope"]``)."""


class NotFound(ProblemError):
    """404 (or 405): no such flow, signal, stream, delivery or route."""


class InstanceNotFound(NotFound):
    """404 ``instance_not_found``: no instance has the id."""


class Conflict(ProblemError):
    """409: the instance's state does not allow the action now."""


class InstanceEnded(Conflict):
    """409 ``instance_ended``: the instance had already ended."""


class InstanceKeyInUse(Conflict):
    """409 ``instance_key_in_use``: a running instance of the flow holds the instance key
    (``problem["instanceId"]`` names it)."""


class InvalidRequest(ProblemError):
    """400, 413, 415, 422 or 431: the request was refused as it was; nothing was done."""


class IdempotencyKeyReused(InvalidRequest):
    """422 ``idempotency_key_reused``: the key was used with another body or signal."""


class ServerError(ProblemError):
    """500 or 503: the node failed, or cannot serve now (its store, its schema)."""


_BY_CODE: dict[str, type[ProblemError]] = {
    "unauthorized": Unauthorized,
    "signature_invalid": Unauthorized,
    "forbidden": Forbidden,
    "metrics_forbidden": Forbidden,
    "instance_not_found": InstanceNotFound,
    "flow_not_found": NotFound,
    "signal_not_declared": NotFound,
    "stream_not_declared": NotFound,
    "delivery_not_found": NotFound,
    "not_found": NotFound,
    "method_not_allowed": NotFound,
    "instance_ended": InstanceEnded,
    "instance_key_in_use": InstanceKeyInUse,
    "instance_busy": Conflict,
    "action_in_progress": Conflict,
    "no_budget": Conflict,
    "delivery_not_failed": Conflict,
    "idempotency_key_reused": IdempotencyKeyReused,
    "input_invalid": InvalidRequest,
    "signal_payload_invalid": InvalidRequest,
    "idempotency_key_missing": InvalidRequest,
    "idempotency_key_invalid": InvalidRequest,
    "bulk_filter_missing": InvalidRequest,
    "body_too_large": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "request_malformed": InvalidRequest,
    "headers_too_large": InvalidRequest,
    "internal_error": ServerError,
    "store_unavailable": ServerError,
    "not_ready": ServerError,
    "schema_behind_head": ServerError,
}
_BY_STATUS: dict[int, type[ProblemError]] = {
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: NotFound,
    409: Conflict,
}


def problem_error(status: int, body: Any) -> ProblemError:
    """The error for an answer of ``status`` whose JSON body is ``body``.

    Args:
        status: the HTTP status (400 or more).
        body: the decoded JSON body, or None when it was not JSON (a proxy's page).

    Returns:
        The :class:`ProblemError` subclass of the problem's ``code`` (else of ``status``),
        carrying the document (one made of the status when the body was none).
    """
    if isinstance(body, dict):
        try:
            problem = Problem.model_validate(body)
        except ValueError:
            problem = Problem(status=status, code=f"http_{status}", detail=str(body)[:200])
    else:
        problem = Problem(status=status, code=f"http_{status}", detail=str(body or "")[:200])
    if not problem.status:
        problem.status = status
    cls = _BY_CODE.get(problem.code) or _BY_STATUS.get(status)
    if cls is None:
        cls = ServerError if status >= 500 else InvalidRequest
    return cls(problem)
