"""The console of a flowpark that a team's FastAPI app mounts under ``/flowpark``
(:meth:`flowpark.embedding.Flowpark.include_in` with ``console=True``), in a real browser
(Debian's Chromium, headless) against the host served by uvicorn.

A person signs in at ``/flowpark/ui/sign-in``, reads the overview, goes to the instance
list and opens an instance. Every request the browser makes (pages, styles, scripts,
htmx polls) goes to ``/flowpark/ui``, none to the host's own ``/ui``, and none fails;
the package's styles and scripts apply.
"""

# no ``from __future__ import annotations``: the host's route declares its dependency on
# a local ``fp``, which FastAPI reads from the annotation at once

import re
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import httpx
import pytest
from fastapi import Depends, FastAPI
from playwright.sync_api import Page, Request, Response, expect
from pydantic import BaseModel

from flowpark import Capability, Flow, StepContext
from flowpark.embedding import Flowpark, LocalClient
from flowpark.flows import Signal
from flowpark.settings import Settings
from tests.support.server import TOKEN, LiveServer, live_server

pytestmark = pytest.mark.slow

PREFIX = "/flowpark"
UI = f"{PREFIX}/ui"
PARCELS = ("p-1", "p-2")


class Parcel(BaseModel):
    """The flow's input."""

    parcel_id: str


class Approval(BaseModel):
    """The signal that lets a parcel go."""

    by: str


APPROVED = Signal("parcel.approved", Approval)


class Label(Capability):
    """Print the parcel's label (nothing to do here)."""

    id = "parcel.label"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        """Print nothing."""


def _parcel_flow() -> Flow:
    """``parcel.ship``: a label, then a wait of an hour for the approval."""
    return (
        Flow("parcel.ship", "1.0.0", input=Parcel)
        .step(Label())
        .await_signal(APPROVED, timeout=timedelta(hours=1))
    )


def _shop(settings: Settings) -> FastAPI:
    """A team's app: its own ``/ui`` and ``POST /parcels/{id}`` (starting ``parcel.ship``
    with the in-process client), flowpark with its console under ``/flowpark``."""
    fp = Flowpark(settings, flows=[lambda _deps: [_parcel_flow()]])
    host = FastAPI(title="a team's shop")

    @host.get("/ui")
    async def hosts_own_ui() -> dict[str, str]:
        return {"page": "the host's own /ui"}

    @host.post("/parcels/{parcel_id}")
    async def ship(
        parcel_id: str, client: Annotated[LocalClient, Depends(fp.get_client)]
    ) -> dict[str, str]:
        started = await client.start(
            "parcel.ship", {"parcel_id": parcel_id}, idempotency_key=parcel_id
        )
        return {"instanceId": started.instance_id}

    fp.include_in(host, prefix=PREFIX, console=True)
    return host


@pytest.fixture(scope="module")
def shop(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[tuple[LiveServer, list[str]]]:
    """The host on a fresh migrated SQLite file, with a parcel instance each of
    :data:`PARCELS` (waiting for their approval)."""
    path = tmp_path_factory.mktemp("mounted-console") / "flowpark.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", app_factory=_shop) as server:
        ids = []
        for parcel in PARCELS:
            answer = httpx.post(f"{server.base_url}/parcels/{parcel}", timeout=30.0)
            assert answer.status_code == 200, answer.text
            ids.append(answer.json()["instanceId"])
        yield server, ids


def _is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def test_a_person_signs_in_and_finds_an_instance_all_under_the_hosts_prefix(
    page: Page, shop: tuple[LiveServer, list[str]]
) -> None:
    server, ids = shop
    base = server.base_url
    asked: list[str] = []
    failed: list[str] = []
    problems: list[str] = []  # script errors and content-policy violations

    def answered(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    page.on("request", lambda r: asked.append(r.url))
    page.on("response", answered)
    # a request the page's own navigation aborts (an htmx refresh in flight when a link is
    # followed) is no failure of the console's
    page.on(
        "requestfailed",
        lambda r: failed.append(f"failed {r.url}") if r.failure != "net::ERR_ABORTED" else None,
    )
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))

    # no session: to the sign-in page under the prefix, and back to the overview after
    page.goto(f"{base}{UI}")
    expect(page).to_have_url(f"{base}{UI}/sign-in?next=%2Fflowpark%2Fui")
    page.get_by_label("API token").fill(TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base}{UI}")
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(page.locator('tr[data-flow="parcel.ship"][data-version="1.0.0"]')).to_be_visible()

    # the package's styles and scripts came with the page
    header = page.locator("header.top")
    assert header.evaluate("el => getComputedStyle(el).backgroundColor") == "rgb(22, 32, 47)"
    assert header.evaluate("el => getComputedStyle(el).display") == "flex"
    page.wait_for_function("() => typeof window.htmx === 'object'")

    # the overview's live part polls the overview, under the prefix
    with page.expect_request(_is_htmx, timeout=15_000) as polled:
        pass
    assert polled.value.url == f"{base}{UI}"

    # the list, from the header's link
    page.locator("header.top nav").get_by_role("link", name="Instances").click()
    expect(page).to_have_url(f"{base}{UI}/instances")
    rows = page.locator("table[data-testid=instances] tbody tr[data-instance]")
    expect(rows).to_have_count(len(PARCELS))
    listed = rows.evaluate_all("rows => rows.map(r => r.dataset.instance)")
    assert set(listed) == set(ids)

    # one instance: waiting for its approval, its countdown written by console.js
    target = ids[0]
    page.locator(f'tr[data-instance="{target}"] a').first.click()
    expect(page).to_have_url(f"{base}{UI}/instances/{target}")
    expect(page.get_by_test_id("state")).to_have_text("suspended")
    expect(page.get_by_test_id("countdown")).to_contain_text(re.compile(r"^in \d+m "))
    with page.expect_request(_is_htmx, timeout=15_000) as refreshed:
        pass
    assert refreshed.value.url == f"{base}{UI}/instances/{target}"

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{base}{UI}/sign-in")

    assert failed == [] and problems == []
    for name in ("console.css", "console.js", "htmx.min.js"):
        assert f"{base}{UI}/static/{name}" in asked, name
    astray = [url for url in asked if not url.startswith(f"{base}{UI}")]
    assert astray == [], astray
