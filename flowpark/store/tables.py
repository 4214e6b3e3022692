"""flowpark's tables (SQLModel definitions; table and column names are public).

Every ``*_at`` column is a :class:`~flowpark.store.types.UtcDateTime` (aware UTC in Python).
``flow_instance.id`` and every ``instance_id`` column is an
:class:`~flowpark.store.types.InstanceId` (a canonical UUID string in Python; ``uuid`` on
PostgreSQL, text on SQLite). Signal, event and review ids are text. JSON columns store SQL
NULL for ``None``. Constraint and index names are explicit (migrations and autogenerate agree).
"""

from datetime import datetime
from typing import Any

from pydantic import ConfigDict
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    Identity,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlmodel import Field, SQLModel

from flowpark.store.types import InstanceId, UtcDateTime

__all__ = [
    "ACTIVE_STATES",
    "ConsoleSessionRow",
    "ENDED_WHERE",
    "IDEMPOTENCY_DIGEST_SQL",
    "WAITING_WHERE",
    "FlowActionRow",
    "EventDeliveryRow",
    "FlowHeartbeatRow",
    "FlowInstanceRow",
    "FlowNodeRow",
    "FlowSignalRow",
    "FlowStepRow",
    "FlowStreamRow",
    "OutboxEventRow",
    "ReviewItemRow",
    "SignalDeliveryRow",
    "idempotency_digest_sql",
    "include_in_compare",
    "metadata",
]

#: Instance states that hold an instance key and may be claimed.
ACTIVE_STATES = ("running", "suspended")

#: The partial index of ended instances by state and creation (the operator's list).
ENDED_WHERE = "state IN ('completed', 'failed', 'cancelled')"
#: The partial index of suspended instances waiting for anything but a poll's next attempt.
WAITING_WHERE = "state = 'suspended' AND wake_kind <> 'poll'"

metadata = SQLModel.metadata

#: Every table's pydantic config. The store uses the tables' Core ``__table__`` only, so
#: their validators and serializers are built on first use (``defer_build``), not at import.
#: No ``from __future__ import annotations``: pydantic and SQLAlchemy's declarative scan
#: would each evaluate every annotation string again (a quarter of this module's ~0.1 s).
_TABLE: Any = ConfigDict(defer_build=True)  # SQLModel types it as its own TypedDict


def idempotency_digest_sql(flow_name: str, key: str) -> str:
    """PostgreSQL SQL for the digest that keys a start's idempotency key: the first 16
    bytes of SHA-256 over ``flow_name``, a line feed and ``key`` (the texts' bytes in the
    database's encoding), as a ``uuid``.

    ``flow_name`` and ``key`` are SQL expressions of type text (columns or casts of bound
    parameters). Every function used is IMMUTABLE, as an index expression must be; the
    bytes are taken through ``bytea``'s escape input with backslashes doubled (a text cast
    to ``bytea`` reads backslash escapes). A digest is 16 bytes in each index entry instead
    of the two texts (68 instead of 138 bytes per parked instance at n=100,000,
    see BENCHMARKS.md); a repeat is still confirmed on the stored texts.
    """
    joined = f"{flow_name} || chr(10) || {key}"
    return (
        f"(encode(substr(sha256(replace({joined}, chr(92), chr(92) || chr(92))::bytea), "
        "1, 16), 'hex')::uuid)"
    )


#: The idempotency index's expression on PostgreSQL (see :func:`idempotency_digest_sql`).
IDEMPOTENCY_DIGEST_SQL = idempotency_digest_sql("flow_name", "idempotency_key")


def include_in_compare(dialect: str) -> Any:
    """An Alembic ``include_object`` hook for comparing the models with a ``dialect``
    database: an index declared for one dialect only (``info["dialect"]``) is left out on
    the others, and an expression index is left out of the comparison (PostgreSQL spells
    the expression back in its own normal form; tests check its definition instead).
    """
    expression_names = {
        ix.name
        for table in metadata.tables.values()
        for ix in table.indexes
        if ix.info.get("expression") and ix.info.get("dialect") in (None, dialect)
    }

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ != "index":
            return True
        if not reflected and obj.info.get("dialect") not in (None, dialect):
            return False
        return name not in expression_names

    return include


