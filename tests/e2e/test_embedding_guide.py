"""``docs/embedding.md`` as a reader runs it: the page's ``flows.py`` and ``app.py`` written
into a folder, its serve block run by bash there (``flowpark db upgrade``, then a real
``uvicorn app:app`` in a child process), its curl block run against it, then:

* the app's own route answers as the app wrote it;
* a start inside the route's transaction that commits: the instance completes, and its
  capability ran once;
* one that rolls back (the same order again, its ``INSERT`` refused after the start): 409,
  and no second instance;
* flowpark's routes under the prefix (its health, its API behind its token, answering
  problem+json);
* the app's ``/openapi.json`` lists the app's operations and flowpark's, the latter
  tagged ``flowpark: ...``.

The node runs on a free port instead of the page's 8000.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.eventually import eventually
from tests.support.guide import Block, guide_blocks, write_files
from tests.support.server import free_port

pytestmark = pytest.mark.slow

PAGE = Path(__file__).resolve().parents[2] / "docs" / "embedding.md"
PAGE_PORT = "8000"
#: The token the page's serve block sets.
AUTH = {"Authorization": "Bearer ops-token"}
STOP_SECONDS = 30.0


@pytest.fixture
def blocks() -> dict[str, Block]:
    return guide_blocks(PAGE)


@pytest.fixture
def folder(tmp_path: Path, blocks: dict[str, Block]) -> Path:
    reader = tmp_path / "reader"
    written = write_files(reader, blocks)
    assert sorted(p.name for p in written) == ["app.py", "flows.py"]
    return reader


@pytest.fixture
def env() -> dict[str, str]:
    """A reader's shell: ``flowpark``, ``uvicorn`` and ``python3`` on the PATH, no flowpark
    setting of this process's own."""
    shell = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    shell.pop("PYTHONPATH", None)
    shell["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{shell.get('PATH', '')}"
    shell["PYTHONUNBUFFERED"] = "1"
    return shell


def on_port(block: Block, port: int) -> str:
    assert PAGE_PORT in block.code, block
    return block.code.replace(PAGE_PORT, str(port))


@contextmanager
def served(code: str, folder: Path, env: dict[str, str], log: Path) -> Iterator[None]:
    """The page's serve block in a child process (a session of its own), stopped with
    SIGINT (Ctrl-C)."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", code],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def run_shell(code: str, folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


async def completed(http: httpx.AsyncClient, instance_id: str) -> dict[str, Any]:
    view: dict[str, Any] = (
        await http.get(f"/flowpark/api/v1/instances/{instance_id}", headers=AUTH)
    ).json()
    assert view["state"] == "completed", view
    return view


async def confirm_instances(http: httpx.AsyncClient) -> list[str]:
    listed = await http.get(
        "/flowpark/api/v1/instances", params={"flow": "order.confirm"}, headers=AUTH
    )
    assert listed.status_code == 200, listed.text
    return [row["instanceId"] for row in listed.json()["instances"]]


@pytest.mark.timeout(180)
async def test_the_pages_app_serves_its_routes_and_flowparks_and_starts_in_its_transaction(
    blocks: dict[str, Block], folder: Path, env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    with served(on_port(blocks["serve"], port), folder, env, log):
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:

            async def up() -> None:
                try:
                    answer = await http.get("/flowpark/healthz")
                except httpx.TransportError as exc:
                    raise AssertionError(f"not serving yet: {exc}\n{log.read_text()}") from exc
                assert answer.status_code == 200, log.read_text()

            await eventually(up, timeout=90, what="the page's app serving")

            # the page's curl commands: the order, the app's route, the list, the repeat
            out = run_shell(on_port(blocks["try"], port), folder, env)
            assert '"order":"o-1"' in out and '"detail":"the order exists"' in out, out

            # the app's own route: the order row, holding its flow's instance id
            order = (await http.get("/orders/o-1")).json()
            assert order["order"] == "o-1" and len(order["flow"]) == 36, order
            # committed: the instance runs on the app's process and completes
            await eventually(lambda: completed(http, order["flow"]), timeout=30)
            # rolled back (the repeat of o-1 in the page's commands, and one more here):
            # no second instance
            again = await http.post("/orders/o-1")
            assert again.status_code == 409, again.text
            assert await confirm_instances(http) == [order["flow"]]

            # another order: one more instance, completed; the app's route finds it
            placed = await http.post("/orders/o-2")
            assert placed.status_code == 200, placed.text
            second = placed.json()["flow"]
            await eventually(lambda: completed(http, second), timeout=30)
            assert sorted(await confirm_instances(http)) == sorted([order["flow"], second])
            assert (await http.get("/orders/o-2")).json() == {"order": "o-2", "flow": second}
            assert (await http.get("/orders/o-3")).status_code == 404

            # flowpark's API under the prefix: its token, its problem+json
            refused = await http.get("/flowpark/api/v1/instances")
            assert refused.status_code == 401
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert refused.json()["code"] == "unauthorized"

            # one OpenAPI document: the app's operations and flowpark's, tagged
            document = (await http.get("/openapi.json")).json()
            paths = document["paths"]
            assert set(paths["/orders/{order_id}"]) == {"get", "post"}
            instance = paths["/flowpark/api/v1/instances/{instance_id}"]["get"]
            assert instance["tags"] == ["flowpark: instances"]
            assert "/api/v1/instances" not in paths  # flowpark's paths only under the prefix

    # each order's flow ran once: the capability's line, once per committed order
    output = log.read_text()
    assert output.count("confirming order o-1 ") == 1, output
    assert output.count("confirming order o-2 ") == 1, output
