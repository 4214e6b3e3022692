"""A node's lifespan settles its heap (flowpark.runtime.heap) once started, when
``FLOWPARK_GC_FREEZE`` asks, and otherwise only resumes a collector paused for the
start-up, leaving its settings alone."""

from __future__ import annotations

import pytest

from flowpark.runtime import app as runtime_app
from tests.support.server import server_settings


@pytest.mark.parametrize("freeze", [True, False])
async def test_the_lifespan_settles_the_heap_when_the_setting_asks(
    store_url: str, freeze: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    monkeypatch.setattr(runtime_app, "settle_heap", lambda: calls.append("settle"))
    monkeypatch.setattr(runtime_app, "release_collector", lambda: calls.append("release"))
    settings = server_settings(store_url, "http://127.0.0.1:9", gc_freeze=freeze)
    app = runtime_app.create_app(settings)
    async with app.router.lifespan_context(app):
        assert calls == (["settle"] if freeze else ["release"])
