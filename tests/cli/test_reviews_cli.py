"""``flowpark reviews list|show|claim|resolve|dismiss`` against a real server: a timed-out
instance's review is listed with the API's filters, shown with its instance, claimed and
resolved; refusals leave with the documented exit codes (4 not found, 5 conflict, 6
forbidden, 2 usage)."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from flowpark.cli import EXIT_CONFLICT, EXIT_FORBIDDEN, EXIT_NOT_FOUND
from flowpark.cli.main import app
from flowpark.testing import Scripted
from tests.api.operator_support import Operated, operated
from tests.engine.flows import poll_flow
from tests.support.server import TOKEN

OPS = "ops-secret"
VIEW = "view-secret"
TOKENS = f"{TOKEN},ops:{OPS}:read+operate,viewer:{VIEW}:read"


def _escalate(ctx: Any) -> None:
    ctx.request_review(ctx.input.order_id, "the check did not finish in time")


@pytest.fixture
async def op(_sqlite_template: Path, tmp_path: Path) -> AsyncIterator[Operated]:
    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    async with operated(
        f"sqlite:///{tmp_path / 'flowpark.db'}",
        [poll_flow()],
        substitutes={"t.escalate": Scripted(_escalate)},
        api_tokens=TOKENS,
    ) as running:
        yield running


def _run(op: Operated, *args: str, token: str = OPS) -> Any:
    runner = CliRunner()
    env = {"FLOWPARK_URL": op.server.base_url, "FLOWPARK_TOKEN": token, "COLUMNS": "200"}
    return runner.invoke(app, list(args), env=env)


async def test_a_person_lists_claims_and_resolves_a_review(op: Operated) -> None:
    inst = (await op.h.start("t.poll", {"order_id": "o-cli"}, version="1.0.0")).instance
    await op.h.wait_until(lambda i: i.state.ended, inst.id)

    listed = _run(op, "reviews", "list", "--state", "open", "--instance", inst.id)
    assert listed.exit_code == 0, listed.output
    assert "o-cli" in listed.stdout and "open" in listed.stdout and "1 review(s)" in listed.stdout
    as_json = json.loads(_run(op, "reviews", "list", "--flow", "t.poll", "--json").stdout)
    review_id = next(i["id"] for i in as_json if i["instanceId"] == inst.id)

    shown = _run(op, "reviews", "show", review_id)
    assert shown.exit_code == 0, shown.output
    assert "the check did not finish in time" in shown.stdout
    assert f"instance: {inst.id}  t.poll@1.0.0  failed" in shown.stdout
    assert "error: t.not_done" in shown.stdout

    forbidden = _run(op, "reviews", "claim", review_id, token=VIEW)
    assert forbidden.exit_code == EXIT_FORBIDDEN, forbidden.output
    claimed = _run(op, "reviews", "claim", review_id)
    assert claimed.exit_code == 0 and "claimed by ops" in claimed.stdout
    mine = _run(op, "reviews", "list", "--claimed-by", "ops", "--json")
    assert [i["id"] for i in json.loads(mine.stdout)] == [review_id]

    resolved = _run(op, "reviews", "resolve", review_id, "--note", "re-ran it", "--json")
    assert resolved.exit_code == 0, resolved.output
    body = json.loads(resolved.stdout)
    assert (body["state"], body["closedBy"], body["note"]) == ("resolved", "ops", "re-ran it")

    closed = _run(op, "reviews", "dismiss", review_id)
    assert closed.exit_code == EXIT_CONFLICT
    assert closed.stderr.startswith("error: review_closed:")
    missing = _run(op, "reviews", "show", "no-such-review")
    assert missing.exit_code == EXIT_NOT_FOUND
    assert missing.stderr.startswith("error: review_not_found:")
    usage = _run(op, "reviews", "list", "--state", "bogus")
    assert usage.exit_code == 2
