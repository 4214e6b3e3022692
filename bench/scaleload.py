"""The ``scale`` bench's parked population: a few ``document.process`` instances parked
through the engine, cloned in bulk with SQL into N parked instances of exactly their shape.

A template is a real instance at its first status poll: uploaded to the (fake) OCR, poll
attempt 0 read ``pending``, parked with ``wake_kind = 'poll'``. Its rows are one
``flow_instance`` row (carrying the upload's retry window), two ``flow_step`` rows (the
upload, carrying the poll budget and attempt 0's retry window, and attempt 0) and one
``flow_correlation`` row (the job id). :func:`park_templates` parks a few and checks they
have the same shape (the same journal rows, each row of the same size within
:data:`SIZE_SLACK` bytes, and rows in no other table).

:func:`clone` copies the first template's rows aside (schema ``bench_scale``), empties the
three tables (``TRUNCATE``: the templates' ids are newer than every clone's, and index
entries of newer ids at the right edge would make each clone's insert split a page in two
halves) and writes N clones of it with ``generate_series``, 100,000 instances per statement
(one statement writes the three tables through data-modifying CTEs), every column
built from the column list of the live schema: the instance id (a uuid7 of the clone's
``created_at``, as the engine makes them), every instant moved by the clone's
``created_at`` minus the template's (so the poll budget, the flow deadline and the retry
windows keep their distance to the start), and every text or JSON value that holds the
template's job id, document id, idempotency key or instance id rewritten with the clone's own
(of the same length: the job id is 32 hex digits, as the fake's, and the document id and key
keep their 7-digit counter). Everything else is the template's value. Clones are created
over the 50 minutes before the load and parked until 1 to 3 hours after it (each at an
instant drawn from a hash of its number, so due order is not heap order), before every poll
budget's end (4 hours after each start). :func:`check_shape` compares the size of sampled
clone rows (``pg_column_size``) with the template's.

Clones are written in id order, so an index ordered by id or time is about 90 % full, as
the engine leaves it, and one keyed by a digest, a job id or ``wake_at`` (which come in no
order) about 70 %, as the engine's. The journal's key index is the exception: the engine's
concurrent starts interleave their journal rows (an instance's rows arrive over ~100 ms
among other instances' rows), so its pages split in the middle and end ~64 % full, where an
ordered load packs them to 90 %; a bulk order that splits them alike swung between 54 and
99 % with small changes (btree's split heuristics), so the load rebuilds that index at
:data:`JOURNAL_KEY_FILL` instead (``fillfactor``, reset right after: the schema ends as it
was). What the load leaves out is the dead version of each instance row the engine's park
leaves (it updates the row the start inserted, with an entry in each of its indexes) until
vacuum removes it.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine

from bench.common import BenchStore, progress, run_concurrently
from bench.compat import name_of
from bench.flows import document_input, node_engine

sync_url = name_of("flowpark.store.db", "sync_url")

__all__ = ["CHUNK", "TEMPLATES", "Template", "check_shape", "clone", "park_templates"]

#: instances written per statement
CHUNK = 100_000
#: real instances parked through the engine; the first is the one cloned
TEMPLATES = 4
#: the tables a parked ``document.process`` has rows in, and the column naming the instance
TABLES = {"flow_instance": "id", "flow_step": "instance_id", "flow_correlation": "instance_id"}
#: clones are created over this span before the load ...
CREATED_SPAN = timedelta(minutes=50)
#: ... and parked until this span after it, from its start
WAKE_FROM = timedelta(hours=1)
WAKE_SPAN = timedelta(hours=2)
#: leaf density (%) the journal's key index is rebuilt at after the load: what the engine's
#: concurrent starts leave (BENCHMARKS.md, "Bytes by relation": ~64 %; 65.8 % measured
#: after 10,000 parked by ``bench park`` with 32 callers)
JOURNAL_KEY_FILL = 64
#: the schema the template's rows are set aside in
_ASIDE = "bench_scale"

_TEXT_TYPES = {"character varying": "", "text": "", "json": "::json", "jsonb": "::jsonb"}

#: a uuid7 of ``g.created`` (RFC 9562: 48-bit Unix milliseconds, version 7, then the
#: fraction of the millisecond in 12 bits, as its method 3 allows, so clone ids grow with
#: their number as the engine's do; the variant and 62 random bits of a random uuid)
_UUID7 = (
    "encode(int8send((floor(extract(epoch FROM g.created) * 1000)::bigint << 16) | 28672 "
    "| floor(mod(extract(epoch FROM g.created) * 1000000, 1000) * 4.096)::bigint) "
    "|| substring(uuid_send(gen_random_uuid()) FROM 9), 'hex')::uuid"
)


@dataclass
class Template:
    """The parked instances the clones copy: ``ids`` (the first is cloned), the run tag of
    their document ids and keys, and the first one's identifying values."""

    ids: list[str]
    run: str
    created_at: datetime
    job_id: str
    document_id: str
    idempotency_key: str
    #: per table, each row of the first template as (its kind, its size in bytes)
    shape: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    @property
    def rows(self) -> dict[str, int]:
        """Rows per table of one instance."""
        return {table: len(rows) for table, rows in self.shape.items()}


