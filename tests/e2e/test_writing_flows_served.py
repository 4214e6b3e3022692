"""``docs/writing-flows.md`` as a reader runs it: the page's files written into a folder, its
command blocks run by bash in that folder (``flows check``, ``db upgrade``, then ``flowpark
serve`` as the page writes it, in a child process, and the page's curl commands against it).

* A build that passes: the start parks, a webhook that says the build still runs is stored
  unmatched and ends nothing, the fake CI finishes the build, the matching webhook ends the
  wait at once (no second status check), and the instance completes with the build passed.
* A build that never finishes: on the node the page serves with its short budget, the budget
  runs out; the ``on_timeout`` block puts the build in the review queue and fails the flow
  (``ci.build_timed_out``), and the compensation cancels the build on the fake CI.

The page's own knobs set the durations (``CI_BUILD_BUDGET``, shortened here from the page's
20 s to keep the run short; ``FLOWPARK_TIMER_SCAN_INTERVAL`` as the page sets it;
``CI_POLL_FIRST`` lengthened on the passing build, so that only the webhook can end its wait
in time); the node
runs on a free port instead of the page's 8000 (``FLOWPARK_SELF_URL`` says where, as the page
says to). Waiting is :func:`eventually` over the API.
"""

from __future__ import annotations

import os
import re
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

#: The port the page's commands name.
PAGE_PORT = "8000"
#: The page's token (the node's default ``FLOWPARK_API_TOKENS``).
AUTH = {"Authorization": "Bearer dev-token"}
SHORT_BUDGET = "PT6S"
STOP_SECONDS = 30.0


@pytest.fixture
def blocks() -> dict[str, Block]:
    return guide_blocks()


