"""The engine's ports: one narrow protocol per use of storage, and the values they take.

* :class:`RunStore` — a run from its claim to its release; a decision's outcome is one
  :class:`Commit`.
* :class:`Intake` — starts, the sweep's claims, cancel requests, an operator's reopening of
  an ended instance to retry its compensations (:class:`Reopen`).
* :class:`Mailbox` and :class:`Streams` — signals; progress messages.
* :class:`Correlations` — which live instance holds a provider's id (:class:`Correlation`).
* :class:`ReadModel`, :class:`OperatorReads`, :class:`OverviewReads` — what the API, the
  operator and the console read.
* :class:`Reviews` — the review queue and people's actions on it.
* :class:`Deliveries` and :class:`Retention` — the outbox's sends; purging ended instances.
* :class:`ProviderLimits` — providers' shared limits (a token bucket per provider).
* :class:`Store` — all of them, composed: what a node's wiring builds.

The engine imports these; the store implements them (:class:`flowpark.store.SqlStore`, and
:class:`flowpark.store.memory.MemoryStore` in memory). No port method takes more than six
parameters: a wider call takes a value.
"""

from flowpark.engine.ports.correlations import CorrelationHolder, Correlations
from flowpark.engine.ports.mailbox import Mailbox, Streams
from flowpark.engine.ports.operator import OperatorReads, OverviewReads
from flowpark.engine.ports.outbox import ClaimedDelivery, Deliveries, Retention
from flowpark.engine.ports.providers import (
    Grant,
    GrantRequest,
    LimitChange,
    ProviderLimits,
    ProviderMinute,
    ProviderState,
    PushbackReport,
)
from flowpark.engine.ports.reads import ReadModel, Store
from flowpark.engine.ports.reviews import (
    ReviewAct,
    ReviewFilter,
    ReviewRecord,
    Reviews,
    ReviewState,
    ReviewVerb,
)
from flowpark.engine.ports.run import Intake, RunStore
from flowpark.engine.ports.values import (
    Commit,
    Correlation,
    NewSignal,
    Park,
    Reopen,
    StreamWrite,
    TryMark,
    WakeClaim,
)

__all__ = [
    "ClaimedDelivery",
    "Commit",
    "Correlation",
    "CorrelationHolder",
    "Correlations",
    "Deliveries",
    "Grant",
    "GrantRequest",
    "Intake",
    "LimitChange",
    "Mailbox",
    "NewSignal",
    "OperatorReads",
    "OverviewReads",
    "Park",
    "ProviderLimits",
    "ProviderMinute",
    "ProviderState",
    "PushbackReport",
    "ReadModel",
    "Reopen",
    "Retention",
    "ReviewAct",
    "ReviewFilter",
    "ReviewRecord",
    "ReviewState",
    "ReviewVerb",
    "Reviews",
    "RunStore",
    "Store",
    "StreamWrite",
    "Streams",
    "TryMark",
    "WakeClaim",
]
