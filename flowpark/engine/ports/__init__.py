"""The engine's ports: one narrow protocol per use of storage, and the values they take.

* :class:`RunStore` — a run from its claim to its release; a decision's outcome is one
  :class:`Commit`.
* :class:`Intake` — starts, the sweep's claims, cancel requests, an operator's reopening of
  an ended instance to retry its compensations (:class:`Reopen`).
* :class:`Mailbox` and :class:`Streams` — signals; progress messages.
* :class:`ReadModel`, :class:`OperatorReads`, :class:`OverviewReads` — what the API, the
  operator and the console read.
* :class:`Reviews` — the review queue and people's actions on it.
* :class:`Deliveries` and :class:`Retention` — the outbox's sends; purging ended instances.
* :class:`Journal` — all of them, composed: what a node's wiring builds.

The engine imports these; the store implements them (:class:`flowpark.store.SqlJournal`, and
:class:`flowpark.store.memory.MemoryStore` in memory). No port method takes more than six
parameters: a wider call takes a value.
"""

from flowpark.engine.ports.mailbox import Mailbox, Streams
from flowpark.engine.ports.operator import OperatorReads, OverviewReads
from flowpark.engine.ports.outbox import ClaimedDelivery, Deliveries, Retention
from flowpark.engine.ports.reads import Journal, ReadModel
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
    "Deliveries",
    "Intake",
    "Journal",
    "Mailbox",
    "NewSignal",
    "OperatorReads",
    "OverviewReads",
    "Park",
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
    "StreamWrite",
    "Streams",
    "TryMark",
    "WakeClaim",
]
