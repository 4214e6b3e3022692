"""Stream routes: an instance's progress messages as JSON, or as Server-Sent Events.

A stream is best effort, ordered and bounded (``Stream.max_bytes``, summed over the UTF-8
JSON of its messages): a write that would pass the bound is dropped and ``ctx.write``
returns False; nothing else changes. Durable answers (the result, the error, the journal)
are on the instance, never only on a stream.

Each message is ``{"sequence", "stream", "createdAt", "value"}``; ``sequence`` orders the
messages (it grows across all streams, so it has gaps within one) and is the cursor to
resume after: ``?after=`` for JSON, the event ``id`` and ``Last-Event-ID`` for SSE.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from fastapi import APIRouter, Header, Path, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from flowpark.api.deps import EngineDep, ReadToken
from flowpark.api.inputs import JsonBodyRoute, check_instance_id, well_formed
from flowpark.api.models import StreamMessageView
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API, answer_json, stream_view
from flowpark.engine.node.engine import Engine
from flowpark.engine.records import InstanceRecord
from flowpark.errors import ErrorCode, InputInvalid, StreamNotDeclared, shown

__all__ = ["SSE_PING_SECONDS", "STREAM_POLL_SECONDS", "build_streams_router", "sse_messages"]

#: How often an open event stream looks for new messages and for the instance's end.
STREAM_POLL_SECONDS = 0.25
#: Keep-alive comment interval on an idle event stream.
SSE_PING_SECONDS = 15
MAX_SEQUENCE = 2**63 - 1
#: Longest stream name looked up (longer ones are not declared anywhere).
MAX_NAME = 200
EVENT_STREAM = "text/event-stream"


def _cursor(last_event_id: str | None, after: int | None) -> int | None:
    """The sequence to resume after: ``Last-Event-ID`` wins over ``?after=``.

    Raises:
        InputInvalid: ``Last-Event-ID`` is not a sequence (code ``input_invalid``).
    """
    if last_event_id is None or not last_event_id.strip():
        return after
    value = last_event_id.strip()
    # ASCII digits only: str.isdigit() also holds for "²" or "١", which int() refuses
    if not (value.isascii() and value.isdigit()) or int(value) > MAX_SEQUENCE:
        raise InputInvalid(f"Last-Event-ID must be a message sequence, got {shown(value)!r}")
    return int(value)


async def _instance_with_stream(engine: Engine, instance_id: str, name: str) -> InstanceRecord:
    """The instance, once its flow is known to declare stream ``name``.

    Raises:
        InstanceNotFound: no such instance, or an id that cannot name one
            (``instance_not_found``).
        StreamNotDeclared: its flow declares no such stream, or the name cannot be one
            (``stream_not_declared``).
    """
    check_instance_id(instance_id)
    inst = await engine.store.reads.get_instance(instance_id)
    plan = engine.catalog.find(inst.flow_name, inst.flow_version)
    # a flow version this node does not run: its stored messages are served as they are,
    # for any name that could be a stream's (a NUL would break the PostgreSQL query)
    if (plan is not None and name not in plan.streams) or not well_formed(name, MAX_NAME):
        raise StreamNotDeclared(
            f"flow {inst.flow_name}@{inst.flow_version} declares no stream {shown(name)!r}",
            instance_id=instance_id,
            stream=shown(name),
            streams=sorted(plan.streams) if plan is not None else None,
        )
    return inst


async def sse_messages(
    engine: Engine, instance_id: str, name: str, after: int | None
) -> AsyncIterator[ServerSentEvent]:
    """A stream's messages as server-sent events, for the API's stream route and the console.

    Args:
        engine: the node's engine (its journal's reads and streams).
        instance_id: the instance whose stream is read.
        name: the stream's declared name.
        after: the last sequence the reader has (None: from the first message).

    Yields:
        Each message after ``after`` as it is written (``id`` its sequence); once the instance
        has ended and every message was sent, one ``end`` event (``{"instanceId", "state"}``),
        then the iteration ends.
    """
    cursor = after
    while True:
        # read the state first: a message written before the end is then surely read below
        state = (await engine.store.reads.get_instance(instance_id)).state
        for message in await engine.store.streams.read_stream(instance_id, name, after=cursor):
            cursor = message.sequence
            data = json.dumps(answer_json(stream_view(message)))
            yield ServerSentEvent(data=data, id=str(cursor))
        if state.ended:
            yield ServerSentEvent(
                data=json.dumps({"instanceId": instance_id, "state": str(state)}), event="end"
            )
            return
        await asyncio.sleep(STREAM_POLL_SECONDS)


def build_streams_router() -> APIRouter:
    """``GET /api/v1/instances/{instance_id}/streams/{name}`` (bearer token)."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["streams"])

    @router.get(
        "/instances/{instance_id}/streams/{name}",
        operation_id="read_stream",
        response_model=list[StreamMessageView],
        responses={
            200: {
                "description": "The messages (JSON list), or an event stream",
                "content": {
                    EVENT_STREAM: {
                        "schema": {"type": "string"},
                        "example": (
                            'id: 31\ndata: {"sequence": 31, "stream": "JobProgress", '
                            '"createdAt": "2026-12-01T09:30:00Z", "value": {}}\n\n'
                        ),
                    }
                },
            },
            **problem_responses(
                ErrorCode.INSTANCE_NOT_FOUND,
                ErrorCode.STREAM_NOT_DECLARED,
                ErrorCode.INPUT_INVALID,
            ),
        },
    )
    async def read_stream(
        token: ReadToken,
        engine: EngineDep,
        request: Request,
        instance_id: str = Path(description="the instance's id"),
        name: str = Path(description="the stream's name, as the flow declares it"),
        after: int | None = Query(
            None, ge=0, le=MAX_SEQUENCE, description="only messages with a greater sequence"
        ),
        last_event_id: str | None = Header(
            default=None,
            alias="Last-Event-ID",
            description="event streams: resume after this sequence (wins over `after`)",
        ),
    ) -> list[StreamMessageView] | EventSourceResponse:
        """Read stream ``name`` of an instance, in write order.

        With ``Accept: text/event-stream`` the answer is Server-Sent Events: each message
        as an event whose ``id`` is its sequence and whose ``data`` is the message JSON;
        a reconnect with ``Last-Event-ID`` resumes after it. The event stream ends, after
        an ``end`` event (``{"instanceId", "state"}``), once the instance has ended and
        every message was sent. Otherwise a JSON list of every message (after ``after``).

        Streams are best effort and bounded: a write past the stream's ``max_bytes`` is
        dropped (the capability's ``ctx.write`` returns False). 404
        ``instance_not_found`` / ``stream_not_declared`` (not in the flow's
        ``streams=``).
        """
        await _instance_with_stream(engine, instance_id, name)
        accept = request.headers.get("accept")
        if accept is not None and EVENT_STREAM in accept.lower():
            cursor = _cursor(last_event_id, after)
            return EventSourceResponse(
                sse_messages(engine, instance_id, name, cursor), ping=SSE_PING_SECONDS
            )
        messages = await engine.store.streams.read_stream(instance_id, name, after=after)
        return [stream_view(m) for m in messages]

    return router
