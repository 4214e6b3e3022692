"""``FLOWPARK_LOG_FORMAT=json``: one JSON object per line, with the node, and the instance,
flow, step and scope where the engine logs about one; no secret anywhere in the output."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from flowpark.store.migrate import upgrade
from tests.support.eventually import eventually
from tests.support.obs_flows import obs_server
from tests.support.server import TOKEN

pytestmark = pytest.mark.slow

DB_PASSWORD = "pw-Kq81-never-logged"


@pytest.mark.postgres
async def test_json_lines_carry_context_and_no_secret(pg_url: str, tmp_path: Path) -> None:
    upgrade(pg_url)
    # trust authentication accepts any password: the URL carries one the logs must not
    with_password = make_url(pg_url).set(password=DB_PASSWORD).render_as_string(False)
    log = tmp_path / "server.log"
    with obs_server(
        with_password,
        log,
        extra_env={"FLOWPARK_LOG_FORMAT": "json"},
        log_level="debug",
        timer_scan_interval="0.2",
    ) as url:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as client:

            async def ready() -> None:
                try:
                    resp = await client.get("/readyz")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not up: {exc!r}\n{log.read_text()}") from exc
                assert resp.status_code == 200, resp.text

            await eventually(ready, timeout=60, interval=0.1)
            resp = await client.post("/api/v1/obs/poll", json={"order_id": "log-1"})
            instance_id = resp.json()["instanceId"]
            wrong = await client.get(
                f"/api/v1/instances/{instance_id}",
                headers={"Authorization": "Bearer wrong-token-also-secret"},
            )
            assert wrong.status_code == 401

            async def done() -> None:
                view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
                assert view["state"] == "completed"

            await eventually(done, timeout=30)
            assert (await client.get("/metrics")).status_code == 200

    output = log.read_text()
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "the server wrote nothing"
    records = []
    for line in lines:
        record = json.loads(line)  # every line is one JSON object
        assert isinstance(record, dict), line
        for key in ("timestamp", "level", "node", "logger", "message"):
            assert key in record, line
        assert record["node"] == "obs-node"
        records.append(record)
    about = [r for r in records if r.get("instance_id") == instance_id]
    assert about, "no line names the instance"
    assert all(r["flow"] == "obs.poll" for r in about)
    assert any("step" in r and "scope" in r for r in about), about
    for secret in (TOKEN, DB_PASSWORD, "wrong-token-also-secret"):
        assert secret not in output
