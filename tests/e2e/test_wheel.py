"""The distribution as a team installs it: a wheel built from the repository, installed in a
fresh virtualenv in an empty folder outside it, migrating its database and serving a flows
folder of its own (``--flows``) whose flow polls its own provider over real HTTP.

The wheel owns one top-level name, ``flowpark``: the team's flows import their own ``app``
package (``app.clients``), which no installed package shadows, and the samples the demo
serves are ``flowpark.samples``."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import closing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.eventually import eventually_sync
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]

BUILDS = '''
"""A user's flows module: wait for a CI build on the team's own provider."""

from datetime import timedelta

from pydantic import BaseModel

from app.clients import CiClient
from flowpark import Backoff, Capability, Deps, Flow, HttpTrigger, StepContext


class Build(BaseModel):
    commit: str


class Started(BaseModel):
    build_id: str


class State(BaseModel):
    state: str


class StartBuild(Capability):
    id = "ci.start"
    puts = (Started,)

    def __init__(self, ci: CiClient) -> None:
        self.ci = ci

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Started(build_id=await self.ci.start(ctx.input.commit)))


class CheckBuild(Capability):
    id = "ci.status"
    idempotent = True
    reads = (Started,)
    puts = (State,)

    def __init__(self, ci: CiClient) -> None:
        self.ci = ci

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(State(state=await self.ci.state(ctx.get(Started).build_id)))


def flows(deps: Deps) -> list[Flow]:
    ci = CiClient(deps.http, deps.settings)
    return [
        Flow("build.await", "1.0.0", input=Build, output=State,
             trigger=HttpTrigger("POST", "/api/v1/builds"))
        .step(StartBuild(ci))
        .poll_until(CheckBuild(ci), until=lambda bag: bag.get(State).state != "running",
                    interval=Backoff.fixed(timedelta(seconds=0.5)),
                    timeout=timedelta(minutes=5), reads=(State,))
        .returns(lambda bag: bag.get(State), reads=(State,))
    ]
'''

CI_CLIENT = '''
"""The CI provider's HTTP client, in the team's own ``app`` package beside the flows."""

import os


class CiClient:
    def __init__(self, http, settings) -> None:
        self.http = http
        self.base = os.environ["CI_BASE_URL"]
        self.timeout = settings.http_timeout_seconds

    async def start(self, commit: str) -> str:
        resp = await self.http.post(f"{self.base}/builds", json={"commit": commit},
                                    timeout=self.timeout)
        resp.raise_for_status()
        return resp.json()["id"]

    async def state(self, build_id: str) -> str:
        resp = await self.http.get(f"{self.base}/builds/{build_id}", timeout=self.timeout)
        resp.raise_for_status()
        return resp.json()["state"]
'''


class _Ci(BaseHTTPRequestHandler):
    """The team's CI provider: a build answers ``running`` twice, then ``passed``."""

    reads: dict[str, int] = {}

    def _answer(self, body: dict[str, str], status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        build_id = f"b{len(self.reads) + 1}"
        self.reads[build_id] = 0
        self._answer({"id": build_id}, 201)

    def do_GET(self) -> None:  # noqa: N802
        build_id = self.path.rsplit("/", 1)[-1]
        self.reads[build_id] += 1
        self._answer({"state": "passed" if self.reads[build_id] > 2 else "running"})

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def ci() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ci)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _docker_build_inputs() -> list[str]:
    """The sources the Dockerfile's build stage copies (``COPY`` lines before the second
    ``FROM``): the wheel is built from those alone, as ``docker build`` would."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    stages = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    build = lines[stages[0] : stages[1]]
    names = [
        name
        for line in build
        if line.startswith("COPY ") and "--from" not in line
        for name in line.split()[1:-1]
    ]
    assert "setup.py" in names and "alembic" in names, names
    assert "PYTHONPATH" not in "\n".join(lines)
    return names


def _run(args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_wheel_serves_a_flows_folder_of_its_own(tmp_path: Path, ci: str) -> None:
    source = tmp_path / "source"  # what the Dockerfile's build stage copies, nothing more
    for name in _docker_build_inputs():
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)])
    (wheel,) = (tmp_path / "dist").glob("flowpark-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    # --no-compile: the node compiles what it imports on first use, as any install without
    # pip's byte-compiling step would (compiling every dependency's modules was 6 of the
    # test's 38 s of CPU)
    _run([str(venv / "bin" / "pip"), "install", "-q", "--no-compile", str(wheel)])

    work = tmp_path / "work"  # an empty folder: no source tree, no alembic.ini
    flows = work / "flows"
    flows.mkdir(parents=True)
    (flows / "builds.py").write_text(BUILDS)
    (flows / "app").mkdir()
    (flows / "app" / "__init__.py").write_text('"""The team\'s own application package."""\n')
    (flows / "app" / "clients.py").write_text(CI_CLIENT)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWPARK_", "PYTHON"))}
    env.update(
        FLOWPARK_DATABASE_URL=f"sqlite:///{work}/flowpark.db",
        FLOWPARK_API_TOKENS="team-token",
        FLOWPARK_TIMER_SCAN_INTERVAL="0.2",
        FLOWPARK_START_WAIT_SECONDS="30",  # the start answers once parked, however loaded
        CI_BASE_URL=ci,
    )
    python = str(venv / "bin" / "python")
    for missing in ("app", "samples"):  # the wheel puts one package into site-packages
        done = subprocess.run(
            [python, "-c", f"import {missing}"], cwd=work, env=env, capture_output=True, text=True
        )
        assert done.returncode == 1, done
        assert f"ModuleNotFoundError: No module named '{missing}'" in done.stderr
    _run([python, "-c", "import flowpark.samples.registry"], cwd=work, env=env)
    flowpark = str(venv / "bin" / "flowpark")
    _run([flowpark, "db", "upgrade"], cwd=work, env=env)
    _run([flowpark, "flows", "check", "--flows", "flows"], cwd=work, env=env)
    log = (work / "serve.log").open("wb")
    node = subprocess.Popen(
        [flowpark, "serve", "--port", str(port), "--flows", "flows", "--log-level", "warning"],
        cwd=work,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    headers = {"Authorization": "Bearer team-token"}
    try:

        def up() -> None:
            assert node.poll() is None, (work / "serve.log").read_text()
            try:
                assert httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.TransportError as exc:
                raise AssertionError(f"not up yet: {exc!r}") from exc

        eventually_sync(up, timeout=60, what="the installed node answers")
        started = httpx.post(
            f"{base}/api/v1/builds",
            json={"commit": "abc123"},
            headers={**headers, "Idempotency-Key": "abc123"},
            timeout=30,
        )
        assert started.status_code == 202, started.text
        assert started.json()["status"] == "suspended"  # parked: one row, nothing held
        instance = started.json()["instanceId"]
        with closing(sqlite3.connect(work / "flowpark.db")) as db:
            (rows,) = db.execute("SELECT count(*) FROM flow_instance").fetchone()
        assert rows == 1  # the wait is this one row

        def completed() -> dict[str, object]:
            view: dict[str, object] = httpx.get(
                f"{base}/api/v1/instances/{instance}", headers=headers
            ).json()
            assert view["state"] == "completed", view
            return view

        view = eventually_sync(completed, timeout=60, what="the build waiter completes")
        assert view["result"] == {"state": "passed"}
        assert _Ci.reads == {"b1": 3}  # one status call per attempt, over real HTTP
        paths = httpx.get(f"{base}/openapi.json").json()["paths"]
        assert "/api/v1/builds" in paths
        assert [p for p in paths if p.startswith("/fake")] == []
    finally:
        node.terminate()
        node.wait(30)
        log.close()
    # the demo serves the samples the wheel carries (flowpark.samples), with its fastest
    # options: one page, no OCR time, a 0.1 s sweep
    demo = _run(
        [
            flowpark,
            "demo",
            "--port",
            "0",
            "--pages",
            "1",
            "--per-page",
            "0",
            "--scan-interval",
            "0.1",
            "--database-url",
            f"sqlite:///{work}/demo.db",
        ],
        cwd=work,
        env={k: v for k, v in env.items() if k != "FLOWPARK_DATABASE_URL"},
    )
    assert demo.stdout.count("completed") >= 2, demo.stdout
