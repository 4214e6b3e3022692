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

Before that, a node process pauses the collector for its start-up (:func:`hold_collector`,
first thing in ``flowpark serve`` and ``flowpark worker``): its imports and wiring
allocate the ~130,000 objects the process keeps, and with the collector on a node of the
``restart`` bench collected ~190 times on the way to its first sweep (one full
collection) for a few hundred objects of garbage, ~12 % of its CPU up to its ready line.
:func:`settle_heap` (or, with ``FLOWPARK_GC_FREEZE`` off, :func:`release_collector`)
turns it back on once the node has started; the little garbage start-up made is frozen
with the rest.
"""

from __future__ import annotations

import gc

__all__ = [
    "OLDER_THRESHOLDS",
    "YOUNG_THRESHOLD",
    "hold_collector",
    "release_collector",
    "settle_heap",
]

#: Allocations (minus deallocations) of tracked objects between two young collections
#: (CPython's default 700).
YOUNG_THRESHOLD = 10_000
#: Young collections per middle one, and middle ones per full one (defaults 10 and 10).
OLDER_THRESHOLDS = (20, 20)

_held = False  # hold_collector() paused the collector and nothing resumed it yet


def hold_collector() -> None:
    """Pause the cyclic collector for a node's start-up, if it runs.

    :func:`settle_heap` or :func:`release_collector` turns it back on; a collector that
    was already off stays off.
    """
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release_collector() -> None:
    """Turn the collector back on if :func:`hold_collector` paused it (else nothing)."""
    global _held
    if _held:
        _held = False
        gc.enable()


def settle_heap() -> None:
    """Freeze the objects allocated so far (``gc.freeze``) and set the collector's
    thresholds to (:data:`YOUNG_THRESHOLD`, *:data:`OLDER_THRESHOLDS`).

    Call it once, after the process's start-up and before it serves. Idempotent: a second
    call freezes what was allocated since. A collector :func:`hold_collector` paused runs
    again afterwards.
    """
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    release_collector()
