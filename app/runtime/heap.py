"""The garbage collector of a node process, settled once its start-up is done.

A node allocates at start-up almost everything it keeps for its life (modules, the flows'
plans, the API's routes and models, SQLAlchemy's and pydantic's caches: ~160,000 objects
tracked by the cyclic collector), then serves requests whose objects are young and short
lived. With CPython's defaults every full collection walks the start-up objects again (six
on 2,000 HTTP starts, ~85 ms each), and a young collection runs every 700 allocations:
together ~11 % of the server's CPU per start (measured with ``gc.callbacks`` under the
``http`` bench, see BENCHMARKS.md).

:func:`settle_heap` moves what start-up allocated into the permanent generation
(``gc.freeze``: never scanned again, never freed - it lives as long as the process anyway)
and collects the young generation every :data:`YOUNG_THRESHOLD` allocations. The cyclic
collector still runs: garbage made after start-up is freed as before.

The nodes call it when ``FLOWPARK_GC_FREEZE`` is true: ``flowpark serve`` and ``flowpark
worker`` set that by default; an app built with ``create_app`` in another process (tests,
an embedding server) keeps the interpreter's defaults unless it asks.
"""

from __future__ import annotations

import gc

__all__ = ["OLDER_THRESHOLDS", "YOUNG_THRESHOLD", "settle_heap"]

#: Allocations (minus deallocations) of tracked objects between two young collections
#: (CPython's default 700).
YOUNG_THRESHOLD = 10_000
#: Young collections per middle one, and middle ones per full one (defaults 10 and 10).
OLDER_THRESHOLDS = (20, 20)


def settle_heap() -> None:
    """Freeze the objects allocated so far (``gc.freeze``) and set the collector's
    thresholds to (:data:`YOUNG_THRESHOLD`, *:data:`OLDER_THRESHOLDS`).

    Call it once, after the process's start-up and before it serves. Idempotent: a second
    call freezes what was allocated since.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