@pytest.fixture
def folder(tmp_path: Path, blocks: dict[str, Block]) -> Path:
    """The reader's folder: the page's files, written as the page names them."""
    reader = tmp_path / "reader"
    write_files(reader, blocks)
    return reader


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def env(port: int) -> dict[str, str]:
    """A reader's shell: ``flowpark`` and ``python3`` on the PATH, no flowpark or CI setting
    of this process's own; the node says where it reaches itself (its fake CI)."""
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWPARK_", "CI_"))}
    shell["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{shell.get('PATH', '')}"
    shell["FLOWPARK_SELF_URL"] = f"http://127.0.0.1:{port}"
    # the start answers once the instance parks, however loaded the test machine is
    shell["FLOWPARK_START_WAIT_SECONDS"] = "30"
    shell["PYTHONUNBUFFERED"] = "1"
    return shell


def on_port(block: Block, port: int) -> str:
    assert PAGE_PORT in block.code, block
    return block.code.replace(PAGE_PORT, str(port))


def run_shell(code: str, folder: Path, env: dict[str, str]) -> str:
    """Run ``code`` with bash (``-euo pipefail``: any failing command fails it); its stdout."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"{code}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    return done.stdout


def instance_of(block: Block, port: int, folder: Path, env: dict[str, str]) -> tuple[str, str]:
    """Run a block that sets ``$INSTANCE``; (its output, the instance id)."""
    out = run_shell(
        on_port(block, port) + '\nprintf "\\nINSTANCE=%s\\n" "$INSTANCE"\n', folder, env
    )
    found = re.search(r"^INSTANCE=([0-9a-f-]{36})$", out, flags=re.M)
    assert found, out
    return out, found.group(1)


@contextmanager
def served(code: str, folder: Path, env: dict[str, str], log: Path) -> Iterator[str]:
    """Run the page's serve command in a child process (a session of its own); yields the
    base URL once ``/healthz`` answers... (see :func:`up`); stops it with SIGINT (Ctrl-C)."""
    port = re.search(r"--port (\d+)", code)
    assert port, code
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["bash", "-c", code],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port.group(1)}"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


async def up(http: httpx.AsyncClient, log: Path) -> None:
    async def healthy() -> None:
        try:
            resp = await http.get("/healthz")
        except httpx.TransportError as exc:
            raise AssertionError(f"not serving yet: {exc}\n{log.read_text()}") from exc
        assert resp.status_code == 200, log.read_text()

    await eventually(healthy, timeout=60, what="the page's node serving")


async def ended(http: httpx.AsyncClient, instance: str) -> dict[str, Any]:
    view: dict[str, Any] = (await http.get(f"/api/v1/instances/{instance}")).json()
    assert view["state"] in ("completed", "failed", "cancelled"), view["state"]
    return view


def capabilities(view: dict[str, Any]) -> list[str]:
    return [row["capabilityId"] for row in view["journal"]]


async def test_a_build_that_passes_ends_its_wait_on_the_matching_webhook(
    blocks: dict[str, Block], folder: Path, port: int, env: dict[str, str], tmp_path: Path
) -> None:
    checked = run_shell(blocks["check"].code, folder, env)
    assert "ok: ci.build@1.0.0" in checked
    assert (folder / "flowpark.db").is_file()

    log = tmp_path / "serve.log"
    # the page's first-check knob, set long: however slowly this machine runs the page's
    # commands, no status check runs between the start and the webhook
    env = {**env, "CI_POLL_FIRST": "PT1M"}
    with served(on_port(blocks["serve"], port), folder, env, log) as base:
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as http:
            await up(http, log)
            out, instance = instance_of(blocks["pass"], port, folder, env)
            view = await eventually(lambda: ended(http, instance), timeout=30)

    compact = out.replace(" ", "")
    assert '"state":"running"' in compact  # the fake CI's build, before it finished
    assert '"matched":false' in compact and '"matched":true' in compact, out
    assert view["state"] == "completed", view
    assert view["result"] == {"build": "b-1", "state": "passed"}
    # the webhook that said "running" was kept and ended nothing; the other ended the wait
    assert [(s["payload"]["state"], s["matched"]) for s in view["signals"]] == [
        ("running", False),
        ("passed", True),
    ]
    # ... at once: after the budget's instant, one status check before it (attempt 0) and
    # the final one after it
    assert capabilities(view) == [
        "ci.start",
        "poll.budget",
        "ci.status",
        "ci.finished",
        "ci.status",
    ]


async def test_a_build_that_never_finishes_is_reviewed_cancelled_and_failed(
    blocks: dict[str, Block], folder: Path, port: int, env: dict[str, str], tmp_path: Path
) -> None:
    run_shell(blocks["check"].code, folder, env)
    serve = on_port(blocks["timeout-serve"], port)
    assert "CI_BUILD_BUDGET=PT20S" in serve and "FLOWPARK_TIMER_SCAN_INTERVAL=1" in serve
    serve = serve.replace("CI_BUILD_BUDGET=PT20S", f"CI_BUILD_BUDGET={SHORT_BUDGET}")

    log = tmp_path / "serve.log"
    with served(serve, folder, env, log) as base:
        async with httpx.AsyncClient(base_url=base, headers=AUTH, timeout=30) as http:
            await up(http, log)
            _, instance = instance_of(blocks["timeout-start"], port, folder, env)
            view = await eventually(lambda: ended(http, instance), timeout=60)
            read = run_shell(
                on_port(blocks["timeout-read"], port), folder, {**env, "INSTANCE": instance}
            )
            reviews = (await http.get("/api/v1/reviews")).json()
            builds = (await http.get("/fake-ci/builds")).json()

    assert view["state"] == "failed", view
    assert view["error"]["code"] == "ci.build_timed_out", view["error"]
    assert "ci.build_timed_out" in read and '"cancelled"' in read, read
    assert [(r["instanceId"], r["subject"], r["reason"]) for r in reviews] == [
        (instance, "b-1", f"the build did not finish within {SHORT_BUDGET}")
    ]
    assert builds == [{"id": "b-1", "repo": "shop", "commit": "def", "state": "cancelled"}]
    # every status check found the build running; then the escalation and the compensation
    done = capabilities(view)
    assert done[:3] == ["ci.start", "poll.budget", "ci.status"], done
    assert done[3:-2] == ["ci.status"] * (len(done) - 5), done
    assert done[-2:] == ["ci.escalate", "ci.cancel"], done
