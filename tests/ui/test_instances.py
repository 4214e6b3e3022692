"""The instance list and pages: filters in the query string, pagination, every instance in
every state answered (an unknown flow version too), never a 500."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

import httpx

from tests.support.seed import Seeded


def _ids(html: str) -> list[str]:
    return re.findall(r'<tr data-instance="([^"]+)"', html)


async def _list(client: httpx.AsyncClient, query: str) -> str:
    resp = await client.get(f"/ui/instances?{query}")
    assert resp.status_code == 200, resp.text[:500]
    return resp.text


async def test_filters_in_the_query_string_select_instances(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    every = set(seeded.every())
    assert set(_ids(await _list(signed_in, ""))) == every

    overdue = set(_ids(await _list(signed_in, "overdue=1")))
    # the document, the unknown version and the unknown flow parked 20 minutes ago
    assert overdue == {*seeded.overdue, seeded.unknown_version, seeded.unknown_flow}

    assert _ids(await _list(signed_in, "state=failed")) == [seeded.failed]
    assert _ids(await _list(signed_in, "stuck=1")) == [seeded.stuck]
    assert _ids(await _list(signed_in, "state=completed&flow=document.process")) == [
        seeded.completed
    ]
    assert _ids(await _list(signed_in, "error_code=flow.step_failed")) == [seeded.failed]
    docs_overdue = set(
        _ids(await _list(signed_in, "flow=document.process&version=1.0.0&overdue=on"))
    )
    assert docs_overdue == set(seeded.overdue)
    assert set(_ids(await _list(signed_in, "waiting=poll&flow=t.poll"))) == {seeded.unknown_flow}

    # the form shows the filters it was given
    page = await _list(signed_in, "state=failed&overdue=1")
    assert '<option value="failed" selected>' in page
    assert 'name="overdue" value="1" checked' in page


async def test_a_value_that_cannot_be_a_filter_is_left_out_with_a_notice(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    page = await _list(signed_in, "state=sleeping&waiting=nothing&cursor=%%%&limit=abc")
    assert "is not a state" in page and "is not a wait kind" in page
    assert "not one this console gave out" in page
    assert "is not a page size of 1 to 200" in page
    assert set(_ids(page)) == set(seeded.every())
    for limit in ("0", "201", "-5", "9" * 40):
        assert "is not a page size" in await _list(signed_in, f"limit={limit}"), limit
    assert "is not a page size" not in await _list(signed_in, "limit=200")
    assert (await signed_in.get("/ui/instances?flow=" + "x" * 5000)).status_code == 200


async def _all_pages(client: httpx.AsyncClient, url: str) -> list[str]:
    seen: list[str] = []
    for _ in range(10):
        resp = await client.get(url)
        assert resp.status_code == 200
        seen += _ids(resp.text)
        nxt = re.search(r'data-testid="next-page" href="([^"]+)"', resp.text)
        if not nxt:
            break
        url = nxt.group(1).replace("&amp;", "&")
        assert parse_qs(urlparse(url).query)["limit"] == ["4"]
    return seen


async def test_pages_follow_each_other_without_repeats(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    newest = await _all_pages(signed_in, "/ui/instances?limit=4")
    assert len(newest) == len(set(newest)) == len(seeded.every())
    # oldest first is the whole list reversed, page after page
    oldest = await _all_pages(signed_in, "/ui/instances?limit=4&sort=created")
    assert oldest == list(reversed(newest))


async def test_columns_sort_the_page(signed_in: httpx.AsyncClient, seeded: Seeded) -> None:
    by_state = _ids(await _list(signed_in, "sort=state"))
    states = re.findall(r'data-state="([^"]+)"', await _list(signed_in, "sort=state"))
    assert states == sorted(states) and len(by_state) == len(seeded.every())
    newest_first = _ids(await _list(signed_in, ""))
    assert _ids(await _list(signed_in, "sort=created")) == list(reversed(newest_first))


async def test_every_instance_page_answers_in_every_state(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    for instance_id in seeded.every():
        resp = await signed_in.get(f"/ui/instances/{instance_id}")
        assert resp.status_code == 200, (instance_id, resp.text[:300])
        assert instance_id in resp.text
        for action in ("wake", "extend", "cancel"):
            confirm = await signed_in.get(f"/ui/instances/{instance_id}/actions/{action}")
            assert confirm.status_code == 200, (instance_id, action)

    unknown = (await signed_in.get(f"/ui/instances/{seeded.unknown_version}")).text
    assert 'data-testid="unknown-version"' in unknown
    assert "document.process@0.1.0" in unknown


async def test_an_unknown_or_impossible_id_is_a_404_page(signed_in: httpx.AsyncClient) -> None:
    for bad in ("01a23203-0000-7000-8000-000000000000", "not-an-id", "x" * 300):
        resp = await signed_in.get(f"/ui/instances/{bad}")
        assert resp.status_code == 404, bad
        assert 'data-code="instance_not_found"' in resp.text
    # a path holding a control character is refused before any page (or store) sees it
    resp = await signed_in.get("/ui/instances/%00")
    assert resp.status_code == 422
    assert resp.json()["code"] == "input_invalid"


async def test_the_page_of_a_parked_poll_shows_its_attempts_budget_and_wait(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    html = (await signed_in.get(f"/ui/instances/{seeded.overdue[0]}")).text
    assert re.findall(r'data-attempt="(\d+)" data-outcome="(\w+)"', html)[:3] == [
        ("0", "success"),
        ("1", "success"),
        ("2", "next"),
    ]
    assert 'data-testid="budget"' in html and "poll budget" in html
    assert 'data-testid="countdown" data-until="' in html
    assert "Waits for <strong>poll</strong> <code>ocr.status</code>" in html
    assert 'href="/ui/instances/' + seeded.overdue[0] + '/actions/wake"' in html

    failed = (await signed_in.get(f"/ui/instances/{seeded.failed}")).text
    assert failed.count("OCR provider answered 503") >= 3  # every try's error
    assert 'data-testid="error"' in failed and "flow.step_failed" in failed
    assert 'data-testid="actions"' not in failed  # nothing to do on an ended instance
    assert 'data-testid="budget"' not in failed


async def test_an_instance_waiting_for_a_signal_offers_no_wake(
    signed_in: httpx.AsyncClient, seeded: Seeded
) -> None:
    html = (await signed_in.get(f"/ui/instances/{seeded.awaiting_signal}")).text
    assert "Waits for <strong>signal</strong>" in html
    assert "/actions/wake" not in html and "/actions/cancel" in html


async def test_a_trailing_slash_leads_to_the_page_and_an_unknown_path_is_a_404_page(
    signed_in: httpx.AsyncClient,
) -> None:
    for path, target in (
        ("/ui/", "/ui"),
        ("/ui/instances/?state=failed", "/ui/instances?state=failed"),
        ("/ui//evil.example/", "/ui/evil.example"),
    ):
        resp = await signed_in.get(path)
        assert resp.status_code == 308 and resp.headers["location"] == target, path
    missing = await signed_in.get("/ui/nothing-here")
    assert missing.status_code == 404 and 'data-code="not_found"' in missing.text
