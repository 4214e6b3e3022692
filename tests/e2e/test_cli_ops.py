"""The operator CLI (``flowpark instances ...``, ``flowpark flows list|show``) against a real
``flowpark serve`` process: list, explain, act, and the exit codes scripts rely on.

The commands run in the test's process (typer's ``CliRunner``: the same typer app, exit codes
and stdout/stderr as the console script, without a Python start-up per command); what is
about the process itself runs the ``flowpark`` script: ``--watch`` following an instance
while it changes, and the question a bulk action asks on a terminal.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from flowpark.cli import EXIT_CONFLICT, EXIT_FORBIDDEN, EXIT_NOT_FOUND, EXIT_UNREACHABLE
from flowpark.cli.main import app as flowpark_app
from tests.support.eventually import eventually_sync
from tests.support.server import TOKEN, SubprocessServer, flowpark_command, free_port
from tests.support.server import serve_subprocess as serve

pytestmark = pytest.mark.slow

VIEWER = "viewer-secret"


@pytest.fixture(scope="module")
def node(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("cli")
    shutil.copyfile(_sqlite_template, folder / "flowpark.db")
    with serve(
        f"sqlite:///{folder / 'flowpark.db'}",
        folder / "serve.log",
        api_tokens=f"{TOKEN},viewer:{VIEWER}:read",
        sample_ocr_per_page="3600",  # the OCR never finishes: documents stay parked
        ocr_callbacks="false",
        timer_scan_interval="0.5",
    ) as server:

        def up() -> None:
            try:
                status = httpx.get(f"{server.base_url}/healthz", timeout=2).status_code
            except httpx.HTTPError as exc:
                raise AssertionError(f"not up yet: {exc}") from None
            assert status == 200

        eventually_sync(up, timeout=30, what="flowpark serve answers")
        yield server


def start_document(node: SubprocessServer, instance_key: str | None = None) -> str:
    body: dict[str, Any] = {"documentId": f"doc-{uuid.uuid4().hex[:8]}", "pages": 1}
    if instance_key is not None:
        body["instanceKey"] = instance_key
    resp = httpx.post(
        f"{node.base_url}/api/v1/documents",
        json=body,
        headers={"Authorization": f"Bearer {TOKEN}", "Idempotency-Key": uuid.uuid4().hex},
        timeout=30,
    )
    assert resp.status_code == 202, resp.text
    assert resp.json()["status"] == "suspended"
    return str(resp.json()["instanceId"])


@dataclass(frozen=True)
class Ran:
    """What a command printed and its exit code (as ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def cli(
    node: SubprocessServer,
    *args: str,
    token: str | None = TOKEN,
    url: str | None = None,
    columns: int = 200,
) -> Ran:
    """``flowpark *args`` with ``FLOWPARK_URL``/``FLOWPARK_TOKEN`` (and no other
    ``FLOWPARK_*``) in the environment and ``COLUMNS`` wide, stdin and stdout not terminals."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("FLOWPARK_")}
    env.update(FLOWPARK_URL=url or node.base_url, COLUMNS=str(columns), FLOWPARK_TOKEN=token)
    done = CliRunner().invoke(flowpark_app, list(args), env=env, catch_exceptions=False)
    return Ran(done.exit_code, done.stdout, done.stderr)


def as_json(done: Ran) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def checks(node: SubprocessServer, instance_id: str) -> int:
    view = as_json(cli(node, "instances", "show", instance_id, "--json"))
    return sum(1 for r in view["journal"] if r["capabilityId"] == "ocr.status")


def test_list_explain_and_act_through_the_cli(node: SubprocessServer) -> None:
    first, second = start_document(node), start_document(node)
    listed = as_json(cli(node, "instances", "list", "--flow", "document.process", "--json"))
    ids = [r["instanceId"] for r in listed["instances"]]
    assert ids.index(second) < ids.index(first)  # newest first
    table = cli(node, "instances", "list", "--waiting", "poll", "--state", "suspended")
    assert table.returncode == 0, table.stderr
    assert first in table.stdout, table.stdout
    assert re.search(r"poll #\d+ ocr\.status", table.stdout), table.stdout
    narrow = cli(node, "instances", "list", "--flow", "document.process", columns=80)
    assert narrow.returncode == 0, narrow.stderr
    # under 120 columns the console's short form, never folded, and taken back by show
    short = f"{first[:8]}…{first[-6:]}"
    assert short in narrow.stdout and first not in narrow.stdout, narrow.stdout
    assert as_json(cli(node, "instances", "show", short, "--json"))["instanceId"] == first
    shown = cli(node, "instances", "show", first)
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"waiting: poll #\d+ ocr\.status", shown.stdout), shown.stdout
    assert "budget:" in shown.stdout and "attempts" in shown.stdout

    before = checks(node, first)
    # a wake that lands while the sweep runs the instance's due attempt is a recorded no-op
    # ("not parked"); the next one, under a new key, wakes it
    keys = iter(f"k{n}" for n in range(1, 20))

    def wake() -> dict[str, Any]:
        answer: dict[str, Any] = as_json(
            cli(node, "instances", "wake", first, "--json", "--key", next(keys))
        )
        assert answer["woken"] is True, answer
        return answer

    woken = eventually_sync(wake, timeout=60, what="a wake of a parked instance")
    assert woken["actor"] == "token-1"
    # (the sweep may run a due attempt too: exactly one per wake is pinned by the API tests)
    assert checks(node, first) >= before + 1
    view = as_json(cli(node, "instances", "show", first, "--json"))
    assert view["actions"] and {(a["action"], a["actor"]) for a in view["actions"]} == {
        ("wake", "token-1")
    }
    extended = as_json(cli(node, "instances", "extend", first, "--by", "PT1H", "--json"))
    assert extended["extended"] is True

    dry = cli(node, "instances", "wake", "--waiting", "poll", "--flow", "document.process",
              "--dry-run")  # fmt: skip
    assert dry.returncode == 0 and "match the filter); nothing done" in dry.stdout

    def bulk_wake() -> Any:
        """A bulk wake in batches of one over the documents waiting on their poll; each
        repeat only wakes them again. An instance whose attempt runs when the filter is read
        waits on nothing then (not matched); one the sweep takes between the read and the
        wake is skipped (not parked), never lost."""
        done = as_json(
            cli(
                node,
                "instances",
                "wake",
                "--flow",
                "document.process",
                "--waiting",
                "poll",
                "--batch",
                "1",
                "--json",
            )  # fmt: skip
        )
        assert done["matched"] >= 2, done  # more than one batch
        return done

    bulk = eventually_sync(bulk_wake, timeout=60, interval=0.5, what="a bulk wake of 2 or more")
    assert bulk["acted"] + bulk["skipped"] == bulk["matched"]
    assert bulk["acted"] >= 1

    cancelled = cli(node, "instances", "cancel", second)
    assert cancelled.returncode == 0, cancelled.stderr
    # the bulk wake's wakes run at the sweep's next pass: a node may be running this one
    # now, and then the cancel takes effect when its call ends
    assert "state cancelled" in cancelled.stdout or "cancel requested" in cancelled.stdout

    def ended() -> None:
        shown = as_json(cli(node, "instances", "show", second, "--json"))
        assert shown["state"] == "cancelled", shown["state"]

    eventually_sync(ended, timeout=60, what="the cancelled instance ended")
    again = cli(node, "instances", "cancel", second)
    assert again.returncode == EXIT_CONFLICT and "error: instance_ended:" in again.stderr
    assert cli(node, "instances", "wake", second).returncode == EXIT_CONFLICT

    counts = as_json(cli(node, "instances", "counts", "--json"))
    assert counts["flows"]["document.process"]["1.0.0"]["cancelled"] >= 1


def test_signal_and_watch_until_the_instance_ends(node: SubprocessServer) -> None:
    instance_id = start_document(node)
    signalled = cli(
        node,
        "instances",
        "signal",
        instance_id,
        "ocr.completed",
        "--data",
        '{"jobId": "not-its-job", "status": "completed"}',
    )
    assert signalled.returncode == 0, signalled.stderr
    assert "signal ocr.completed stored, not matched" in signalled.stdout  # not its job
    watcher = subprocess.Popen(
        [*flowpark_command(), "instances", "show", instance_id, "--watch", "--interval", "0.2"],
        env={**os.environ, "FLOWPARK_URL": node.base_url, "FLOWPARK_TOKEN": TOKEN},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert watcher.stdout is not None
        first_line = watcher.stdout.readline()  # it is following the parked instance
        assert "suspended" in first_line, first_line
        assert cli(node, "instances", "cancel", instance_id).returncode == 0
        out, errors = watcher.communicate(timeout=60)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
    assert watcher.returncode == 1, out + errors  # it ended, not completed
    assert "cancelled" in out and "action: cancel by token-1" in out


def test_flows_list_and_the_plan_as_a_tree(node: SubprocessServer) -> None:
    listed = cli(node, "flows", "list")
    assert listed.returncode == 0 and "document.process" in listed.stdout
    narrow = cli(node, "flows", "list", columns=80)
    assert narrow.returncode == 0 and "document.process" in narrow.stdout, narrow.stdout
    tree = cli(node, "flows", "show", "document.process")
    assert tree.returncode == 0, tree.stderr
    for part in (
        "document.process@1.0.0",
        "step ocr.upload",
        "poll every 5s",
        "(jitter 50%)",
        "budget 4h",
        "or signal ocr.completed",
        "body: [",
        "ocr.status",
        "fail document.not_read_in_time",
        "providers: ocr",
    ):
        assert part in tree.stdout, (part, tree.stdout)
    assert "PROVIDERS" in listed.stdout.splitlines()[0]
    plan = as_json(cli(node, "flows", "show", "document.process", "--json"))
    assert any(n["kind"] == "poll" for n in plan["steps"])


def test_exit_codes_scripts_can_trust(node: SubprocessServer) -> None:
    instance_id = start_document(node)
    unknown = cli(node, "instances", "show", str(uuid.uuid4()))
    assert unknown.returncode == EXIT_NOT_FOUND
    assert unknown.stderr.startswith("error: instance_not_found:")
    no_flow = cli(node, "flows", "show", "no.such.flow")
    assert no_flow.returncode == EXIT_NOT_FOUND
    read_only = cli(node, "instances", "wake", instance_id, token=VIEWER)
    assert read_only.returncode == EXIT_FORBIDDEN and "error: forbidden:" in read_only.stderr
    tokenless = cli(node, "instances", "list", token=None)
    assert tokenless.returncode == EXIT_FORBIDDEN
    assert tokenless.stderr.startswith("error: unauthorized:"), tokenless.stderr
    assert "set FLOWPARK_TOKEN" in tokenless.stderr, tokenless.stderr
    assert cli(node, "instances", "list", token="wrong").returncode == EXIT_FORBIDDEN
    gone = cli(node, "instances", "list", url=f"http://127.0.0.1:{free_port()}")
    assert gone.returncode == EXIT_UNREACHABLE and gone.stderr.startswith("error: unreachable:")
    assert cli(node, "instances", "wake").returncode == 2  # neither an id nor a filter
    ill_typed = cli(node, "instances", "extend", instance_id, "--by", "banana")
    assert ill_typed.returncode == 2  # refused before anything is sent, in our words
    assert ill_typed.stderr == (
        "error: usage: --by 'banana' is not a duration (90, 90s, 15m, 2h, 1d, 1h30m or PT2H)\n"
    ), ill_typed.stderr
    assert cli(node, "instances", "list", "--state", "asleep").returncode == 2
    for done in (read_only, unknown):
        assert VIEWER not in done.stdout + done.stderr


def test_a_bulk_action_without_a_filter_needs_all(node: SubprocessServer) -> None:
    instance_id = start_document(node)
    for action in ("wake", "cancel"):
        refused = cli(node, "instances", action)
        assert refused.returncode == 2 and refused.stdout == ""
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: usage: {action} needs"), lines
        assert "--all" in lines[0]
        both = cli(node, "instances", action, instance_id, "--all")
        assert both.returncode == 2 and "not both" in both.stderr
    dry = as_json(cli(node, "instances", "cancel", "--all", "--dry-run", "--json"))
    assert dry["dryRun"] is True and dry["matched"] >= 1 and dry["acted"] == 0
    assert as_json(cli(node, "instances", "show", instance_id, "--json"))["state"] == "suspended"
    woken = as_json(cli(node, "instances", "wake", "--all", "--json"))
    assert woken["matched"] >= 1 and woken["acted"] + woken["skipped"] == woken["matched"]


def test_nodes_lists_the_serving_node_and_its_sweeps(node: SubprocessServer) -> None:
    def swept() -> dict[str, Any]:
        done = cli(node, "nodes", "--json")
        assert done.returncode == 0, done.stderr
        answer: dict[str, Any] = json.loads(done.stdout)
        assert answer["nodes"] and answer["nodes"][0]["lastSweepAt"], answer
        return answer

    answer = eventually_sync(swept, timeout=30, what="a sweep recorded")
    assert answer["sweeping"] == 1 and answer["notice"] is None
    table = cli(node, "nodes")
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()[:2]
    assert header.split()[:4] == ["NODE", "ROLE", "VERSION", "STATE"]
    assert row.split()[1:2] == ["serve"] and "sweeping" in row
    assert "document.process@1.0.0" in row
    assert "1 live, 1 sweeping" in table.stdout
    assert table.stderr == ""
    assert cli(node, "nodes", token=None).returncode == EXIT_FORBIDDEN


def test_show_prints_each_execution_with_what_it_put(node: SubprocessServer) -> None:
    instance_id = start_document(node)
    shown = cli(node, "instances", "show", instance_id)
    assert shown.returncode == 0, shown.stderr
    journal = shown.stdout[shown.stdout.index("journal") :]
    status = next(line for line in journal.splitlines() if "ocr.status" in line)
    assert 'OcrStatus={"' in status and '"status": ' in status


def test_list_shows_the_display_key_and_an_id_prefix_names_an_instance(
    node: SubprocessServer,
) -> None:
    first, second = start_document(node, instance_key="batch-7"), start_document(node)
    listed = cli(node, "instances", "list", "--json")
    keys = {r["instanceId"]: r["displayKey"] for r in json.loads(listed.stdout)["instances"]}
    assert keys[first].startswith("doc-") and keys[first] != keys[second]
    table = cli(node, "instances", "list")
    assert table.stdout.splitlines()[0].split()[:3] == ["INSTANCE", "KEY", "DISPLAY"]
    row = next(line for line in table.stdout.splitlines() if first in line)
    assert row.split()[1:3] == ["batch-7", keys[first]]  # KEY is the instanceKey
    row = next(line for line in table.stdout.splitlines() if second in line)
    assert row.split()[1:3] == ["-", keys[second]]
    found = cli(node, "instances", "list", "--display-key", keys[second], "--json")
    assert [r["instanceId"] for r in json.loads(found.stdout)["instances"]] == [second]

    others = [i for i in keys if i != first]  # the module's other instances too
    unique = next(
        first[:n] for n in range(8, 37) if not any(i.startswith(first[:n]) for i in others)
    )
    shown = cli(node, "instances", "show", unique, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["instanceId"] == first
    common = first[:4]
    assert second.startswith(common)  # ids made the same minute share their start
    ambiguous = cli(node, "instances", "show", common)
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.startswith("error: usage: more than one instance id matches")
    missing = cli(node, "instances", "show", "ffff0000")
    assert missing.returncode == EXIT_NOT_FOUND
    assert "no instance id matches ffff0000" in missing.stderr
    # the console's short form (its first 8 and last 6 characters), and a full id in capitals
    for given in (f"{first[:8]}…{first[-6:]}", f"{first[:8]}...{first[-6:]}", first.upper()):
        shown = cli(node, "instances", "show", given, "--json")
        assert shown.returncode == 0, (given, shown.stderr)
        assert json.loads(shown.stdout)["instanceId"] == first


def _document_key(node: SubprocessServer, instance_id: str) -> str:
    return str(as_json(cli(node, "instances", "show", instance_id, "--json"))["displayKey"])


def test_a_bulk_dry_run_counts_what_the_action_would_touch(node: SubprocessServer) -> None:
    ended, parked = start_document(node), start_document(node)
    assert cli(node, "instances", "cancel", ended).returncode == 0
    keys = [_document_key(node, ended), _document_key(node, parked)]
    for key, matched, actionable in ((keys[0], 1, 0), (keys[1], 1, 1)):
        counted = as_json(
            cli(node, "instances", "cancel", "--display-key", key, "--dry-run", "--json")
        )
        assert (counted["matched"], counted["actionable"]) == (matched, actionable), counted
    woken = cli(node, "instances", "wake", "--display-key", keys[0], "--dry-run")
    assert woken.stdout.startswith("0 instance(s) would be woken (1 match the filter)")
    every = as_json(cli(node, "instances", "cancel", "--all", "--dry-run", "--json"))
    assert every["actionable"] < every["matched"]  # ended instances are not counted


def _on_a_terminal(node: SubprocessServer, answer: str, *args: str) -> str:
    """Run the CLI with a pseudo-terminal as stdin and stderr (util-linux ``script``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWPARK_")}
    env.update(FLOWPARK_URL=node.base_url, FLOWPARK_TOKEN=TOKEN, COLUMNS="200")
    command = " ".join([*flowpark_command(), *args])
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        input=answer,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + f"\n[exit {done.returncode}]"


def test_a_bulk_cancel_asks_on_a_terminal_unless_yes(node: SubprocessServer) -> None:
    target = start_document(node)
    key = _document_key(node, target)
    refused = _on_a_terminal(node, "n\n", "instances", "cancel", "--display-key", key)
    assert "Cancel 1 instance(s)?" in refused
    assert "aborted: nothing cancelled" in refused and "[exit 1]" in refused
    state = as_json(cli(node, "instances", "show", target, "--json"))["state"]
    assert state == "suspended"
    done = _on_a_terminal(node, "", "instances", "cancel", "--display-key", key, "--yes")
    assert "Cancel 1 instance(s)?" not in done and "[exit 0]" in done, done
    assert as_json(cli(node, "instances", "show", target, "--json"))["state"] == "cancelled"
    # piped (no terminal to answer), it does not ask
    again = start_document(node)
    piped = cli(node, "instances", "cancel", "--display-key", _document_key(node, again))
    assert piped.returncode == 0 and "1 acted on" in piped.stdout, piped.stderr
