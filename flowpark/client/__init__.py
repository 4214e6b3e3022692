"""A typed Python client of a flowpark node's HTTP API: :class:`Client` (blocking) and
:class:`AsyncClient` (asyncio or trio), both on httpx.

Answers are the API's own pydantic models (``flowpark.api.models``: ``StartAnswer``,
``InstanceView``, ``SignalAnswer``, ...); errors are the classes of
:mod:`flowpark.client.errors`, one per family of problem ``code`` s, each carrying the
problem document. Example::

    from flowpark.client import Client

    with Client("http://127.0.0.1:8000", token="dev-token") as client:
        started = client.start("document.process", {"documentId": "inv-42", "pages": 3},
                               idempotency_key="inv-42")
        done = client.wait(started.instance_id, timeout=60)
        print(done.state, done.result)
"""

from flowpark.api.models import (
    BudgetExtension,
    CancelAnswer,
    CompensationRetryAnswer,
    EventView,
    FlowView,
    InstanceList,
    InstanceSummaryView,
    InstanceView,
    SignalAnswer,
    StartAnswer,
    WakeAnswer,
)
from flowpark.client._async import AsyncClient
from flowpark.client._sync import Client
from flowpark.client.errors import (
    ClientError,
    Conflict,
    Forbidden,
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceKeyInUse,
    InstanceNotFound,
    InvalidRequest,
    NotFound,
    Problem,
    ProblemError,
    ServerError,
    TransportError,
    Unauthorized,
    WaitTimeout,
)

__all__ = [
    "AsyncClient",
    "BudgetExtension",
    "CancelAnswer",
    "Client",
    "ClientError",
    "CompensationRetryAnswer",
    "Conflict",
    "EventView",
    "FlowView",
    "Forbidden",
    "IdempotencyKeyReused",
    "InstanceEnded",
    "InstanceKeyInUse",
    "InstanceList",
    "InstanceNotFound",
    "InstanceSummaryView",
    "InstanceView",
    "InvalidRequest",
    "NotFound",
    "Problem",
    "ProblemError",
    "ServerError",
    "SignalAnswer",
    "StartAnswer",
    "TransportError",
    "Unauthorized",
    "WaitTimeout",
    "WakeAnswer",
]