# A 64-bit sequence that is still SQLite's INTEGER PRIMARY KEY (rowid alias, autoincrement).
Sequence64 = BigInteger().with_variant(Integer(), "sqlite")


def _json(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, JSON(none_as_null=True), nullable=nullable))


def _instant(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, UtcDateTime(), nullable=nullable))


def _str(name: str, *, nullable: bool = True, primary_key: bool = False) -> Any:
    column = Column(name, String(), nullable=nullable, primary_key=primary_key)
    return Field(default=None, sa_column=column)


def _instance_id(name: str, *, primary_key: bool = False) -> Any:
    column: Column[str] = Column(name, InstanceId(), nullable=False, primary_key=primary_key)
    return Field(default=None, sa_column=column)


def _int(name: str, *, nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(name, Integer(), nullable=nullable))


def _sequence() -> Any:
    column = Column("sequence", Sequence64, primary_key=True, autoincrement=True)
    return Field(default=None, sa_column=column)


class FlowInstanceRow(SQLModel, table=True):
    """``flow_instance``: one row per instance (see ``InstanceRecord`` for the meaning)."""

    model_config = _TABLE
    __tablename__ = "flow_instance"
    __table_args__ = (
        Index(
            "ix_flow_instance_wake_suspended",
            "wake_at",
            sqlite_where=text("state = 'suspended'"),
            postgresql_where=text("state = 'suspended'"),
        ),
        # Running instances are the few in flight: found through this index and filtered
        # by lease expiry, which is not indexed, so a lease renewal changes no indexed
        # column (a HOT update on PostgreSQL). Its one key value lets PostgreSQL keep the
        # entries as one posting list (~7 bytes each instead of ~28 for an id): every
        # start leaves one, dead once it parks, until vacuum (migration 0007).
        Index(
            "ix_flow_instance_lease_running",
            "state",
            sqlite_where=text("state = 'running'"),
            postgresql_where=text("state = 'running'"),
        ),
        Index(
            "uq_flow_instance_active_key",
            "flow_name",
            "instance_key",
            unique=True,
            sqlite_where=text("instance_key IS NOT NULL AND state IN ('running', 'suspended')"),
            postgresql_where=text("instance_key IS NOT NULL AND state IN ('running', 'suspended')"),
        ),
        # a start's idempotency key: a repeat is a conflict of the start's one INSERT.
        # PostgreSQL keys it by a 16-byte digest of (flow_name, key), SQLite by the two
        # texts (one name, one rule; see IDEMPOTENCY_DIGEST_SQL)
        Index(
            "uq_flow_instance_idempotency",
            text(IDEMPOTENCY_DIGEST_SQL),
            unique=True,
            postgresql_where=text("idempotency_key IS NOT NULL"),
            info={"dialect": "postgresql", "expression": True},
        ).ddl_if(dialect="postgresql"),
        Index(
            "uq_flow_instance_idempotency",
            "flow_name",
            "idempotency_key",
            unique=True,
            sqlite_where=text("idempotency_key IS NOT NULL"),
            info={"dialect": "sqlite"},
        ).ddl_if(dialect="sqlite"),
        # The operator's list (newest first, keyset on (created_at, id)), sized for what
        # it costs a parked instance (migration 0012): the (created_at, id) index serves
        # every filter that selects many rows (scanned backwards, filtered); a flow by the
        # deduplicated flow name; the ended states, the waits other than a poll's, error
        # codes and instance keys by partial indexes a parked poll adds no entry to.
        Index("ix_flow_instance_created", "created_at", "id"),
        Index("ix_flow_instance_flow", "flow_name"),
        Index(
            "ix_flow_instance_ended_created",
            "state",
            "created_at",
            "id",
            sqlite_where=text(ENDED_WHERE),
            postgresql_where=text(ENDED_WHERE),
        ),
        Index(
            "ix_flow_instance_waiting_created",
            "wake_kind",
            "created_at",
            "id",
            sqlite_where=text(WAITING_WHERE),
            postgresql_where=text(WAITING_WHERE),
        ),
        Index(
            "ix_flow_instance_error_created",
            "error_code",
            "created_at",
            "id",
            sqlite_where=text("error_code IS NOT NULL"),
            postgresql_where=text("error_code IS NOT NULL"),
        ),
        # instances whose compensation failed for good (migration 0019): only they have
        # an entry
        Index(
            "ix_flow_instance_compensation_failed_created",
            "created_at",
            "id",
            sqlite_where=text("compensation_failed"),
            postgresql_where=text("compensation_failed"),
        ),
        Index(
            "ix_flow_instance_key_created",
            "instance_key",
            "created_at",
            "id",
            sqlite_where=text("instance_key IS NOT NULL"),
            postgresql_where=text("instance_key IS NOT NULL"),
        ),
    )

    id: str = _instance_id("id", primary_key=True)
    flow_name: str = _str("flow_name", nullable=False)
    flow_version: str = _str("flow_version", nullable=False)
    state: str = _str("state", nullable=False)
    input: dict[str, Any] | None = _json("input")
    created_at: datetime = _instant("created_at", nullable=False)
    updated_at: datetime = _instant("updated_at", nullable=False)
    deadline_at: datetime | None = _instant("deadline_at")
    wake_at: datetime | None = _instant("wake_at")
    wake_step_id: int | None = _int("wake_step_id")
    wake_scope: int | None = _int("wake_scope")
    wake_kind: str | None = _str("wake_kind")
    lease_owner: str | None = _str("lease_owner")
    lease_expires_at: datetime | None = _instant("lease_expires_at")
    fencing_token: int = Field(
        default=0,
        sa_column=Column(
            "fencing_token", BigInteger(), nullable=False, default=0, server_default=text("0")
        ),
    )
    ending: str | None = _str("ending")
    cancel_requested: bool = Field(
        default=False,
        sa_column=Column(
            "cancel_requested", Boolean(), nullable=False, default=False, server_default=false()
        ),
    )
    result: Any = _json("result")
    error_code: str | None = _str("error_code")
    error_message: str | None = Field(default=None, sa_column=Column("error_message", Text()))
    error_details: dict[str, Any] | None = _json("error_details")
    # ended with a compensation that failed for good (listed in error_details)
    compensation_failed: bool = Field(
        default=False,
        sa_column=Column(
            "compensation_failed",
            Boolean(),
            nullable=False,
            default=False,
            server_default=false(),
        ),
    )
    instance_key: str | None = _str("instance_key")
    try_step_id: int | None = _int("try_step_id")
    try_scope: int | None = _int("try_scope")
    try_number: int | None = _int("try_number")
    try_started_at: datetime | None = _instant("try_started_at")
    heartbeat_at: datetime | None = _instant("heartbeat_at")
    heartbeat_value: Any = _json("heartbeat_value")
    # the request of a start with this key is the row's input and instance_key
    idempotency_key: str | None = _str("idempotency_key")
    # the start's W3C trace context; the deadlines stored with it (flowpark.store.carried)
    trace_context: dict[str, Any] | None = _json("trace_context")
    carried: list[Any] | None = _json("carried")


