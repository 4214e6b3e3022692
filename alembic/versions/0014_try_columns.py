"""one word per thing: the try in flight and a delivery's tries are named ``try``

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 00:00:00

A *try* is one execution of a capability (or one POST of an event delivery) under a retry
policy; an *attempt* is one iteration of a parked poll. The columns that held the try in
flight of a heartbeating capability were named ``attempt_*``, and a delivery counted its
tries in ``attempts``:

- ``flow_instance.attempt_step_id``, ``attempt_scope``, ``attempt_try``,
  ``attempt_started_at`` become ``try_step_id``, ``try_scope``, ``try_number``,
  ``try_started_at``;
- ``event_delivery.attempts`` becomes ``tries``.

Renames only: every value is kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INSTANCE = (
    ("attempt_step_id", "try_step_id"),
    ("attempt_scope", "try_scope"),
    ("attempt_try", "try_number"),
    ("attempt_started_at", "try_started_at"),
)
_DELIVERY = (("attempts", "tries"),)


def _rename(table: str, pairs: Sequence[tuple[str, str]]) -> None:
    with op.batch_alter_table(table) as batch:
        for old, new in pairs:
            batch.alter_column(old, new_column_name=new)


def upgrade() -> None:
    _rename("flow_instance", _INSTANCE)
    _rename("event_delivery", _DELIVERY)


def downgrade() -> None:
    _rename("flow_instance", [(new, old) for old, new in _INSTANCE])
    _rename("event_delivery", [(new, old) for old, new in _DELIVERY])
