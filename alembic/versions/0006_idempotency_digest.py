"""idempotency digest: on PostgreSQL a start's idempotency key is indexed by a 16-byte digest

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 00:00:00

``uq_flow_instance_idempotency`` held ``(flow_name, idempotency_key)``: two texts in every
entry, inserted in the keys' (random) order, so the index's pages stay partly empty. On
PostgreSQL it becomes a unique index on the first 16 bytes of SHA-256 over
``flow_name || LF || idempotency_key`` as a ``uuid`` (the expression is
:data:`flowpark.store.tables.IDEMPOTENCY_DIGEST_SQL`, frozen below). Measured with
``python -m bench park --store postgres`` (a parked ``document.process``, autovacuum
off): the index went from 138.4 to 68.4 bytes per instance at n=100,000 (141 -> 67 at
n=10,000). Lookups name the expression so
the index serves them and confirm the stored texts, so a digest collision (2^-128 for
two keys) would refuse a start rather than confuse two. The same name stays on the
two-text index on SQLite, which has no SHA-256 function; nothing changes there.

Built before the old index is dropped (the rule never lapses); existing keys are unique
under the old index, so the new one builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "uq_flow_instance_idempotency"
# frozen copy of flowpark.store.tables.IDEMPOTENCY_DIGEST_SQL at this revision
_DIGEST = (
    "(encode(substr(sha256(replace(flow_name || chr(10) || idempotency_key, chr(92), "
    "chr(92) || chr(92))::bytea), 1, 16), 'hex')::uuid)"
)


def _replace(definition: str, suffix: str) -> None:
    """Build the index anew beside the old one, drop the old one, take its name."""
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        f"CREATE UNIQUE INDEX {_NAME}_{suffix} ON flow_instance ({definition}) "
        "WHERE idempotency_key IS NOT NULL"
    )
    op.execute(f"DROP INDEX {_NAME}")
    op.execute(f"ALTER INDEX {_NAME}_{suffix} RENAME TO {_NAME}")


def upgrade() -> None:
    _replace(_DIGEST, "digest")


def downgrade() -> None:
    _replace("flow_name, idempotency_key", "texts")
