"""Replay of stored journals: instances parked by a previous release (``tests/golden/stored``,
recorded by ``python -m tests.golden.record``) are loaded as stored, migrated to head, and
resumed by today's engine; what it does next must be what the recording release did."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden.record import observed, resume
from tests.golden.stored import fixture_names, load_fixture, resumed_harness


@pytest.mark.parametrize("name", fixture_names())
async def test_a_stored_journal_resumes_as_recorded(name: str, tmp_path: Path) -> None:
    fixture = load_fixture(name)
    instance_id = fixture["instanceId"]
    async with resumed_harness(fixture, tmp_path) as h:
        before = len(fixture["stored"]["flow_step"])
        assert len((await h.snapshot(instance_id)).steps) == before
        await resume(h, instance_id, fixture["resume"])
        await h.engine.drain()
        assert await observed(h, instance_id, before) == fixture["next"]


def test_the_fixtures_cover_the_recorded_scenarios() -> None:
    names = fixture_names()
    assert len(names) >= 8
    for name in names:
        fixture = load_fixture(name)
        assert fixture["stored"]["flow_instance"], name
        assert fixture["next"]["rows"] or fixture["next"]["instance"]["state"], name
