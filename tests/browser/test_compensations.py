"""An operator retries a compensation that failed for good, in a real browser (Debian's
Chromium) against ``flowpark serve`` with a flow whose compensation fails while a file
exists: the instance page names it, the *Retry compensations* button asks first, carries
the session's CSRF token, and what it did shows on the page and in the history."""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.eventually import eventually_sync
from tests.support.server import TOKEN, SubprocessServer, serve_subprocess

pytestmark = pytest.mark.slow

FLOWS = Path(__file__).with_name("undo_flows.py")
VIEWER = "viewer-secret"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[tuple[SubprocessServer, Path]]:
    folder = tmp_path_factory.mktemp("compensations-browser")
    marker = folder / "release-fails"
    shutil.copyfile(_sqlite_template, folder / "flowpark.db")
    with serve_subprocess(
        f"sqlite:///{folder / 'flowpark.db'}",
        folder / "server.log",
        env={"UNDO_FAILS_WHILE": str(marker)},
        flows=str(FLOWS),
        api_tokens=f"{TOKEN},viewer:{VIEWER}:read",
        timer_scan_interval="0.5",
    ) as server:

        def up() -> None:
            try:
                status = httpx.get(f"{server.base_url}/healthz", timeout=2).status_code
            except httpx.HTTPError as exc:
                raise AssertionError(f"not up yet: {exc}") from None
            assert status == 200, server.output()

        eventually_sync(up, timeout=60, what="flowpark serve answers")
        yield server, marker


def _failed_instance(server: SubprocessServer, marker: Path) -> str:
    """A held reservation, cancelled while its release fails: cancelled, marked."""
    marker.touch()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.base_url, headers=auth, timeout=30) as http:
        started = http.post("/api/v1/holds", json={}, headers={"Idempotency-Key": uuid.uuid4().hex})
        assert started.status_code == 202, started.text
        instance_id = str(started.json()["instanceId"])
        cancelled = http.post(f"/api/v1/instances/{instance_id}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        view = http.get(f"/api/v1/instances/{instance_id}").json()
    assert view["state"] == "cancelled" and len(view["compensationFailures"]) == 1
    return instance_id


def _sign_in(page: Page, base_url: str, token: str = TOKEN) -> None:
    page.goto(f"{base_url}/ui")
    expect(page).to_have_url(re.compile(r"/ui/sign-in\?next="))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{base_url}/ui")


def test_an_operator_retries_a_failed_compensation_until_it_clears(
    page: Page, served: tuple[SubprocessServer, Path]
) -> None:
    server, marker = served
    instance_id = _failed_instance(server, marker)
    _sign_in(page, server.base_url)
    page.goto(f"{server.base_url}/ui/instances?compensation_failed=1")
    expect(page.locator(f'a[href="/ui/instances/{instance_id}"]').first).to_be_visible()
    page.goto(f"{server.base_url}/ui/instances/{instance_id}")
    expect(page.get_by_test_id("state")).to_have_text("cancelled")
    panel = page.get_by_test_id("compensation-failures")
    expect(panel).to_contain_text("undo.release")
    expect(panel).to_contain_text("undo.reserve")  # the step it undoes
    expect(panel).to_contain_text("the reservation service refused")

    # the provider still refuses: the retry's one try fails, the mark stays
    page.get_by_role("link", name="Retry compensations").click()
    expect(page.get_by_role("heading", name="Retry compensations?")).to_be_visible()
    csrf = page.locator('form[data-testid="confirm"] input[name="csrf"]')
    assert len(csrf.get_attribute("value") or "") > 10
    page.get_by_test_id("confirm-retry-compensations").click()
    expect(page).to_have_url(re.compile(rf"/ui/instances/{instance_id}\?done="))
    expect(page.locator(".notice")).to_contain_text("1 still failed")
    expect(page.get_by_test_id("compensation-failures")).to_contain_text("after 2 tries")

    # the provider is back: the next retry succeeds, the mark and the button are gone
    marker.unlink()
    page.get_by_role("link", name="Retry compensations").click()
    page.get_by_test_id("confirm-retry-compensations").click()
    expect(page.locator(".notice")).to_contain_text("every one succeeded")
    expect(page.get_by_test_id("compensation-failures")).to_have_count(0)
    expect(page.get_by_role("link", name="Retry compensations")).to_have_count(0)
    expect(page.get_by_test_id("state")).to_have_text("cancelled")
    history = page.get_by_test_id("history")
    expect(history.locator('tr[data-action="retry_compensations"]')).to_have_count(2)
    actor = history.locator('tr[data-action="retry_compensations"]').first.get_by_test_id("actor")
    expect(actor).not_to_be_empty()


def test_a_read_only_token_sees_no_retry_button_and_cannot_post_one(
    page: Page, served: tuple[SubprocessServer, Path]
) -> None:
    server, marker = served
    instance_id = _failed_instance(server, marker)
    _sign_in(page, server.base_url, VIEWER)
    page.goto(f"{server.base_url}/ui/instances/{instance_id}")
    expect(page.get_by_test_id("compensation-failures")).to_be_visible()
    expect(page.get_by_role("link", name="Retry compensations")).to_have_count(0)
    answer = page.request.post(
        f"{server.base_url}/ui/instances/{instance_id}/actions/retry-compensations",
        form={"csrf": "x"},
    )
    assert answer.status == 403
    marker.unlink()
