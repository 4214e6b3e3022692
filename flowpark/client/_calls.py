"""What the sync and the async client share, free of I/O: each API call as a
:class:`Call` value (method, path, query, body, headers, whether repeating it is safe, the
answer's model), how an answer is read, the retry and wait schedules, and the few lines of
an event stream a wait needs."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from flowpark.api.models import (
    EventView,
    FlowView,
    InstanceList,
    InstanceView,
    SignalAnswer,
    StartAnswer,
)
from flowpark.client.errors import NotFound, Problem, problem_error

__all__ = [
    "API",
    "ENDED",
    "Call",
    "Requests",
    "SseEvent",
    "SseLines",
    "list_query",
    "read_answer",
    "retry_delay",
    "route_of",
    "seconds",
    "stream_of",
    "wait_delay",
]

API = "/api/v1"
ENDED = frozenset({"completed", "failed", "cancelled"})
#: statuses that say "not now" without having done anything: worth a retry where safe
RETRY_STATUSES = frozenset({502, 503, 504})
#: methods that change nothing on the node
SAFE_METHODS = frozenset({"GET", "HEAD"})

M = TypeVar("M", bound=BaseModel)


def path_segment(value: str) -> str:
    """``value`` quoted as one path segment (an id or a name never spans segments)."""
    return quote(value, safe="")


@dataclass(frozen=True)
class Call(Generic[M]):
    """One request of the API and how its answer is read.

    Attributes:
        method: HTTP method.
        path: path under the base URL, e.g. ``/api/v1/instances/<id>``.
        model: the answer's model (the API's own, from ``flowpark.api.models``); None: the
            answer's JSON as it is (:meth:`Requests.any`).
        params: query parameters (lists repeat the parameter).
        body: the JSON body, or None for none.
        headers: extra headers (``Idempotency-Key``).
        safe: repeating the request changes nothing (a read, or a write with an
            idempotency key): it is retried after a transport error, a 502/503/504, or a
            409 ``action_in_progress``.
        many: the answer is a JSON list of ``model``.
    """

    method: str
    path: str
    model: type[M] | None
    params: Mapping[str, Any] | None = None
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    safe: bool = False
    many: bool = False

    def request_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``httpx.Client.request`` for this call."""
        kwargs: dict[str, Any] = {"headers": dict(self.headers)}
        if self.params:
            kwargs["params"] = {k: v for k, v in self.params.items() if v is not None}
        if self.body is not None:
            kwargs["content"] = json.dumps(self.body).encode()
            kwargs["headers"]["Content-Type"] = "application/json"
        return kwargs


#: The node's bound on an ``Idempotency-Key`` (characters).
MAX_KEY = 200


def key_header(key: str | None) -> dict[str, str]:
    """``{"Idempotency-Key": key}``, or none.

    Raises:
        ValueError: ``key`` is not what the node keys a write by (1 to ``MAX_KEY``
            characters of visible ASCII, inner spaces allowed): checked before anything is
            sent, as a blank key would be retried as keyed while the node takes it as none.
    """
    if key is None:
        return {}
    if (
        not isinstance(key, str)
        or not key.strip()
        or len(key) > MAX_KEY
        or not all("!" <= ch <= "~" or ch == " " for ch in key.strip())
    ):
        raise ValueError(
            f"idempotency_key must be 1 to {MAX_KEY} characters of visible ASCII"
            " (0x21-0x7E, inner spaces allowed)"
        )
    return {"Idempotency-Key": key}


def read_answer(call: Call[M], response: httpx.Response) -> Any:
    """The answer of ``call``: its model (or a list of it) for a 2xx answer.

    Raises:
        ProblemError: the subclass of the problem's code, for a 4xx or 5xx answer.
    """
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = response.text
        raise problem_error(response.status_code, body)
    if call.model is None:
        return response.json() if response.content else None
    data = response.json()
    if call.many:
        return [call.model.model_validate(item) for item in data]
    return call.model.model_validate(data)