class FlowStepRow(SQLModel, table=True):
    """``flow_step``: the append-only journal (see ``StepRow``).

    Keyed by the execution's name ``(instance_id, step_id, scope, kind, try_number)``: one
    row per execution, and the key serves every read (an instance's rows, then ordered by
    ``sequence``). A deadline row keeps its end in ``ends_at``, or goes inside the row
    written with it (``carried``); a row that puts no values has ``values`` NULL
    (:func:`flowpark.store.mapping.step_values`). ``sequence`` is the commit order, no
    index of its own: an identity column on PostgreSQL; on SQLite the store writes the
    next rowid into it (``max(rowid) + 1`` in the file's one write transaction).
    """

    model_config = _TABLE
    __tablename__ = "flow_step"
    __table_args__ = (
        PrimaryKeyConstraint(
            "instance_id", "step_id", "scope", "kind", "try_number", name="pk_flow_step"
        ),
    )

    sequence: int | None = Field(
        default=None,
        sa_column=Column("sequence", Sequence64, Identity(), nullable=False),
    )
    instance_id: str = _instance_id("instance_id")
    step_id: int = _int("step_id", nullable=False)
    scope: int = _int("scope", nullable=False)
    kind: str = _str("kind", nullable=False)
    capability_id: str = _str("capability_id", nullable=False)
    outcome: str = _str("outcome", nullable=False)
    try_number: int = _int("try_number", nullable=False)
    step_values: dict[str, Any] | None = _json("values")
    error_type: str | None = _str("error_type")
    error_detail: str | None = Field(default=None, sa_column=Column("error_detail", Text()))
    final: bool = Field(
        default=False,
        sa_column=Column("final", Boolean(), nullable=False, default=False, server_default=false()),
    )
    next_try_at: datetime | None = _instant("next_try_at")
    started_at: datetime = _instant("started_at", nullable=False)
    committed_at: datetime = _instant("committed_at", nullable=False)
    # a deadline row's end (``values`` then NULL; 0019); the deadlines written with a row
    ends_at: datetime | None = _instant("ends_at")
    carried: list[Any] | None = _json("carried")
    deferred_until: datetime | None = _instant("deferred_until")  # its provider's deferral
    deferred_by: str | None = _str("deferred_by")  # (0025): its last wake, and why