def _key(run: str, i: int) -> str:
    return f"{run}-{i:07d}"


async def park_templates(store: BenchStore, ocr_url: str, count: int = TEMPLATES) -> Template:
    """Park ``count`` ``document.process`` instances through the engine (this process, the
    sample's OCR limit lifted) and return what :func:`clone` copies.

    Raises:
        RuntimeError: an instance did not park, or the instances differ in shape.
    """
    run = uuid.uuid4().hex[:6]
    ids: list[str] = []
    async with node_engine(store.url, ocr_url=ocr_url) as engine:
        plan = engine.catalog.latest("document.process")

        async def start(i: int) -> None:
            result = await engine.start(plan, document_input(i, run), idempotency_key=_key(run, i))
            if result.instance.state != "suspended":
                raise RuntimeError(f"template {i} did not park: {result.instance.state}")
            ids.append(result.instance.id)

        await run_concurrently(count, 1, start, label="templates")
    eng = create_engine(sync_url(store.url))
    try:
        with eng.connect() as conn:
            ids = [str(r[0]) for r in conn.execute(text("SELECT id FROM flow_instance"))]
            ids.sort()
            first = ids[0]
            _only_known_tables(conn, first)
            shapes = {tid: _shape(conn, tid) for tid in ids}
            if not _alike(list(shapes.values())):
                raise RuntimeError(f"templates differ in shape: {shapes}")
            row = conn.execute(
                text(
                    "SELECT f.created_at, f.idempotency_key, f.input ->> 'documentId', "
                    "c.key FROM flow_instance f JOIN flow_correlation c ON c.instance_id = f.id "
                    "WHERE f.id = :id"
                ),
                {"id": first},
            ).one()
    finally:
        eng.dispose()
    return Template(
        ids=ids,
        run=run,
        created_at=row[0],
        job_id=row[3],
        document_id=row[2],
        idempotency_key=row[1],
        shape=shapes[first],
    )


#: how many bytes two templates' rows may differ by: the deadlines a row carries store
#: instants as offsets from the row's own commit (a digit more or less)
SIZE_SLACK = 8


def _alike(shapes: list[dict[str, list[tuple[Any, ...]]]]) -> bool:
    """Whether the templates have the same rows (kinds, names, order) and each row's size
    within :data:`SIZE_SLACK` bytes of the first template's."""
    first = shapes[0]
    for shape in shapes[1:]:
        if shape.keys() != first.keys():
            return False
        for table, rows in shape.items():
            if len(rows) != len(first[table]):
                return False
            for row, base in zip(rows, first[table], strict=True):
                if row[:-1] != base[:-1] or abs(row[-1] - base[-1]) > SIZE_SLACK:
                    return False
    return True


def _only_known_tables(conn: Connection, instance_id: str) -> None:
    """Refuse a template with rows in a table :func:`clone` does not copy."""
    columns = conn.execute(
        text(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND column_name = 'instance_id'"
        )
    ).all()
    for table, column in columns:
        if table in TABLES:
            continue
        found = conn.execute(
            text(f'SELECT count(*) FROM "{table}" WHERE "{column}" = :id'), {"id": instance_id}
        ).scalar_one()
        if found:
            raise RuntimeError(f"a parked instance has {found} rows in {table}: clone it too")