def retryable(call: Call[Any], response: httpx.Response | None) -> bool:
    """Whether ``call`` may be sent again after ``response`` (None: a transport error):
    a safe call after a transport error, a 502/503/504, or a 409 ``action_in_progress``
    (the first request with its key still acts)."""
    if not call.safe:
        return False
    if response is None or response.status_code in RETRY_STATUSES:
        return True
    return response.status_code == 409 and _code(response) == "action_in_progress"


def _code(response: httpx.Response) -> str | None:
    """The problem ``code`` of an answer, if it is a problem document."""
    try:
        body = response.json()
    except ValueError:
        return None
    code = body.get("code") if isinstance(body, dict) else None
    return code if isinstance(code, str) else None


def retry_delay(retry: int, response: httpx.Response | None) -> float:
    """Seconds before retry number ``retry`` (1-based): the answer's ``Retry-After`` when
    it gives seconds, else 0.1 s doubled per retry up to 2 s, jittered (half to all)."""
    if response is not None:
        after = response.headers.get("retry-after", "")
        if after.isdigit():
            return float(after)
    base = min(2.0, 0.1 * 2 ** (retry - 1))
    return float(base * random.uniform(0.5, 1.0))


def wait_delay(read: int) -> float:
    """Seconds between the reads of a wait without a stream: 0.05 s doubled per read up
    to 2 s, jittered (three quarters to all)."""
    return float(min(2.0, 0.05 * 2 ** min(read, 10)) * random.uniform(0.75, 1.0))


def seconds(value: float | timedelta) -> float:
    """``value`` in seconds (a ``timedelta`` or a number of seconds)."""
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _instant(value: datetime | str | None) -> str | None:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("an instant must be timezone-aware (e.g. datetime.now(UTC))")
        return value.isoformat()
    return value


def list_query(
    *,
    flow: str | None,
    version: str | None,
    state: str | Iterable[str] | None,
    overdue: float | timedelta | None,
    stuck: bool | None,
    error_code: str | None,
    waiting: str | None,
    instance_key: str | None,
    created_after: datetime | str | None,
    created_before: datetime | str | None,
    limit: int,
) -> dict[str, Any]:
    """The instance list's query parameters (camelCase, Nones dropped).

    Raises:
        ValueError: a naive ``created_after`` or ``created_before``.
    """
    states = [state] if isinstance(state, str) else list(state) if state is not None else None
    query: dict[str, Any] = {
        "flow": flow,
        "version": version,
        "state": [str(s) for s in states] if states else None,
        "overdue": seconds(overdue) if overdue is not None else None,
        "stuck": "true" if stuck else None,
        "errorCode": error_code,
        "waiting": waiting,
        "instanceKey": instance_key,
        "createdAfter": _instant(created_after),
        "createdBefore": _instant(created_before),
        "limit": limit,
    }
    return {k: v for k, v in query.items() if v is not None}


