"""The node's garbage collector settings (flowpark.runtime.heap): the collector pauses for the
start-up and runs again once settled or released, what start-up allocated is frozen, young
objects are collected less often, and cyclic garbage made afterwards is still freed; the
setting is off unless asked (tests/api/test_node_heap.py: the lifespan)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from flowpark.runtime.heap import (
    OLDER_THRESHOLDS,
    YOUNG_THRESHOLD,
    hold_collector,
    release_collector,
    settle_heap,
)
from flowpark.settings import Settings


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    release_collector()
    gc.enable()
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class Node:
    """A cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restored_gc")
def test_settle_heap_freezes_start_up_and_sets_the_thresholds() -> None:
    kept = Node()
    settle_heap()

    assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    assert gc.get_freeze_count() > 0
    ref = weakref.ref(kept)
    del kept
    gc.collect()
    assert ref() is not None, "an object start-up made was scanned and freed"


@pytest.mark.usefixtures("restored_gc")
def test_garbage_made_after_settling_is_still_freed() -> None:
    settle_heap()
    later = Node()
    ref = weakref.ref(later)
    del later
    gc.collect()
    assert ref() is None


@pytest.mark.usefixtures("restored_gc")
def test_the_collector_pauses_for_the_start_up_until_the_heap_is_settled() -> None:
    hold_collector()
    assert not gc.isenabled()
    settle_heap()
    assert gc.isenabled()


@pytest.mark.usefixtures("restored_gc")
def test_a_released_hold_resumes_the_collector_with_its_thresholds() -> None:
    thresholds = gc.get_threshold()
    hold_collector()
    release_collector()
    assert gc.isenabled()
    assert gc.get_threshold() == thresholds
    release_collector()  # nothing held: nothing changes
    assert gc.isenabled()


@pytest.mark.usefixtures("restored_gc")
def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    hold_collector()
    release_collector()
    settle_heap()
    assert not gc.isenabled()


def test_the_setting_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWPARK_GC_FREEZE", raising=False)
    assert Settings().gc_freeze is False
    monkeypatch.setenv("FLOWPARK_GC_FREEZE", "true")
    assert Settings().gc_freeze is True