class FlowSignalRow(SQLModel, table=True):
    """``flow_signal``: delivered signals; ``sequence`` is the arrival order."""

    model_config = _TABLE
    __tablename__ = "flow_signal"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_signal_id"),
        UniqueConstraint("instance_id", "idempotency_key", name="uq_flow_signal_idempotency"),
        Index("ix_flow_signal_instance_id", "instance_id"),
    )

    sequence: int | None = _sequence()
    id: str = _str("id", nullable=False)
    instance_id: str = _instance_id("instance_id")
    name: str = _str("name", nullable=False)
    payload: dict[str, Any] | None = _json("payload")
    idempotency_key: str | None = _str("idempotency_key")
    received_at: datetime = _instant("received_at", nullable=False)
    taken_at: datetime | None = _instant("taken_at")
    taken_step_id: int | None = _int("taken_step_id")
    # false: the wait at ``taken_step_id`` refused it (its match did not hold); else null
    matched: bool | None = Field(default=None, sa_column=Column("matched", Boolean()))
    # set when the instance ended while the signal waited untaken: it will never be taken
    discarded_at: datetime | None = _instant("discarded_at")
    discarded_reason: str | None = _str("discarded_reason")


class SignalDeliveryRow(SQLModel, table=True):
    """``signal_delivery``: the instance a signed signal's delivery id reached first; the
    id is unique per flow and signal across instances (a replay elsewhere is refused)."""

    model_config = _TABLE
    __tablename__ = "signal_delivery"
    __table_args__ = (Index("ix_signal_delivery_instance", "instance_id"),)

    flow_name: str = _str("flow_name", nullable=False, primary_key=True)
    signal_name: str = _str("signal_name", nullable=False, primary_key=True)
    delivery_id: str = _str("delivery_id", nullable=False, primary_key=True)
    instance_id: str = _instance_id("instance_id")
    received_at: datetime = _instant("received_at", nullable=False)


class ConsoleSessionRow(SQLModel, table=True):
    """``console_session``: one console sign-in. It opens the console while not ended
    (sign-out), seen within the idle timeout, and its token (by fingerprint) configured."""

    model_config = _TABLE
    __tablename__ = "console_session"
    __table_args__ = (Index("ix_console_session_last_seen", "last_seen_at"),)

    id: str = _str("id", nullable=False, primary_key=True)
    token_fingerprint: str = _str("token_fingerprint", nullable=False)
    created_at: datetime = _instant("created_at", nullable=False)
    last_seen_at: datetime = _instant("last_seen_at", nullable=False)
    ended_at: datetime | None = _instant("ended_at")