def payload_json(value: Any) -> Any:
    """A body as JSON: a pydantic model by its aliases, anything else as it is."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    return {} if value is None else value


@dataclass
class SseEvent:
    """One event of an event stream: its ``event`` name (``message`` by default), ``id``
    and ``data`` lines joined."""

    event: str = "message"
    id: str | None = None
    data: str = ""


class SseLines:
    """Events from the lines of a ``text/event-stream`` answer, one line at a time, so a
    wait can look at its clock on every line (the node's keep-alive comments too).

    Only what a wait reads: ``event``, ``id`` and ``data`` fields; comments and other
    fields are skipped (the WHATWG event-stream format).
    """

    def __init__(self) -> None:
        self._event = SseEvent()
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        """Take one line (without its end); return the event a blank line completes."""
        line = line.rstrip("\r\n")
        if not line:
            if not self._data and self._event.event == "message":
                self._event = SseEvent()
                return None
            event, self._event = self._event, SseEvent()
            event.data, self._data = "\n".join(self._data), []
            return event
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event.event = value
        elif name == "id":
            self._event.id = value
        elif name == "data":
            self._data.append(value)
        return None


class Requests:
    """The API's calls as :class:`Call` values (the clients send them)."""

    @staticmethod
    def flows() -> Call[FlowView]:
        """``GET /api/v1/flows``."""
        return Call("GET", f"{API}/flows", FlowView, safe=True, many=True)

    @staticmethod
    def start(
        route: str, input: Any, idempotency_key: str | None, instance_key: str | None
    ) -> Call[StartAnswer]:
        """A start on the flow's route; safe to repeat only with an idempotency key."""
        body = payload_json(input)
        if instance_key is not None:
            if not isinstance(body, dict):
                raise TypeError("an instance_key needs an input that is a JSON object")
            body = {**body, "instanceKey": instance_key}
        return Call(
            "POST",
            route,
            StartAnswer,
            body=body,
            headers=key_header(idempotency_key),
            safe=idempotency_key is not None,
        )

    @staticmethod
    def get(instance_id: str) -> Call[InstanceView]:
        """``GET /api/v1/instances/{id}``."""
        return Call("GET", f"{API}/instances/{path_segment(instance_id)}", InstanceView, safe=True)

    @staticmethod
    def signal(
        instance_id: str, name: str, payload: Any, idempotency_key: str | None
    ) -> Call[SignalAnswer]:
        """``POST /api/v1/instances/{id}/signals/{name}``."""
        return Call(
            "POST",
            f"{API}/instances/{path_segment(instance_id)}/signals/{path_segment(name)}",
            SignalAnswer,
            body=payload_json(payload),
            headers=key_header(idempotency_key),
            safe=idempotency_key is not None,
        )

    @staticmethod
    def action(
        instance_id: str, action: str, model: type[M], key: str | None, body: Any = None
    ) -> Call[M]:
        """``POST /api/v1/instances/{id}/{wake|cancel|budget}``."""
        return Call(
            "POST",
            f"{API}/instances/{path_segment(instance_id)}/{action}",
            model,
            body=body,
            headers=key_header(key),
            safe=key is not None,
        )

    @staticmethod
    def page(query: Mapping[str, Any], cursor: str | None) -> Call[InstanceList]:
        """One page of ``GET /api/v1/instances``."""
        params = {**query, "cursor": cursor} if cursor else dict(query)
        return Call("GET", f"{API}/instances", InstanceList, params=params, safe=True)

    @staticmethod
    def events(after: int | None, limit: int) -> Call[EventView]:
        """One page of ``GET /api/v1/events``."""
        params = {"after": after, "limit": limit}
        return Call("GET", f"{API}/events", EventView, params=params, safe=True, many=True)

    @staticmethod
    def any(
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: Any,
        idempotency_key: str | None,
    ) -> Call[Any]:
        """Any request of the API, answered as its JSON; safe to repeat when it reads
        (``GET``, ``HEAD``) or carries an idempotency key."""
        method = method.upper()
        return Call(
            method,
            path,
            None,
            params=params,
            body=body,
            headers=key_header(idempotency_key),
            safe=method in SAFE_METHODS or idempotency_key is not None,
        )

    @staticmethod
    def stream_path(instance_id: str, name: str) -> str:
        """The path of an instance's stream."""
        return f"{API}/instances/{path_segment(instance_id)}/streams/{path_segment(name)}"


def stream_of(flows: list[FlowView], flow: str, version: str) -> str | None:
    """The first stream the instance's flow version declares, if this node serves it."""
    for view in flows:
        if view.name == flow and view.version == version and view.served and view.streams:
            return view.streams[0]
    return None


def route_of(flows: list[FlowView], flow: str) -> str:
    """The start route of the newest served version of ``flow`` (``/api/...`` as is).

    Raises:
        NotFound: ``flow_not_found``: no served version of ``flow`` has a route.
    """
    if flow.startswith("/"):
        return flow
    routes = [(v.version, v.route) for v in flows if v.name == flow and v.served and v.route]
    if not routes:
        raise NotFound(
            Problem(
                status=404,
                code="flow_not_found",
                detail=f"the node serves no flow {flow!r} with an HTTP trigger",
            )
        )
    return max(routes, key=lambda r: _version_key(r[0]))[1]


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in version.split("."))
