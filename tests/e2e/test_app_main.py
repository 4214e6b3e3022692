"""The repository's deployable application: ``uvicorn app.main:app`` run from the repository
root (as the Dockerfile runs it beside the installed package) serves the sample flows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from flowpark.store.migrate import upgrade
from tests.support.server import TOKEN, SubprocessServer, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_uvicorn_app_main_serves_the_sample_flows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/flowpark.db"
    upgrade(url)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(
        FLOWPARK_DATABASE_URL=url,
        FLOWPARK_API_TOKENS=TOKEN,
        FLOWPARK_SELF_URL=f"http://127.0.0.1:{port}",
        PYTHONUNBUFFERED="1",
    )
    log = tmp_path / "uvicorn.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:app", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = SubprocessServer(f"http://127.0.0.1:{port}", process, log)
    try:
        server.wait_serving()
        flows = httpx.get(
            f"{server.base_url}/api/v1/flows",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert flows.status_code == 200, flows.text
        names = {flow["name"] for flow in flows.json()}
        assert names == {"document.process", "job.await"}
    finally:
        process.terminate()
        process.wait(30)