def _shape(conn: Connection, instance_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Per table, each row of the instance as (its kind, its size in bytes), in order."""
    return {
        "flow_instance": [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT state, wake_kind, pg_column_size(f.*) "
                    "FROM flow_instance f WHERE id = :id"
                ),
                {"id": instance_id},
            )
        ],
        "flow_step": [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT step_id, scope, kind, capability_id, pg_column_size(s.*) "
                    "FROM flow_step s WHERE instance_id = :id ORDER BY sequence"
                ),
                {"id": instance_id},
            )
        ],
        "flow_correlation": [
            tuple(r)
            for r in conn.execute(
                text(
                    "SELECT provider, pg_column_size(c.*) FROM flow_correlation c "
                    "WHERE instance_id = :id ORDER BY key"
                ),
                {"id": instance_id},
            )
        ],
    }


def _select_list(
    conn: Connection, table: str, id_column: str, template: Template
) -> tuple[str, str]:
    """(column list, select list) that copies ``table``'s template rows ``t`` for clone
    ``g``."""
    columns = conn.execute(
        text(
            "SELECT column_name, data_type, is_identity FROM information_schema.columns "
            "WHERE table_schema = 'public' AND table_name = :t ORDER BY ordinal_position"
        ),
        {"t": table},
    ).all()
    olds = {  # the template's identifying text -> the clone's
        template.job_id: "g.job",
        template.document_id: "g.doc",
        template.idempotency_key: "g.key",
        template.ids[0]: "g.id::text",
    }
    names, exprs = [], []
    for name, data_type, is_identity in columns:
        if is_identity == "YES":
            continue  # flow_step.sequence: the clone's own
        quoted = f'"{name}"'
        if name == id_column:
            expr = "g.id"
        elif table == "flow_instance" and name == "created_at":
            expr = "g.created"
        elif table == "flow_instance" and name == "wake_at":
            expr = "g.wake"
        elif data_type == "timestamp with time zone":
            expr = f"t.{quoted} + g.shift"
        elif data_type in _TEXT_TYPES:
            expr = f"t.{quoted}"
            replaced = False
            # longest first: the key is a part of the document id
            for old in sorted(olds, key=len, reverse=True):
                holds = conn.execute(
                    text(
                        f"SELECT count(*) FROM {_ASIDE}.{table} "
                        f"WHERE strpos({quoted}::text, :old) > 0"
                    ),
                    {"old": old},
                ).scalar_one()
                if holds:
                    expr = f"replace({expr}::text, '{old}', {olds[old]})"
                    replaced = True
            if replaced:
                expr += _TEXT_TYPES[data_type]
        else:
            expr = f"t.{quoted}"
        names.append(quoted)
        exprs.append(expr)
    return ", ".join(names), ", ".join(exprs)


def _clone_statement(conn: Connection, template: Template) -> str:
    """One statement writing clones ``:first``..``:last`` into the three tables."""
    parts = []
    for table, id_column in TABLES.items():
        names, exprs = _select_list(conn, table, id_column, template)
        rows = f"{_ASIDE}.{table}"
        order = "g.i"
        if table == "flow_step":
            rows = f"(SELECT *, row_number() OVER (ORDER BY sequence) - 1 AS k FROM {rows})"
            order = "g.i, t.k"
        parts.append(
            f"INSERT INTO {table} ({names}) SELECT {exprs} FROM g "
            f"CROSS JOIN {rows} AS t ORDER BY {order}"
        )
    return f"""
WITH s AS MATERIALIZED (
    SELECT i,
        CAST(:created_from AS timestamptz)
            + make_interval(secs => i * CAST(:created_step AS float8)) AS created,
        CAST(:wake_from AS timestamptz) + make_interval(
            secs => ('x' || substr(md5('wake:' || i), 1, 8))::bit(32)::bigint
                * CAST(:wake_step AS float8)) AS wake,
        md5(CAST(:run AS text) || ':' || i) AS job,
        'doc-' || CAST(:run AS text) || '-' || lpad(i::text, 7, '0') AS doc,
        CAST(:run AS text) || '-' || lpad(i::text, 7, '0') AS key
    FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS i
), g AS MATERIALIZED (
    SELECT s.*, s.created - CAST(:tcreated AS timestamptz) AS shift,
        {_UUID7.replace("g.created", "s.created")} AS id
    FROM s
), i1 AS ({parts[0]}), i2 AS ({parts[1]})
{parts[2]}
"""


def _set_aside(conn: Connection, template: Template) -> None:
    """Copy the first template's rows to ``bench_scale`` and empty the three tables."""
    conn.execute(text(f"CREATE SCHEMA IF NOT EXISTS {_ASIDE}"))
    for table, id_column in TABLES.items():
        conn.execute(text(f"DROP TABLE IF EXISTS {_ASIDE}.{table}"))
        conn.execute(
            text(f"CREATE TABLE {_ASIDE}.{table} AS SELECT * FROM {table} WHERE {id_column} = :id"),
            {"id": template.ids[0]},
        )
    conn.execute(text(f"TRUNCATE {', '.join(TABLES)}"))


def _rebuild_journal_key(eng: Engine) -> None:
    """Rebuild ``flow_step``'s primary key index at :data:`JOURNAL_KEY_FILL` % leaf density;
    its ``fillfactor`` is reset afterwards."""
    with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        name = conn.execute(
            text(
                "SELECT c.relname FROM pg_constraint k JOIN pg_class c ON c.oid = k.conindid "
                "WHERE k.conrelid = 'flow_step'::regclass AND k.contype = 'p'"
            )
        ).scalar_one()
        conn.execute(text(f'ALTER INDEX "{name}" SET (fillfactor = {JOURNAL_KEY_FILL})'))
        conn.execute(text(f'REINDEX INDEX "{name}"'))
        conn.execute(text(f'ALTER INDEX "{name}" RESET (fillfactor)'))


def clone(store: BenchStore, template: Template, n: int, now: datetime) -> dict[str, Any]:
    """Set the first template's rows aside, empty the three tables and write clones
    ``0``..``n-1`` of it (100,000 per statement, a progress bar on stderr); rebuild the
    journal's key index (:func:`_rebuild_journal_key`); ``ANALYZE``.

    Returns:
        ``load_s`` (the statements), ``reindex_s``, ``analyze_s``, ``chunks`` (seconds per
        statement) and ``max_loaded_sequence`` (the last journal row written by the load).
    """
    params: dict[str, Any] = {
        "created_from": now - CREATED_SPAN,
        "created_step": CREATED_SPAN.total_seconds() / n,
        "wake_from": now + WAKE_FROM,
        "wake_step": WAKE_SPAN.total_seconds() / 2**32,
        "run": template.run,
        "tcreated": template.created_at,
    }
    eng = create_engine(sync_url(store.url))
    chunks: list[float] = []
    t0 = time.perf_counter()
    try:
        with eng.begin() as conn:
            _set_aside(conn, template)
            statement = text(_clone_statement(conn, template))
        with progress() as bar:
            task = bar.add_task("load (SQL clones)", total=n)
            for first in range(0, n, CHUNK):
                last = min(n, first + CHUNK) - 1
                c0 = time.perf_counter()
                with eng.begin() as conn:
                    conn.execute(statement, {**params, "first": first, "last": last})
                chunks.append(time.perf_counter() - c0)
                bar.update(task, completed=last + 1)
        load_s = time.perf_counter() - t0
        r0 = time.perf_counter()
        _rebuild_journal_key(eng)
        reindex_s = time.perf_counter() - r0
        a0 = time.perf_counter()
        with eng.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("ANALYZE"))
        analyze_s = time.perf_counter() - a0
        with eng.connect() as conn:
            top = conn.execute(text("SELECT max(sequence) FROM flow_step")).scalar_one()
    finally:
        eng.dispose()
    return {
        "load_s": load_s,
        "reindex_s": reindex_s,
        "analyze_s": analyze_s,
        "chunks": [round(c, 2) for c in chunks],
        "max_loaded_sequence": int(top),
    }