class OutboxEventRow(SQLModel, table=True):
    """``outbox_event``: domain events written by emit steps, for a publisher to relay."""

    model_config = _TABLE
    __tablename__ = "outbox_event"
    __table_args__ = (
        UniqueConstraint("id", name="uq_outbox_event_id"),
        # events not yet relayed to the subscribers' deliveries (``published_at`` null)
        Index(
            "ix_outbox_event_unpublished",
            "sequence",
            sqlite_where=text("published_at IS NULL"),
            postgresql_where=text("published_at IS NULL"),
        ),
        Index("ix_outbox_event_instance", "instance_id"),
    )

    sequence: int | None = _sequence()
    id: str = _str("id", nullable=False)
    instance_id: str = _instance_id("instance_id")
    name: str = _str("name", nullable=False)
    payload: dict[str, Any] | None = _json("payload")
    created_at: datetime = _instant("created_at", nullable=False)
    published_at: datetime | None = _instant("published_at")


class EventDeliveryRow(SQLModel, table=True):
    """``event_delivery``: one outbox event's delivery to one subscriber.

    ``state`` is ``pending`` (due at ``next_try_at``), ``delivered`` or ``failed`` (its
    tries ran out). A node holds a pending delivery while it sends it (``claimed_by``,
    until ``claimed_until``). ``event_sequence`` orders an instance's events: a delivery is
    sent only once no earlier event of its instance is pending for the same subscriber.
    """

    model_config = _TABLE
    __tablename__ = "event_delivery"
    __table_args__ = (
        UniqueConstraint("subscriber", "event_id", name="uq_event_delivery_event"),
        Index(
            "ix_event_delivery_due",
            "next_try_at",
            sqlite_where=text("state = 'pending'"),
            postgresql_where=text("state = 'pending'"),
        ),
        Index("ix_event_delivery_instance", "instance_id", "subscriber", "event_sequence"),
        Index("ix_event_delivery_state", "state", "sequence"),
    )

    sequence: int | None = _sequence()
    event_id: str = _str("event_id", nullable=False)
    event_sequence: int = Field(
        default=None, sa_column=Column("event_sequence", BigInteger(), nullable=False)
    )
    instance_id: str = _instance_id("instance_id")
    subscriber: str = _str("subscriber", nullable=False)
    state: str = _str("state", nullable=False)
    tries: int = Field(
        default=0,
        sa_column=Column("tries", Integer(), nullable=False, server_default=text("0")),
    )
    next_try_at: datetime | None = _instant("next_try_at")
    last_error: str | None = Field(default=None, sa_column=Column("last_error", Text()))
    last_status: int | None = _int("last_status")
    delivered_at: datetime | None = _instant("delivered_at")
    claimed_by: str | None = _str("claimed_by")
    claimed_until: datetime | None = _instant("claimed_until")
    created_at: datetime = _instant("created_at", nullable=False)


class ReviewItemRow(SQLModel, table=True):
    """``review_item``: the human review queue; ``state`` is ``open``, ``claimed``,
    ``resolved`` or ``dismissed``, with who claimed and who closed an item, and when."""

    model_config = _TABLE
    __tablename__ = "review_item"
    __table_args__ = (
        UniqueConstraint("id", name="uq_review_item_id"),
        Index("ix_review_item_instance", "instance_id"),
        Index("ix_review_item_state", "state", "sequence"),
    )

    sequence: int | None = _sequence()
    id: str = _str("id", nullable=False)
    instance_id: str = _instance_id("instance_id")
    subject: str = _str("subject", nullable=False)
    reason: str = Field(default=None, sa_column=Column("reason", Text(), nullable=False))
    details: dict[str, Any] | None = _json("details")
    created_at: datetime = _instant("created_at", nullable=False)
    state: str = Field(
        default="open",
        sa_column=Column("state", String(), nullable=False, server_default=text("'open'")),
    )
    claimed_by: str | None = _str("claimed_by")
    claimed_at: datetime | None = _instant("claimed_at")
    closed_by: str | None = _str("closed_by")
    closed_at: datetime | None = _instant("closed_at")
    note: str | None = Field(default=None, sa_column=Column("note", Text()))


