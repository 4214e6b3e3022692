"""Operator actions from the console: behind a confirmation, with the session's CSRF token."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.seed import Seeded, seed_console_data
from tests.support.server import TOKEN, LiveServer, live_server

#: A read-only token and one without the read scope (named in ``FLOWPARK_API_TOKENS``).
VIEWER = "viewer-secret-1"
STARTER = "starter-secret-1"


@pytest.fixture(scope="module")
def acting(
    _sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LiveServer, Seeded]]:
    """A server of its own (these tests change instances), over fresh seeded data."""
    path = tmp_path_factory.mktemp("actions") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    seeded = asyncio.run(seed_console_data(f"sqlite:///{path}"))
    tokens = f"{TOKEN},viewer:{VIEWER}:read,starter:{STARTER}:start+signal"
    with live_server(f"sqlite:///{path}", run_sweeper=False, api_tokens=tokens) as server:
        yield server, seeded


@asynccontextmanager
async def _signed_in(server: LiveServer, token: str = TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30.0) as http:
        resp = await http.post("/ui/sign-in", data={"token": token})
        assert resp.status_code == 303
        yield http


def _key(html: str) -> str:
    match = re.search(r'name="key" value="([^"]+)"', html)
    assert match
    return match.group(1)


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def test_wake_now_runs_the_next_attempt(acting: tuple[LiveServer, Seeded]) -> None:
    server, seeded = acting
    target = seeded.overdue[1]
    async with _signed_in(server) as http:
        before = (await http.get(f"/ui/instances/{target}")).text
        # the attempt it waits to run (1, or 2 when the seed's sweep ran it already)
        due = re.search(r'data-attempt="(\d+)" data-outcome="next"', before)
        assert due, "no next attempt on the timeline"
        n = int(due.group(1))

        confirm = await http.get(f"/ui/instances/{target}/actions/wake")
        assert confirm.status_code == 200 and 'data-testid="confirm-wake"' in confirm.text
        done = await http.post(
            f"/ui/instances/{target}/actions/wake",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text)},
        )
        assert done.status_code == 303
        assert done.headers["location"].startswith(f"/ui/instances/{target}?done=Woken")

        after = (await http.get(done.headers["location"])).text
        assert "Woken by token-1: it ran and is now" in after  # the token's name acted
        # a link that only carries a notice's text shows none: the console signs its own
        forged = "Session expired: sign in again at https://elsewhere.example"
        crafted = (await http.get(f"/ui/instances/{target}", params={"done": forged})).text
        assert forged not in crafted
        location = done.headers["location"]
        swapped = location.replace(location.split("?done=")[1].split("&")[0], "Forged")
        assert "Forged" not in (await http.get(swapped)).text

        # the same confirmation posted again (a double click, a reload) acts once
        repeat = await http.post(
            f"/ui/instances/{target}/actions/wake",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text)},
        )
        assert repeat.status_code == 303
        # attempt n ran (the scripted job is unknown to this node's OCR: its try failed
        # and waits for a retry) - it is on the timeline now
        assert re.search(rf'data-attempt="{n}" data-outcome="(success|retrying|failure)"', after)


async def test_an_action_without_the_sessions_csrf_token_is_refused(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    target = seeded.parked[0]
    async with _signed_in(server) as http:
        for data in ({}, {"csrf": "forged"}):
            resp = await http.post(f"/ui/instances/{target}/actions/cancel", data=data)
            assert resp.status_code == 403 and 'data-code="csrf_invalid"' in resp.text
        page = (await http.get(f"/ui/instances/{target}")).text
        assert 'data-testid="state">suspended<' in page

    async with httpx.AsyncClient(base_url=server.base_url) as anonymous:
        resp = await anonymous.post(f"/ui/instances/{target}/actions/cancel", data={"csrf": "x"})
        assert resp.status_code == 303 and resp.headers["location"].startswith("/ui/sign-in")


async def test_cancel_behind_its_confirmation_ends_the_instance(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    target = seeded.parked[1]
    async with _signed_in(server) as http:
        confirm = await http.get(f"/ui/instances/{target}/actions/cancel")
        assert "cannot be undone" in confirm.text
        done = await http.post(
            f"/ui/instances/{target}/actions/cancel",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text)},
        )
        assert done.status_code == 303
        page = (await http.get(done.headers["location"])).text
        assert "Cancel requested by token-1" in page
        # cancelled, or unwinding: the compensation (ocr.cancel of a job this node's fake
        # OCR never saw) waits for its next try
        assert 'data-testid="state">cancelled<' in page or "cancel requested" in page

        ended = await http.post(
            f"/ui/instances/{seeded.completed}/actions/cancel", data={"csrf": _csrf(page)}
        )
        assert ended.status_code == 409 and 'data-code="instance_ended"' in ended.text


async def test_a_read_only_token_sees_no_action_and_is_refused_one(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    target = seeded.parked[0]
    async with _signed_in(server, VIEWER) as http:
        home = (await http.get("/ui")).text
        assert re.search(r"viewer\s+\(read only\)", home)
        page = (await http.get(f"/ui/instances/{target}")).text
        assert 'data-testid="actions"' not in page and "/actions/" not in page
        csrf = _csrf(page)
        for action in ("wake", "extend", "cancel"):
            confirm = await http.get(f"/ui/instances/{target}/actions/{action}")
            assert confirm.status_code == 403 and 'data-code="forbidden"' in confirm.text
            posted = await http.post(
                f"/ui/instances/{target}/actions/{action}", data={"csrf": csrf}
            )
            assert posted.status_code == 403 and "lacks the &#39;operate&#39; scope" in posted.text
        assert 'data-testid="state">suspended<' in (await http.get(f"/ui/instances/{target}")).text


async def test_a_token_without_the_read_scope_cannot_sign_in(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, _ = acting
    async with httpx.AsyncClient(base_url=server.base_url) as http:
        resp = await http.post("/ui/sign-in", data={"token": STARTER})
        assert resp.status_code == 401 and "set-cookie" not in resp.headers


async def test_extend_budget_moves_the_stored_end_later(acting: tuple[LiveServer, Seeded]) -> None:
    server, seeded = acting
    target = seeded.overdue[2]
    async with _signed_in(server) as http:
        before = (await http.get(f"/ui/instances/{target}")).text
        end_before = re.search(r'data-testid="budget-end">ends ([^<]+)<', before)
        assert end_before, "no budget end on the page"
        confirm = await http.get(f"/ui/instances/{target}/actions/extend")
        assert '<option value="PT1H">1 hour</option>' in confirm.text
        done = await http.post(
            f"/ui/instances/{target}/actions/extend",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text), "extend_by": "PT1H"},
        )
        assert done.status_code == 303
        after = (await http.get(done.headers["location"])).text
        assert "Budget extended by token-1" in after
        assert "(extended 1×)" in after
        end_after = re.search(r'data-testid="budget-end">ends ([^<]+)<', after)
        assert end_after and end_after.group(1) > end_before.group(1)

        odd = await http.post(
            f"/ui/instances/{target}/actions/extend",
            data={"csrf": _csrf(after), "extend_by": "P99Y"},
        )
        assert odd.status_code == 422 and 'data-code="input_invalid"' in odd.text


async def test_the_signals_table_says_what_became_of_each_signal(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    target = seeded.overdue[0]
    async with server.client() as api:
        resp = await api.post(
            f"/api/v1/documents/{target}/signals/ocr.completed", json={"jobId": "job-late-0"}
        )
        assert resp.status_code == 202, resp.text
    async with _signed_in(server) as http:
        page = (await http.get(f"/ui/instances/{target}")).text
        fate = re.search(r'data-testid="signal-fate">\s*(.*?)</td>', page, re.S)
        assert fate and fate.group(1).startswith("taken "), page[-3000:]
        assert "at step 1" in fate.group(1)  # the poll step: it ended the wait
        assert "<code>ocr.completed</code>" in page


async def test_no_action_gives_a_500_in_any_state(acting: tuple[LiveServer, Seeded]) -> None:
    server, seeded = acting
    async with _signed_in(server) as http:
        csrf = _csrf((await http.get("/ui")).text)
        for instance_id in [*seeded.every(), "01a23203-0000-7000-8000-000000000000", "bad"]:
            for action in ("wake", "extend", "cancel", "explode"):
                resp = await http.post(
                    f"/ui/instances/{instance_id}/actions/{action}",
                    data={"csrf": csrf, "extend_by": "PT15M"},
                )
                assert resp.status_code in (303, 404, 409), (instance_id, action, resp.text[:300])


async def test_send_signal_needs_operate_and_csrf_and_a_payload_its_schema_allows(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    async with server.client() as api:
        started = await api.post(
            "/api/v1/documents",
            json={"documentId": "signal-form", "pages": 400},
            headers={"Idempotency-Key": "signal-form"},
        )
    assert started.status_code == 202 and started.json()["status"] == "suspended", started.text
    target = started.json()["instanceId"]
    async with _signed_in(server) as http:
        page = (await http.get(f"/ui/instances/{target}")).text
        assert f'href="/ui/instances/{target}/actions/signal"' in page
        confirm = await http.get(f"/ui/instances/{target}/actions/signal")
        assert confirm.status_code == 200
        assert 'name="f.jobId"' in confirm.text and "(required)" in confirm.text
        forged = await http.post(
            f"/ui/instances/{target}/actions/signal",
            data={"csrf": "forged", "key": _key(confirm.text), "f.jobId": "j"},
        )
        assert forged.status_code == 403 and 'data-code="csrf_invalid"' in forged.text
        empty = await http.post(
            f"/ui/instances/{target}/actions/signal",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text), "f.jobId": ""},
        )
        assert empty.status_code == 422 and "jobId: required" in empty.text
        after = (await http.get(f"/ui/instances/{target}")).text
        assert "No signal delivered." in after  # nothing was sent
    async with _signed_in(server, VIEWER) as viewer:
        refused = await viewer.get(f"/ui/instances/{target}/actions/signal")
        assert refused.status_code == 403


async def test_send_signal_refuses_what_the_signal_route_refuses_in_a_body(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, _ = acting
    async with server.client() as api:
        started = await api.post(
            "/api/v1/documents",
            json={"documentId": "signal-nul", "pages": 400},
            headers={"Idempotency-Key": "signal-nul"},
        )
    assert started.status_code == 202, started.text
    target = started.json()["instanceId"]
    async with _signed_in(server) as http:
        confirm = await http.get(f"/ui/instances/{target}/actions/signal")
        refused = await http.post(
            f"/ui/instances/{target}/actions/signal",
            data={"csrf": _csrf(confirm.text), "key": _key(confirm.text), "f.jobId": "j\x00-1"},
        )
        assert refused.status_code == 422, refused.text[:300]
        assert "jobId: the string contains U+0000" in refused.text
        after = (await http.get(f"/ui/instances/{target}")).text
        assert "No signal delivered." in after  # nothing was sent


async def test_a_signal_waits_due_instant_is_labelled_its_timeout(
    acting: tuple[LiveServer, Seeded],
) -> None:
    server, seeded = acting
    async with _signed_in(server) as http:
        waiting = (await http.get(f"/ui/instances/{seeded.awaiting_signal}")).text
        parked = (await http.get(f"/ui/instances/{seeded.parked[1]}")).text
    assert "Times out " in waiting and "Next wake" not in waiting
    assert "Next wake " in parked and "Times out" not in parked