def check_shape(store: BenchStore, template: Template) -> dict[str, int]:
    """Compare sampled clone rows (about 1 % of each table's pages) with the template's
    sizes; returns rows checked per table.

    Raises:
        RuntimeError: a clone row differs in size from the template row of its kind, holds
            the template's job id, or its journal does not name its own job id where the
            template's names the template's.
    """
    eng = create_engine(sync_url(store.url))
    checked: dict[str, int] = {}
    try:
        with eng.connect() as conn:
            expected = template.shape
            samples = {
                "flow_instance": "SELECT state, wake_kind, pg_column_size(f.*) "
                "FROM flow_instance f TABLESAMPLE SYSTEM (1) REPEATABLE (7)",
                "flow_step": "SELECT step_id, scope, kind, capability_id, pg_column_size(s.*) "
                "FROM flow_step s TABLESAMPLE SYSTEM (1) REPEATABLE (7)",
                "flow_correlation": "SELECT provider, pg_column_size(c.*) "
                "FROM flow_correlation c TABLESAMPLE SYSTEM (1) REPEATABLE (7)",
            }
            for table, query in samples.items():
                seen = [tuple(r) for r in conn.execute(text(query))]
                allowed = set(expected[table])
                odd = [r for r in seen if r not in allowed]
                if odd:
                    raise RuntimeError(f"{table}: clone rows {odd[:3]} unlike {sorted(allowed)}")
                checked[table] = len(seen)
            leaked = conn.execute(
                text("SELECT count(*) FROM flow_correlation WHERE key = :job"),
                {"job": template.job_id},
            ).scalar_one()
            if leaked:
                raise RuntimeError(f"the template's job id is on {leaked} correlation rows")
            naming = conn.execute(
                text(
                    f"SELECT count(*) FROM {_ASIDE}.flow_step "
                    'WHERE strpos("values"::text, :job) > 0'
                ),
                {"job": template.job_id},
            ).scalar_one()
            named = conn.execute(
                text(
                    "SELECT c.key, (SELECT count(*) FROM flow_step s WHERE s.instance_id = "
                    'c.instance_id AND strpos(s."values"::text, c.key) > 0) '
                    "FROM flow_correlation c TABLESAMPLE SYSTEM (1) REPEATABLE (7)"
                )
            ).all()
            odd_jobs = [key for key, count in named if count != naming]
            if odd_jobs:
                raise RuntimeError(f"clones whose journal does not name their job: {odd_jobs[:3]}")
    finally:
        eng.dispose()
    return checked