class FlowHeartbeatRow(SQLModel, table=True):
    """``flow_heartbeat``: the latest checkpoint of each (instance, step, scope)."""

    model_config = _TABLE
    __tablename__ = "flow_heartbeat"
    __table_args__ = (
        PrimaryKeyConstraint("instance_id", "step_id", "scope", name="pk_flow_heartbeat"),
    )

    instance_id: str = _instance_id("instance_id")
    step_id: int = _int("step_id", nullable=False)
    scope: int = _int("scope", nullable=False)
    try_number: int = _int("try_number", nullable=False)
    value: Any = _json("value")
    recorded_at: datetime = _instant("recorded_at", nullable=False)


class FlowActionRow(SQLModel, table=True):
    """``flow_action``: operator actions (wake, extend budget, cancel) in an instance's
    history, with the acting token's name and the engine-clock instant; a repeat of an
    action's ``Idempotency-Key`` on the same instance finds the first."""

    model_config = _TABLE
    __tablename__ = "flow_action"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_action_id"),
        UniqueConstraint(
            "instance_id", "action", "idempotency_key", name="uq_flow_action_idempotency"
        ),
        Index("ix_flow_action_instance", "instance_id", "sequence"),
    )

    sequence: int | None = _sequence()
    id: str = _str("id", nullable=False)
    instance_id: str = _instance_id("instance_id")
    action: str = _str("action", nullable=False)
    actor: str = _str("actor", nullable=False)
    acted_at: datetime = _instant("acted_at", nullable=False)
    details: dict[str, Any] | None = _json("details")
    idempotency_key: str | None = _str("idempotency_key")


class FlowStreamRow(SQLModel, table=True):
    """``flow_stream``: best-effort, size-bounded progress messages."""

    model_config = _TABLE
    __tablename__ = "flow_stream"
    __table_args__ = (Index("ix_flow_stream_read", "instance_id", "stream", "sequence"),)

    sequence: int | None = _sequence()
    instance_id: str = _instance_id("instance_id")
    stream: str = _str("stream", nullable=False)
    payload: Any = _json("payload")
    size: int = _int("size", nullable=False)
    created_at: datetime = _instant("created_at", nullable=False)


class FlowNodeRow(SQLModel, table=True):
    """``flow_node``: one liveness row per node process, written by the node itself every
    beat (``beat_seconds``): what it is and serves, and how its sweep went. A row not
    written for three beats, or marked ``stopped_at``, is a node that is not live."""

    model_config = _TABLE
    __tablename__ = "flow_node"

    id: str = _str("id", nullable=False, primary_key=True)
    role: str = _str("role", nullable=False)
    version: str = _str("version", nullable=False)
    flows: list[str] | None = _json("flows")
    sweeps: bool = Field(
        default=False,
        sa_column=Column(
            "sweeps", Boolean(), nullable=False, default=False, server_default=false()
        ),
    )
    beat_seconds: float = Field(
        default=10.0, sa_column=Column("beat_seconds", Float(), nullable=False)
    )
    started_at: datetime = _instant("started_at", nullable=False)
    seen_at: datetime = _instant("seen_at", nullable=False)
    stopped_at: datetime | None = _instant("stopped_at")
    last_sweep_at: datetime | None = _instant("last_sweep_at")
    last_claimed: int | None = _int("last_claimed")


# the providers' tables (limits, tallies, correlation keys) register on the same metadata
from flowpark.store.provider_tables import PROVIDER as _PROVIDER  # noqa: E402,F401
