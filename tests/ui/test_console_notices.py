"""What the console tells a person without being asked: a banner while the node accepts the
public default token ``dev-token``; the Waiting panel says what happens when a parked poll's
budget runs out; the operator history reads in JSON words (``woken: yes``), not Python's."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from flowpark.settings import DEFAULT_API_TOKEN
from tests.api.operator_support import Operated, operated
from tests.engine.flows import poll_flow
from tests.support.server import TOKEN


@pytest.fixture
async def op(_sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Operated]:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    tokens = f"{TOKEN},{DEFAULT_API_TOKEN}"
    async with operated(
        f"sqlite:///{tmp_path / 'flowpark.db'}", [poll_flow()], api_tokens=tokens
    ) as running:
        yield running


async def _signed_in(base_url: str, http: httpx.AsyncClient, token: str) -> None:
    resp = await http.post(f"{base_url}/ui/sign-in", data={"token": token})
    assert resp.status_code == 303


async def test_the_console_warns_of_dev_token_and_explains_the_wait(op: Operated) -> None:
    inst = (await op.h.start("t.poll", {"order_id": "o-1"}, version="1.0.0")).instance
    async with httpx.AsyncClient(base_url=op.server.base_url, timeout=30.0) as http:
        await _signed_in(op.server.base_url, http, TOKEN)
        overview = await http.get("/ui")
        assert 'data-testid="dev-token"' in overview.text
        assert "FLOWPARK_API_TOKENS" in overview.text
        async with op.client() as api:
            resp = await api.post(
                f"/api/v1/instances/{inst.id}/wake", headers={"Idempotency-Key": "w-1"}
            )
            assert resp.status_code == 200, resp.text
        page = (await http.get(f"/ui/instances/{inst.id}")).text
        assert 'data-testid="budget-outcome"' in page
        assert "When the budget runs out: its on_timeout block runs (t.escalate), then the " in page
        assert "woken: yes" in page and "woken True" not in page
