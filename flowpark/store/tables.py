"""flowpark's tables (SQLModel definitions; table and column names are public).

Every ``*_at`` column is a :class:`~flowpark.store.types.UtcDateTime` (aware UTC in Python).
``flow_instance.id`` and every ``instance_id`` column is an
:class:`~flowpark.store.types.InstanceId` (a canonical UUID string in Python; ``uuid`` on
PostgreSQL, text on SQLite). Signal, event and review ids are text. JSON columns store SQL
NULL for ``None``. Constraint and index names are explicit (migrations and autogenerate agree).
Every table is named ``flow_*`` and every index and constraint after its table: they share
a database (and a PostgreSQL schema's namespace) with an application's own.
"""

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Identity,
    Index,
    PrimaryKeyConstraint,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlmodel import Field

from flowpark.store.table_base import (
    TABLE_CONFIG,
    FlowparkTable,
    Sequence64,
    flag_field,
    instance_id_field,
    instant_field,
    int_field,
    json_field,
    metadata,
    sequence_field,
    str_field,
)

__all__ = [
    "ACTIVE_STATES",
    "FlowparkTable",
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


class FlowInstanceRow(FlowparkTable, table=True):
    """``flow_instance``: one row per instance (see ``InstanceRecord`` for the meaning)."""

    model_config = TABLE_CONFIG
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

    id: str = instance_id_field("id", primary_key=True)
    flow_name: str = str_field("flow_name", nullable=False)
    flow_version: str = str_field("flow_version", nullable=False)
    state: str = str_field("state", nullable=False)
    input: dict[str, Any] | None = json_field("input")
    created_at: datetime = instant_field("created_at", nullable=False)
    updated_at: datetime = instant_field("updated_at", nullable=False)
    deadline_at: datetime | None = instant_field("deadline_at")
    wake_at: datetime | None = instant_field("wake_at")
    wake_step_id: int | None = int_field("wake_step_id")
    wake_scope: int | None = int_field("wake_scope")
    lease_owner: str | None = str_field("lease_owner")
    lease_expires_at: datetime | None = instant_field("lease_expires_at")
    fencing_token: int = Field(
        default=0,
        sa_column=Column(
            "fencing_token", BigInteger(), nullable=False, default=0, server_default=text("0")
        ),
    )
    ending: str | None = str_field("ending")
    cancel_requested: bool = Field(
        default=False,
        sa_column=Column(
            "cancel_requested", Boolean(), nullable=False, default=False, server_default=false()
        ),
    )
    result: Any = json_field("result")
    error_code: str | None = str_field("error_code")
    error_message: str | None = Field(default=None, sa_column=Column("error_message", Text()))
    error_details: dict[str, Any] | None = json_field("error_details")
    instance_key: str | None = str_field("instance_key")
    try_step_id: int | None = int_field("try_step_id")
    try_scope: int | None = int_field("try_scope")
    try_number: int | None = int_field("try_number")
    try_started_at: datetime | None = instant_field("try_started_at")
    heartbeat_at: datetime | None = instant_field("heartbeat_at")
    heartbeat_value: Any = json_field("heartbeat_value")
    # the request of a start with this key is the row's input and instance_key
    idempotency_key: str | None = str_field("idempotency_key")
    # in the order the migrations added them: a new database is made from these models
    wake_kind: str | None = str_field("wake_kind")
    # the start's W3C trace context; the deadlines stored with it (flowpark.store.carried)
    trace_context: dict[str, Any] | None = json_field("trace_context")
    # ended with a compensation that failed for good (listed in error_details)
    compensation_failed: bool = Field(
        default=False,
        sa_column=Column(
            "compensation_failed", Boolean(), nullable=False, default=False, server_default=false()
        ),
    )
    carried: list[Any] | None = json_field("carried")
    # an operator woke it: its next claim runs the wait it is parked on now (a bulk wake
    # writes it; a park clears it, unless it defers the woken try; migration 0026)
    woken: bool = flag_field("woken")


class FlowStepRow(FlowparkTable, table=True):
    """``flow_step``: the append-only journal (see ``StepRow``).

    Keyed by the execution's name ``(instance_id, step_id, scope, kind, try_number)``: one
    row per execution, and the key serves every read (an instance's rows, then ordered by
    ``sequence``). A deadline row keeps its end in ``ends_at``, or goes inside the row
    written with it (``carried``); a row that puts no values has ``values`` NULL
    (:func:`flowpark.store.mapping.step_values`). ``sequence`` is the commit order, no
    index of its own: an identity column on PostgreSQL; on SQLite the store writes the
    next rowid into it (``max(rowid) + 1`` in the file's one write transaction).
    """

    model_config = TABLE_CONFIG
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
    instance_id: str = instance_id_field("instance_id")
    step_id: int = int_field("step_id", nullable=False)
    scope: int = int_field("scope", nullable=False)
    kind: str = str_field("kind", nullable=False)
    capability_id: str = str_field("capability_id", nullable=False)
    outcome: str = str_field("outcome", nullable=False)
    try_number: int = int_field("try_number", nullable=False)
    step_values: dict[str, Any] | None = json_field("values")
    error_type: str | None = str_field("error_type")
    error_detail: str | None = Field(default=None, sa_column=Column("error_detail", Text()))
    final: bool = Field(
        default=False,
        sa_column=Column("final", Boolean(), nullable=False, default=False, server_default=false()),
    )
    next_try_at: datetime | None = instant_field("next_try_at")
    started_at: datetime = instant_field("started_at", nullable=False)
    committed_at: datetime = instant_field("committed_at", nullable=False)
    # a deadline row's end (``values`` then NULL; 0019); the deadlines written with a row
    ends_at: datetime | None = instant_field("ends_at")
    carried: list[Any] | None = json_field("carried")
    deferred_until: datetime | None = instant_field("deferred_until")  # its provider's deferral
    deferred_by: str | None = str_field("deferred_by")  # (0027): its last wake, and why


class FlowSignalRow(FlowparkTable, table=True):
    """``flow_signal``: delivered signals; ``sequence`` is the arrival order."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_signal"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_signal_id"),
        UniqueConstraint("instance_id", "idempotency_key", name="uq_flow_signal_idempotency"),
        Index("ix_flow_signal_instance_id", "instance_id"),
    )

    sequence: int | None = sequence_field()
    id: str = str_field("id", nullable=False)
    instance_id: str = instance_id_field("instance_id")
    name: str = str_field("name", nullable=False)
    payload: dict[str, Any] | None = json_field("payload")
    idempotency_key: str | None = str_field("idempotency_key")
    received_at: datetime = instant_field("received_at", nullable=False)
    taken_at: datetime | None = instant_field("taken_at")
    taken_step_id: int | None = int_field("taken_step_id")
    # false: the wait at ``taken_step_id`` refused it (its match did not hold); else null
    matched: bool | None = Field(default=None, sa_column=Column("matched", Boolean()))
    # set when the instance ended while the signal waited untaken: it will never be taken
    discarded_at: datetime | None = instant_field("discarded_at")
    discarded_reason: str | None = str_field("discarded_reason")


class SignalDeliveryRow(FlowparkTable, table=True):
    """``flow_signal_delivery``: the instance a signed signal's delivery id reached first; the
    id is unique per flow and signal across instances (a replay elsewhere is refused)."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_signal_delivery"
    __table_args__ = (Index("ix_flow_signal_delivery_instance", "instance_id"),)

    flow_name: str = str_field("flow_name", nullable=False, primary_key=True)
    signal_name: str = str_field("signal_name", nullable=False, primary_key=True)
    delivery_id: str = str_field("delivery_id", nullable=False, primary_key=True)
    instance_id: str = instance_id_field("instance_id")
    received_at: datetime = instant_field("received_at", nullable=False)


class ConsoleSessionRow(FlowparkTable, table=True):
    """``flow_console_session``: one console sign-in. It opens the console while not ended
    (sign-out), seen within the idle timeout, and its token (by fingerprint) configured."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_console_session"
    __table_args__ = (Index("ix_flow_console_session_last_seen", "last_seen_at"),)

    id: str = str_field("id", nullable=False, primary_key=True)
    token_fingerprint: str = str_field("token_fingerprint", nullable=False)
    created_at: datetime = instant_field("created_at", nullable=False)
    last_seen_at: datetime = instant_field("last_seen_at", nullable=False)
    ended_at: datetime | None = instant_field("ended_at")


class FlowHeartbeatRow(FlowparkTable, table=True):
    """``flow_heartbeat``: the latest checkpoint of each (instance, step, scope)."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_heartbeat"
    __table_args__ = (
        PrimaryKeyConstraint("instance_id", "step_id", "scope", name="pk_flow_heartbeat"),
    )

    instance_id: str = instance_id_field("instance_id")
    step_id: int = int_field("step_id", nullable=False)
    scope: int = int_field("scope", nullable=False)
    try_number: int = int_field("try_number", nullable=False)
    value: Any = json_field("value")
    recorded_at: datetime = instant_field("recorded_at", nullable=False)


class FlowActionRow(FlowparkTable, table=True):
    """``flow_action``: operator actions (wake, extend budget, cancel) in an instance's
    history, with the acting token's name and the engine-clock instant; a repeat of an
    action's ``Idempotency-Key`` on the same instance finds the first."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_action"
    __table_args__ = (
        UniqueConstraint("id", name="uq_flow_action_id"),
        UniqueConstraint(
            "instance_id", "action", "idempotency_key", name="uq_flow_action_idempotency"
        ),
        Index("ix_flow_action_instance", "instance_id", "sequence"),
    )

    sequence: int | None = sequence_field()
    id: str = str_field("id", nullable=False)
    instance_id: str = instance_id_field("instance_id")
    action: str = str_field("action", nullable=False)
    actor: str = str_field("actor", nullable=False)
    acted_at: datetime = instant_field("acted_at", nullable=False)
    details: dict[str, Any] | None = json_field("details")
    idempotency_key: str | None = str_field("idempotency_key")


class FlowStreamRow(FlowparkTable, table=True):
    """``flow_stream``: best-effort, size-bounded progress messages."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_stream"
    __table_args__ = (Index("ix_flow_stream_read", "instance_id", "stream", "sequence"),)

    sequence: int | None = sequence_field()
    instance_id: str = instance_id_field("instance_id")
    stream: str = str_field("stream", nullable=False)
    payload: Any = json_field("payload")
    size: int = int_field("size", nullable=False)
    created_at: datetime = instant_field("created_at", nullable=False)


class FlowNodeRow(FlowparkTable, table=True):
    """``flow_node``: one liveness row per node process, written by the node itself every
    beat (``beat_seconds``): what it is and serves, and how its sweep went. A row not
    written for three beats, or marked ``stopped_at``, is a node that is not live."""

    model_config = TABLE_CONFIG
    __tablename__ = "flow_node"

    id: str = str_field("id", nullable=False, primary_key=True)
    role: str = str_field("role", nullable=False)
    version: str = str_field("version", nullable=False)
    flows: list[str] | None = json_field("flows")
    sweeps: bool = Field(
        default=False,
        sa_column=Column(
            "sweeps", Boolean(), nullable=False, default=False, server_default=false()
        ),
    )
    beat_seconds: float = Field(
        default=10.0, sa_column=Column("beat_seconds", Float(), nullable=False)
    )
    started_at: datetime = instant_field("started_at", nullable=False)
    seen_at: datetime = instant_field("seen_at", nullable=False)
    stopped_at: datetime | None = instant_field("stopped_at")
    last_sweep_at: datetime | None = instant_field("last_sweep_at")
    last_claimed: int | None = int_field("last_claimed")


# the providers' tables (limits, tallies, correlation keys) register on the same metadata
from flowpark.store.outbox_tables import (  # noqa: E402 - exported here too
    EventDeliveryRow,
    OutboxEventRow,
    ReviewItemRow,
)
from flowpark.store.provider_tables import PROVIDER as _PROVIDER  # noqa: E402,F401
