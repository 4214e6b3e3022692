"""What ``flowpark worker`` loads and does on its way to its first sweep, in a real process:
none of the HTTP stack (FastAPI, Starlette, uvicorn, the API and the console, Jinja2),
no tracing SDK when no ``OTEL_*`` asks for one, no Alembic when the database is at head;
the garbage collector paused until the worker has started and running afterwards
(flowpark.runtime.heap). Each of them was a share of the worker's start-up CPU."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

#: Top-level packages and app packages a started worker must not have imported.
NOT_LOADED = ("fastapi", "starlette", "uvicorn", "jinja2", "opentelemetry", "alembic", "mako")
NOT_LOADED_APP = ("flowpark.api", "flowpark.ui")

# Runs the console script's worker command; where the worker settles its heap (started,
# first sweep begun) it prints what it imported and whether the collector was paused,
# then stops itself as an operator would.
PROBE = f"""
import gc, json, os, signal, sys
import flowpark.runtime.worker as worker
settle = worker.settle_heap
def settled():
    held = not gc.isenabled()
    settle()
    loaded = sorted(
        m for m in sys.modules
        if m.split(".")[0] in {NOT_LOADED!r} or m.startswith({NOT_LOADED_APP!r})
    )
    print(json.dumps({{"held": held, "enabled": gc.isenabled(), "loaded": loaded}}), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
worker.settle_heap = settled
from flowpark.cli.main import main
sys.argv = ["flowpark", "worker"]
main()
"""


def test_a_started_worker_loads_no_http_stack_tracing_or_alembic(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "worker.db"
    shutil.copyfile(_sqlite_template, path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWPARK_", "OTEL_"))}
    env.update(FLOWPARK_DATABASE_URL=f"sqlite:///{path}", FLOWPARK_NODE_ID="worker-start")
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert report["held"] is True, "the collector ran during the worker's start-up"
    assert report["enabled"] is True, "the collector stayed off once the worker started"
