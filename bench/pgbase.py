"""The physical baseline of the machine: pgbench, one client, single-row ``UPDATE`` commits.

:func:`pgbench_tps` makes its own database on the bench's PostgreSQL server, fills a
100,000-row table shaped like a parked instance (id, state, step, wake instant, updated
instant, a small JSON payload, an index on the wake instant), and runs ``pgbench -n -M
prepared -c 1 -j 1`` with a script that moves one random row to its next step per
transaction (autocommit, ``fsync`` and ``synchronous_commit`` as the server has them). The
database is dropped afterwards. ``bench compare`` runs it in every round, so each flowpark
figure can be divided by a baseline measured in the same sitting.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from bench.common import pg_admin_url
from bench.compat import name_of

sync_url = name_of("flowpark.store.db", "sync_url")

__all__ = ["pgbench_tps"]

_SETUP = """
CREATE TABLE parked (
  id bigint PRIMARY KEY,
  state text NOT NULL DEFAULT 'suspended',
  step integer NOT NULL DEFAULT 0,
  wake_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now(),
  body jsonb NOT NULL DEFAULT '{}'::jsonb
);
INSERT INTO parked (id, wake_at, body)
SELECT g, now() - random() * interval '1 hour', jsonb_build_object('document', g, 'pages', 3)
FROM generate_series(1, 100000) AS g;
CREATE INDEX parked_wake ON parked (wake_at);
VACUUM ANALYZE parked;
"""

_SCRIPT = (
    "\\set id random(1, 100000)\n"
    "UPDATE parked SET step = step + 1, state = 'suspended', "
    "wake_at = now() + interval '1 second', updated_at = now() WHERE id = :id;\n"
)


def pgbench_tps(seconds: float = 10.0) -> float:
    """One-client single-row UPDATE transactions per second (pgbench's ``tps``)."""
    admin_url = pg_admin_url()
    admin = create_engine(sync_url(admin_url), isolation_level="AUTOCOMMIT")
    name = f"flowpark_pgb_{uuid.uuid4().hex[:10]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(sync_url(admin_url)).set(database=name)
    try:
        db = create_engine(url, isolation_level="AUTOCOMMIT")
        with db.connect() as conn:
            for statement in _SETUP.split(";"):
                if statement.strip():
                    conn.execute(text(statement))
        db.dispose()
        with tempfile.TemporaryDirectory() as folder:
            script = Path(folder) / "update1.sql"
            script.write_text(_SCRIPT)
            args = ["pgbench", "-n", "-M", "prepared", "-c", "1", "-j", "1"]
            args += ["-T", str(max(1, round(seconds))), "-f", str(script)]
            args += ["-h", url.host or "127.0.0.1", "-p", str(url.port or 5432)]
            args += ["-U", url.username or "postgres", name]
            done = subprocess.run(args, capture_output=True, text=True, check=True)
        found = re.search(r"tps = ([0-9.]+)", done.stdout)
        if found is None:
            raise RuntimeError(f"pgbench printed no tps:\n{done.stdout}\n{done.stderr}")
        return float(found.group(1))
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
