"""The API's answer shapes as pydantic models (camelCase JSON), separate from the store's
tables: they are the OpenAPI document's response schemas, each with an example.

The routes build their answers with :mod:`app.api.views`; a test validates real answers
against these models (unknown fields refused), so the document and the answers cannot
drift apart.
"""

from app.api.models._base import INSTANT_TEXT, JSON_INTEGER, ApiModel
from app.api.models.instances import (
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
from app.api.models.operator import (
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
from app.api.models.service import (
    DeliveryView,
    EventView,
    FlowView,
    Health,
    PlanView,
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
