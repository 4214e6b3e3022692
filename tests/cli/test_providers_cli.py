"""``flowpark providers list|show|set`` against a real server (uvicorn on loopback): tables
for people, the API's JSON with ``--json``, and the exit codes of the other groups."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from flowpark.engine.ports.providers import ProviderState
from flowpark.engine.records import WakeKind
from tests.api.operator_support import operated
from tests.api.test_providers_api import deferred, flow

runner = CliRunner()


async def test_list_show_and_set_a_limit(_sqlite_template: Path, tmp_path: Path) -> None:
    from flowpark.cli.main import app

    shutil.copyfile(_sqlite_template, tmp_path / "flowpark.db")
    async with operated(f"sqlite:///{tmp_path / 'flowpark.db'}", [flow()]) as op:
        h = op.h
        now = h.clock.now()
        state = ProviderState("ocr", 10, 20, None, 10, None, None, 0, now, "declared")
        await h.store.providers.declare([state], now)
        waiting = await deferred(op, 30, WakeKind.PROVIDER_BUDGET)
        common = ["--url", op.server.base_url, "--token", op.server.token]

        listed = runner.invoke(app, ["providers", "list", *common])
        assert listed.exit_code == 0, listed.output
        lines = listed.output.splitlines()
        assert lines[0].split()[:4] == ["PROVIDER", "LIMIT", "BURST", "EFFECTIVE"]
        assert lines[1].split()[:4] == ["ocr", "10/s", "20", "10/s"]
        assert "1 + 0 by pushback" in lines[1] and "declared" in lines[1]

        # the deferred instance is found by what it waits for
        found = runner.invoke(
            app, ["instances", "list", "--waiting", "provider_budget", "--json", *common]
        )
        assert found.exit_code == 0, found.output
        assert [r["instanceId"] for r in json.loads(found.output)["instances"]] == [waiting]

        as_json = runner.invoke(app, ["providers", "list", *common, "--json"])
        assert json.loads(as_json.output)[0]["deferred"] == 1

        # docs/providers.md watches them with the bare group: the same table (was exit 2)
        bare = runner.invoke(app, ["providers", *common])
        assert bare.exit_code == 0, bare.output
        assert bare.output == listed.output
        bare_json = runner.invoke(app, ["providers", *common, "--json"])
        assert bare_json.exit_code == 0 and json.loads(bare_json.output) == json.loads(
            as_json.output
        )
        misplaced = runner.invoke(app, ["providers", *common, "show", "ocr"])
        assert misplaced.exit_code == 2, misplaced.output  # the command would not see them
        assert "give --url, --token after the command" in misplaced.output

        shown = runner.invoke(app, ["providers", "show", "ocr", *common])
        assert shown.exit_code == 0, shown.output
        assert "deferred now" in shown.output and waiting in shown.output
        assert "p.poll@1.0.0" in shown.output

        changed = runner.invoke(app, ["providers", "set", "ocr", "--rate", "25", *common])
        assert changed.exit_code == 0, changed.output
        assert "25/s, burst 20" in changed.output and "token-1" in changed.output
        assert (await h.store.providers.states())[0].rate_per_second == 25

        bad = runner.invoke(app, ["providers", "set", "ocr", "--rate", "0", *common])
        assert bad.exit_code == 1 and "input_invalid" in bad.output
        nothing = runner.invoke(app, ["providers", "set", "ocr", *common])
        assert nothing.exit_code == 2
        for args in (["show", ""], ["show", "OCR!"], ["set", "", "--rate", "1"]):
            misnamed = runner.invoke(app, ["providers", *args, *common])
            assert misnamed.exit_code == 2, misnamed.output  # was 4 "no route", 1
            assert "is not a provider's name" in misnamed.output
        for rate in ("nan", "inf"):
            endless = runner.invoke(app, ["providers", "set", "ocr", "--rate", rate, *common])
            assert endless.exit_code == 2, endless.output  # was 1 "the body is not JSON"
            assert "is not a number of calls per second" in endless.output
        unknown = runner.invoke(app, ["providers", "show", "nope", *common])
        assert unknown.exit_code == 4 and "provider_not_found" in unknown.output
        anonymous = runner.invoke(
            app, ["providers", "list", "--url", op.server.base_url, "--token", "x"]
        )
        assert anonymous.exit_code == 6
