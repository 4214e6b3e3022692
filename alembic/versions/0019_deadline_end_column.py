"""a deadline row's end instant in flow_step.ends_at

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02 00:00:00

A deadline row (``kind = 'deadline'``: a poll's budget, an ``await_signal`` timeout, a retry
window) stored its end as JSON, ``values = {"endsAt": "<ISO 8601>"}``: about 46 bytes of
the row's 168. It is now the ``timestamptz`` column ``ends_at`` (8 bytes) and ``values`` is
NULL; a row that puts no values stores NULL rather than ``{}``. Reading a row gives the same
values back (``{"endsAt": ...}``, aware UTC), so the engine sees the journal unchanged.

Upgrade moves every deadline row's end; downgrade writes it back into ``values`` (ISO 8601
with ``+00:00``) and drops the column.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = "endsAt"
# SQLAlchemy's SQLite text of a naive UTC instant (flowpark.store.types.UtcDateTime)
_SQLITE_FORMAT = "%Y-%m-%d %H:%M:%S.%f"

_PG_UP = (
    "UPDATE flow_step SET ends_at = CAST(\"values\" ->> 'endsAt' AS timestamptz), "
    '"values" = NULL '
    "WHERE kind = 'deadline' AND CASE WHEN json_typeof(\"values\") = 'object' THEN "
    "(SELECT array_agg(k) FROM json_object_keys(\"values\") AS k) = ARRAY['endsAt'] "
    "AND json_typeof(\"values\" -> 'endsAt') = 'string' ELSE false END"
)
# Python's isoformat of an aware UTC instant: no fraction when it is a whole second
_PG_DOWN = (
    "WITH u AS (SELECT sequence, ends_at AT TIME ZONE 'UTC' AS t FROM flow_step "
    "WHERE ends_at IS NOT NULL) "
    "UPDATE flow_step s SET \"values\" = json_build_object('endsAt', "
    "to_char(u.t, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN to_char(u.t, 'US') = '000000' "
    "THEN '' ELSE '.' || to_char(u.t, 'US') END || '+00:00') "
    "FROM u WHERE s.sequence = u.sequence"
)


def _end_of(values: Any) -> datetime | None:
    if isinstance(values, str):
        values = json.loads(values)
    if not isinstance(values, dict) or set(values) != {_KEY} or not isinstance(values[_KEY], str):
        return None
    ends = datetime.fromisoformat(values[_KEY])
    return ends.astimezone(UTC) if ends.tzinfo is not None else ends.replace(tzinfo=UTC)


def _sqlite_up(conn: sa.Connection) -> None:
    rows = conn.exec_driver_sql(
        "SELECT sequence, \"values\" FROM flow_step WHERE kind = 'deadline'"
    ).all()
    for sequence, values in rows:
        ends = _end_of(values)
        if ends is not None:
            conn.exec_driver_sql(
                'UPDATE flow_step SET ends_at = ?, "values" = NULL WHERE sequence = ?',
                (ends.replace(tzinfo=None).strftime(_SQLITE_FORMAT), sequence),
            )


def _sqlite_down(conn: sa.Connection) -> None:
    rows = conn.exec_driver_sql(
        "SELECT sequence, ends_at FROM flow_step WHERE ends_at IS NOT NULL"
    ).all()
    for sequence, ends_at in rows:
        ends = datetime.strptime(ends_at, _SQLITE_FORMAT).replace(tzinfo=UTC)
        conn.exec_driver_sql(
            'UPDATE flow_step SET "values" = ? WHERE sequence = ?',
            (json.dumps({_KEY: ends.isoformat()}), sequence),
        )


def upgrade() -> None:
    op.add_column("flow_step", sa.Column("ends_at", sa.DateTime(timezone=True), nullable=True))
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG_UP)
    else:
        _sqlite_up(conn)


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(_PG_DOWN)
    else:
        _sqlite_down(conn)
    with op.batch_alter_table("flow_step") as batch:
        batch.drop_column("ends_at")
