"""The API's answer shapes as pydantic models (camelCase JSON), separate from the store's
tables: they are the OpenAPI document's response schemas, each with an example.

The routes return these models (built by :mod:`flowpark.api.views` and its neighbours), and a
route's return annotation is its ``response_model``: the JSON an answer carries and its
OpenAPI schema are one object. A test validates real answers against these models too
(unknown fields refused).
"""

from flowpark.api.models._base import INSTANT_TEXT, JSON_INTEGER, ApiModel
from flowpark.api.models.instances import (
    ActionView,
    AttemptView,
    Awaiting,
    BudgetView,
    CancelAnswer,
    CompensationFailure,
    FailedStep,
    FlowError,
    InstanceView,
    JournalRow,
    LeaseView,
    SignalAnswer,
    SignalView,
    StartAnswer,
    TryError,
    TryView,
)
from flowpark.api.models.operator import (
    BudgetExtension,
    BulkAnswer,
    BulkResult,
    CompensationRetryAnswer,
    CountByState,
    InstanceCounts,
    InstanceList,
    InstanceSummaryView,
    OperatorSignalAnswer,
    RetriedCompensation,
    WaitingView,
    WakeAnswer,
)
from flowpark.api.models.service import (
    DeliveryView,
    EventView,
    FlowView,
    Health,
    PlanView,
    Readiness,
    ReviewView,
    StreamMessageView,
)

__all__ = [
    "ActionView",
    "ApiModel",
    "AttemptView",
    "Awaiting",
    "BudgetExtension",
    "BudgetView",
    "BulkAnswer",
    "BulkResult",
    "CancelAnswer",
    "CompensationFailure",
    "CountByState",
    "DeliveryView",
    "EventView",
    "FailedStep",
    "FlowError",
    "FlowView",
    "Health",
    "INSTANT_TEXT",
    "InstanceCounts",
    "InstanceList",
    "InstanceSummaryView",
    "InstanceView",
    "JSON_INTEGER",
    "JournalRow",
    "LeaseView",
    "OperatorSignalAnswer",
    "PlanView",
    "Readiness",
    "RetriedCompensation",
    "ReviewView",
    "SignalAnswer",
    "SignalView",
    "StartAnswer",
    "StreamMessageView",
    "TryError",
    "TryView",
    "WaitingView",
    "WakeAnswer",
    "CompensationRetryAnswer",
]
