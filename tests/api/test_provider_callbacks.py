"""The fake OCR's callbacks and admin routes on both stores, over real HTTP: a callback
signals only the instance whose upload created the job (each job's callback token is that
instance's); the fakes' admin routes (list, complete, cancel, fail) answer a loopback
client or the admin token; forwarded headers count only from the configured proxies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from flowpark.samples.settings import (
    SampleSettings,
    callback_credential,
    fakes_admin_token,
    instance_callback_token,
)
from flowpark.settings import Settings
from tests.support.api import DOCUMENTS, assert_problem, start_document, wait_for_state
from tests.support.eventually import eventually
from tests.support.server import TOKEN, LiveServer, live_server

NEVER = 10_000  # pages: the job stays pending unless completed
OFF_HOST = {"X-Forwarded-For": "203.0.113.7"}  # through the trusted proxy (loopback)


@pytest.fixture
def server(store_url: str) -> Iterator[LiveServer]:
    """Callbacks on, an hourly sweep (only a callback can end a wait), loopback trusted as
    a proxy so a test can speak as an off-host client."""
    with live_server(
        store_url, ocr_callbacks=True, timer_scan_interval=3600, forwarded_allow_ips="127.0.0.1"
    ) as live:
        yield live


@pytest.fixture
async def client(server: LiveServer) -> AsyncIterator[httpx.AsyncClient]:
    async with server.client() as http:
        yield http


def _key(server: LiveServer) -> str:
    return callback_credential(Settings(api_tokens=TOKEN), SampleSettings()).value


def _signal_url(instance_id: str) -> str:
    return f"{DOCUMENTS}/{instance_id}/signals/ocr.completed"


async def _job_of(client: httpx.AsyncClient, instance_id: str) -> str:
    async def uploaded() -> str:
        jobs = (await client.get("/fake/ocr/jobs")).json()
        view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
        ours = [j for j in jobs if j["documentId"] == view["input"]["documentId"]]
        assert ours, jobs
        return str(ours[0]["jobId"])

    return await eventually(uploaded, timeout=10)


async def test_a_job_naming_another_instance_cannot_signal_it(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    victim = (await start_document(client, pages=NEVER)).json()["instanceId"]
    other = (await start_document(client, pages=NEVER)).json()["instanceId"]
    ocr = server.app.state.flows["fake_ocr"]
    callback = f"{server.base_url}{_signal_url(victim)}"
    async with server.client(token=None) as anonymous:
        # no token, then the token of another instance (as if the attacker had one)
        for token in (None, instance_callback_token(_key(server), other)):
            body = {"documentId": "evil", "pages": 1, "callbackUrl": callback}
            if token is not None:
                body["callbackToken"] = token
            made = await anonymous.post("/fake/ocr/jobs", json=body)
            assert made.status_code == 201, made.text
            done = await client.post(f"/fake/ocr/jobs/{made.json()['jobId']}/complete")
            assert done.status_code == 200, done.text

    async def both_refused() -> None:
        assert ocr.callback_outcomes["failed"] >= 2, dict(ocr.callback_outcomes)

    await eventually(both_refused, timeout=10)
    view = (await client.get(f"/api/v1/instances/{victim}")).json()
    assert view["state"] == "suspended" and view["signals"] == [], view
    # the instance's own job still calls its own instance back
    job = await _job_of(client, victim)
    await client.post(f"/fake/ocr/jobs/{job}/complete")
    ended = await wait_for_state(client, victim, ("completed",), timeout=15)
    assert [s["name"] for s in ended["signals"]] == ["ocr.completed"]


async def test_a_callback_token_opens_its_own_instance_only(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    first = (await start_document(client, pages=NEVER)).json()["instanceId"]
    second = (await start_document(client, pages=NEVER)).json()["instanceId"]
    token = instance_callback_token(_key(server), first)
    async with server.client(token=token) as callback:
        elsewhere = await callback.post(_signal_url(second), json={"jobId": "x"})
        generic = await callback.post(
            f"/api/v1/instances/{second}/signals/ocr.completed", json={"jobId": "x"}
        )
        listing = await callback.get("/api/v1/instances")
        own = await callback.post(_signal_url(first), json={"jobId": "mine"})
    assert_problem(elsewhere, 401, "unauthorized")
    assert_problem(generic, 401, "unauthorized")
    assert_problem(listing, 401, "unauthorized")
    assert own.status_code == 202, own.text
    second_view = (await client.get(f"/api/v1/instances/{second}")).json()
    assert second_view["signals"] == []
    # the old one-for-all callback key opens nothing
    async with server.client(token=_key(server)) as old:
        assert_problem(await old.post(_signal_url(second), json={"jobId": "x"}), 401)


async def test_the_fakes_admin_routes_need_loopback_or_the_admin_token(
    server: LiveServer, client: httpx.AsyncClient
) -> None:
    admin = fakes_admin_token(Settings(api_tokens=TOKEN), SampleSettings())
    made = await client.post("/fake/ocr/jobs", json={"documentId": "adm", "pages": NEVER})
    job = made.json()["jobId"]
    async with server.client(token=None) as anonymous:
        refused = [
            await anonymous.get("/fake/ocr/jobs", headers=OFF_HOST),
            await anonymous.post(f"/fake/ocr/jobs/{job}/complete", headers=OFF_HOST),
            await anonymous.post(f"/fake/ocr/jobs/{job}/cancel", headers=OFF_HOST),
            await anonymous.post("/fake/jobs/j-1/complete", headers=OFF_HOST),
            await anonymous.post("/fake/jobs/j-1/fail", headers=OFF_HOST),
        ]
        # a provider's public routes stay open: upload, and one job's status by its id
        status = await anonymous.get(f"/fake/ocr/jobs/{job}", headers=OFF_HOST)
        upload = await anonymous.post(
            "/fake/ocr/jobs", json={"documentId": "pub", "pages": 1}, headers=OFF_HOST
        )
        with_token = {**OFF_HOST, "Authorization": f"Bearer {admin}"}
        listed = await anonymous.get("/fake/ocr/jobs", headers=with_token)
        cancelled = await anonymous.post(f"/fake/ocr/jobs/{job}/cancel", headers=with_token)
    for resp in refused:
        assert resp.status_code == 403 and resp.json() == {"code": "fake.admin_only"}, resp.text
    assert status.status_code == 200 and upload.status_code == 201
    assert listed.status_code == 200 and job in {j["jobId"] for j in listed.json()}
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    # from loopback itself, no token is needed (the samples' own tests and demos)
    assert (await client.get("/fake/ocr/jobs")).status_code == 200


async def test_forwarded_headers_count_only_from_the_configured_proxies(
    store_url: str,
) -> None:
    forwarded = {**OFF_HOST, "X-Forwarded-Proto": "https"}
    with live_server(store_url) as plain:  # no FLOWPARK_FORWARDED_ALLOW_IPS
        async with plain.client(token=None) as http:
            metrics = await http.get("/metrics", headers=forwarded)
            jobs = await http.get("/fake/ocr/jobs", headers=forwarded)
            signed_in = await http.post(
                "/ui/sign-in", data={"token": TOKEN}, headers=forwarded, follow_redirects=False
            )
    assert metrics.status_code == 200  # still the loopback client it is
    assert jobs.status_code == 200
    assert "secure" not in signed_in.headers["set-cookie"].lower()
    with live_server(store_url, forwarded_allow_ips="127.0.0.1") as proxied:
        async with proxied.client(token=None) as http:
            metrics = await http.get("/metrics", headers=forwarded)
            signed_in = await http.post(
                "/ui/sign-in", data={"token": TOKEN}, headers=forwarded, follow_redirects=False
            )
    assert_problem(metrics, 403, "metrics_forbidden")
    assert "secure" in signed_in.headers["set-cookie"].lower()
