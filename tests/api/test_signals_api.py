"""Signals over real HTTP: the sample's webhook route, the generic route, and the answers."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx

from tests.support.api import DOCUMENTS, assert_problem, start_document, wait_for_state
from tests.support.eventually import eventually
from tests.support.server import LiveServer, live_server

NEVER = 10_000  # pages: at 0.05 s/page the job stays pending for the whole test
JSON = {"Content-Type": "application/json"}


async def _job_id(client: httpx.AsyncClient, instance_id: str) -> str:
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert any(r["capabilityId"] == "ocr.upload" for r in view["journal"]), view["journal"]
    jobs = (await client.get("/fake/ocr/jobs")).json()
    return str(next(j["jobId"] for j in jobs if j["documentId"] == view["input"]["documentId"]))


async def test_the_start_lists_the_deliverable_signal_and_a_signal_ends_the_wait(
    client: httpx.AsyncClient,
    live: LiveServer,
) -> None:
    resp = await start_document(client, pages=NEVER)
    assert resp.status_code == 202
    body = resp.json()
    instance_id = body["instanceId"]
    assert body["awaiting"] == [
        {
            "signal": "ocr.completed",
            "href": f"/api/v1/documents/{instance_id}/signals/ocr.completed",
        }
    ]
    job_id = await _job_id(client, instance_id)
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    sent = await client.post(
        body["awaiting"][0]["href"],
        json={"jobId": job_id},
        headers={"Idempotency-Key": f"hook-{job_id}"},
    )
    assert sent.status_code == 202, sent.text
    assert sent.json()["created"] is True
    view = await wait_for_state(client, instance_id, ("completed",), timeout=10)
    kinds = [(r["kind"], r["capabilityId"]) for r in view["journal"]]
    assert kinds.count(("step", "ocr.status")) == 1  # no attempt after the signal
    assert kinds.count(("signal", "ocr.completed")) == 1
    assert "awaiting" not in view
    again = await client.post(
        body["awaiting"][0]["href"],
        json={"jobId": job_id},
        headers={"Idempotency-Key": f"hook-{job_id}"},
    )
    assert again.status_code == 202 and again.json()["created"] is False
    assert again.json()["signalId"] == sent.json()["signalId"]
    signals = (await client.get(f"/api/v1/instances/{instance_id}")).json()["signals"]
    assert len(signals) == 1


async def test_signal_answers_404_409_422_and_store_nothing(client: httpx.AsyncClient) -> None:
    resp = await start_document(client, pages=NEVER)
    instance_id = resp.json()["instanceId"]
    route = f"/api/v1/documents/{instance_id}/signals/ocr.completed"
    assert_problem(
        await client.post(
            f"/api/v1/documents/{uuid.uuid4()}/signals/ocr.completed", json={"jobId": "x"}
        ),
        404,
        "instance_not_found",
    )
    assert_problem(
        await client.post(f"/api/v1/instances/{instance_id}/signals/nope", json={}),
        404,
        "signal_not_declared",
    )
    assert_problem(await client.post(route, json={"jobId": 7}), 422, "input_invalid")
    # a misnamed field: the problem says which name was meant (detail and errors)
    for misnamed, meant in (({"jobid": "x"}), "jobId"), (({"job_id": "x"}), "jobId"):
        problem = assert_problem(await client.post(route, json=misnamed), 422, "input_invalid")
        (name,) = misnamed
        assert f"unknown field {name} (did you mean {meant}?)" in problem["detail"], problem
        assert {"loc": [name], "msg": f"unknown field (did you mean {meant}?)"} in [
            {"loc": e["loc"], "msg": e["msg"]} for e in problem["errors"]
        ], problem
    assert_problem(
        await client.post(route, content=b"{not json", headers=JSON), 422, "input_invalid"
    )
    cancelled = await client.post(f"/api/v1/instances/{instance_id}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    assert_problem(await client.post(route, json={"jobId": "x"}), 409, "instance_ended")
    assert_problem(
        await client.post(f"/api/v1/instances/{instance_id}/cancel"), 409, "instance_ended"
    )
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    assert view["signals"] == []
    assert view["error"]["code"] == "flow.cancelled"


async def test_the_generic_route_delivers_too(client: httpx.AsyncClient) -> None:
    instance_id = (await start_document(client, pages=NEVER)).json()["instanceId"]
    route = f"/api/v1/instances/{instance_id}/signals/ocr.completed"
    # a made-up job id does not belong to the wait: kept, refused, the document waits on
    made_up = await client.post(route, json={"jobId": "whatever"})
    assert made_up.status_code == 202
    assert made_up.json()["matched"] is False and made_up.json()["state"] == "suspended"
    assert (await client.get(f"/api/v1/instances/{instance_id}")).json()["state"] == "suspended"
    sent = await client.post(route, json={"jobId": await _job_id(client, instance_id)})
    assert sent.status_code == 202 and sent.json()["matched"] is True
    view = await wait_for_state(client, instance_id, ("completed", "failed"), timeout=10)
    # the job never finished: the extract step fails the flow with its own code
    assert view["state"] == "failed"
    assert view["error"]["code"] == "document.ocr_failed"


async def test_the_fake_ocr_webhook_ends_the_wait_at_once(
    _sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "hook.db"
    shutil.copyfile(_sqlite_template, path)
    with live_server(f"sqlite:///{path}", ocr_callbacks=True, timer_scan_interval=3600) as server:
        async with server.client() as client:
            instance_id = (await start_document(client, pages=NEVER)).json()["instanceId"]
            job_id = await _job_id(client, instance_id)
            await client.post(f"/fake/ocr/jobs/{job_id}/complete")
            # the sweep runs hourly here: only the webhook can finish the document
            view = await wait_for_state(client, instance_id, ("completed",), timeout=10)
            assert view["result"]["fieldCount"] == NEVER

            async def drained() -> None:
                assert server.app.state.flows["fake_ocr"].callback_outcomes["delivered"] == 1

            await eventually(drained, timeout=5)


async def test_a_signal_refused_by_match_is_not_shown_as_taken(
    client: httpx.AsyncClient, doc_id: str
) -> None:
    from flowpark.api.models import InstanceView

    started = await start_document(client, doc_id, pages=400)
    instance_id = started.json()["instanceId"]
    refused = await client.post(
        f"{DOCUMENTS}/{instance_id}/signals/ocr.completed", json={"jobId": "made-up"}
    )
    answer = refused.json()
    assert answer["matched"] is False
    assert answer["takenAt"] is None and answer["takenStepId"] is None
    assert answer["refusedAt"] is not None and answer["refusedStepId"] is not None
    view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
    InstanceView.model_validate(view)
    [stored] = view["signals"]
    assert stored["takenAt"] is None and stored["refusedStepId"] == answer["refusedStepId"]
