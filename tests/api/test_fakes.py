"""The fake OCR provider and job runner, over HTTP (ASGI transport), on a hand-moved clock."""

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from flowpark.samples.fakes import FakeJobService, FakeOcrService, create_fakes_app
from flowpark.samples.fakes.ocr import OcrCallbackNotAllowed

CALLBACK_URL = "http://flowpark.test/callbacks/ocr"
CALLBACK_BASE = "http://flowpark.test"


class MutableClock:
    """A clock function tests move by hand (aware UTC)."""

    def __init__(self) -> None:
        self.instant = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.instant

    def advance(self, delta: timedelta) -> None:
        self.instant += delta


class CallbackSink:
    """Captures callback requests; answers with the queued statuses, then 200."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.statuses: list[int | Exception] = []
        self.received = asyncio.Event()

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.received.set()
        outcome = self.statuses.pop(0) if self.statuses else 200
        if isinstance(outcome, Exception):
            raise outcome
        return httpx.Response(outcome, json={"ok": outcome < 400})

    def client_factory(self) -> Callable[[], httpx.AsyncClient]:
        return lambda: httpx.AsyncClient(transport=httpx.MockTransport(self.handler))


@pytest.fixture
def clock() -> MutableClock:
    return MutableClock()


@pytest.fixture
def sink() -> CallbackSink:
    return CallbackSink()


@pytest.fixture
async def ocr(clock: MutableClock, sink: CallbackSink) -> AsyncIterator[FakeOcrService]:
    service = FakeOcrService(
        per_page=timedelta(minutes=1),
        now=clock,
        callback_client_factory=sink.client_factory(),
        callback_token="s3cret",
        callback_backoff=timedelta(0),
        callback_bases=(CALLBACK_BASE,),
    )
    yield service
    await service.close()


@pytest.fixture
def jobs(clock: MutableClock) -> FakeJobService:
    return FakeJobService(now=clock)


@pytest.fixture
async def client(ocr: FakeOcrService, jobs: FakeJobService) -> AsyncIterator[httpx.AsyncClient]:
    app = create_fakes_app(ocr, jobs)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://fakes.test") as c:
        yield c


async def upload(client: httpx.AsyncClient, pages: int, **extra: object) -> dict[str, Any]:
    body = {"documentId": "doc-1", "pages": pages, **extra}
    resp = await client.post("/fake/ocr/jobs", json=body)
    assert resp.status_code == 201, resp.text
    job: dict[str, Any] = resp.json()
    return job


# -- OCR -------------------------------------------------------------------------------------


async def test_ocr_upload_is_pending_until_pages_times_per_page(
    client: httpx.AsyncClient, clock: MutableClock, ocr: FakeOcrService
) -> None:
    job = await upload(client, 3)
    assert set(job) == {"jobId", "documentId", "status", "pages"}
    assert job["status"] == "pending" and job["pages"] == 3 and job["documentId"] == "doc-1"
    assert len(job["jobId"]) == 32 and int(job["jobId"], 16) >= 0

    clock.advance(timedelta(minutes=3) - timedelta(microseconds=1))
    resp = await client.get(f"/fake/ocr/jobs/{job['jobId']}")
    assert resp.status_code == 200
    assert resp.json() == {
        "jobId": job["jobId"],
        "documentId": "doc-1",
        "pages": 3,
        "status": "pending",
        "text": None,
    }

    clock.advance(timedelta(microseconds=1))
    body = (await client.get(f"/fake/ocr/jobs/{job['jobId']}")).json()
    assert body["status"] == "completed"
    assert body["text"].splitlines() == ["field_1: value 1", "field_2: value 2", "field_3: value 3"]
    assert ocr.calls == {"upload": 1, "status": 2}


async def test_ocr_upload_rejects_bad_page_counts(client: httpx.AsyncClient) -> None:
    for pages in (0, 10_001, "3"):
        resp = await client.post("/fake/ocr/jobs", json={"documentId": "d", "pages": pages})
        assert resp.status_code == 422, pages
    assert (await client.post("/fake/ocr/jobs", json={"pages": 1})).status_code == 422


async def test_ocr_list_jobs(client: httpx.AsyncClient, clock: MutableClock) -> None:
    first = await upload(client, 1)
    second = await upload(client, 5)
    clock.advance(timedelta(minutes=1))
    resp = await client.get("/fake/ocr/jobs")
    assert resp.json() == [
        {"jobId": first["jobId"], "documentId": "doc-1", "status": "completed"},
        {"jobId": second["jobId"], "documentId": "doc-1", "status": "pending"},
    ]


async def test_ocr_cancel_is_idempotent_and_sticks(
    client: httpx.AsyncClient, clock: MutableClock
) -> None:
    job_id = (await upload(client, 2))["jobId"]
    for _ in range(2):
        resp = await client.post(f"/fake/ocr/jobs/{job_id}/cancel")
        assert resp.status_code == 200
        assert resp.json() == {"jobId": job_id, "status": "cancelled"}
    clock.advance(timedelta(hours=1))
    body = (await client.get(f"/fake/ocr/jobs/{job_id}")).json()
    assert body["status"] == "cancelled" and body["text"] is None

    resp = await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    assert resp.status_code == 409
    assert resp.json() == {"code": "ocr.job_cancelled"}


async def test_ocr_cancel_after_completion_says_completed(
    client: httpx.AsyncClient, clock: MutableClock
) -> None:
    job_id = (await upload(client, 1))["jobId"]
    clock.advance(timedelta(minutes=1))
    resp = await client.post(f"/fake/ocr/jobs/{job_id}/cancel")
    assert resp.json() == {"jobId": job_id, "status": "completed"}
    assert (await client.get(f"/fake/ocr/jobs/{job_id}")).json()["status"] == "completed"


async def test_ocr_complete_now(client: httpx.AsyncClient, ocr: FakeOcrService) -> None:
    job_id = (await upload(client, 4))["jobId"]
    resp = await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    assert resp.status_code == 200
    body = resp.json()
    assert body["status"] == "completed" and len(body["text"].splitlines()) == 4
    again = await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    assert again.status_code == 200 and again.json() == body
    assert ocr.calls["complete"] == 2


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/fake/ocr/jobs/nope"),
        ("POST", "/fake/ocr/jobs/nope/cancel"),
        ("POST", "/fake/ocr/jobs/nope/complete"),
    ],
)
async def test_ocr_unknown_job_is_404(client: httpx.AsyncClient, method: str, path: str) -> None:
    resp = await client.request(method, path)
    assert resp.status_code == 404
    assert resp.json() == {"code": "ocr.job_not_found"}


async def test_ocr_callback_on_complete_carries_token_and_idempotency_key(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink
) -> None:
    job_id = (await upload(client, 2, callbackUrl=CALLBACK_URL))["jobId"]
    assert (await client.post(f"/fake/ocr/jobs/{job_id}/complete")).status_code == 200
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")  # already completed: no new callback
    await ocr.drain()

    assert len(sink.requests) == 1
    request = sink.requests[0]
    assert request.method == "POST" and str(request.url) == CALLBACK_URL
    assert request.headers["authorization"] == "Bearer s3cret"
    assert request.headers["idempotency-key"] == f"ocr-{job_id}"
    assert httpx.Response(200, content=request.content).json() == {
        "jobId": job_id,
        "status": "completed",
    }
    assert ocr.callback_outcomes == {"delivered": 1}


async def test_ocr_callback_when_a_read_finds_the_job_done(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink, clock: MutableClock
) -> None:
    job_id = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    await ocr.drain()
    assert sink.requests == []
    clock.advance(timedelta(minutes=1))
    assert (await client.get(f"/fake/ocr/jobs/{job_id}")).json()["status"] == "completed"
    await client.get(f"/fake/ocr/jobs/{job_id}")
    await ocr.drain()
    assert [r.headers["idempotency-key"] for r in sink.requests] == [f"ocr-{job_id}"]


async def test_ocr_no_callback_for_cancelled_or_callbackless_jobs(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink, clock: MutableClock
) -> None:
    cancelled = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    plain = (await upload(client, 1))["jobId"]
    await client.post(f"/fake/ocr/jobs/{cancelled}/cancel")
    await client.post(f"/fake/ocr/jobs/{plain}/complete")
    clock.advance(timedelta(hours=1))
    await client.get("/fake/ocr/jobs")
    await ocr.drain()
    assert sink.requests == []


async def test_ocr_timer_completes_a_callback_job_in_real_time(
    clock: MutableClock, sink: CallbackSink
) -> None:
    service = FakeOcrService(
        per_page=timedelta(milliseconds=1),
        now=clock,
        callback_client_factory=sink.client_factory(),
        callback_token="t",
        callback_bases=(CALLBACK_BASE,),
    )
    try:
        accepted = service.upload("doc-9", 2, CALLBACK_URL)
        await asyncio.wait_for(sink.received.wait(), timeout=5)
        await service.drain()
        assert service.get(accepted.job_id).status == "completed"
        assert [r.headers["idempotency-key"] for r in sink.requests] == [f"ocr-{accepted.job_id}"]
    finally:
        await service.close()


async def test_ocr_callback_retries_then_delivers(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink
) -> None:
    sink.statuses = [503, httpx.ConnectError("refused")]
    job_id = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    await ocr.drain()
    assert len(sink.requests) == 3
    assert ocr.callback_outcomes == {"delivered": 1}


async def test_ocr_callback_outlasts_a_crash_loop_of_its_receiver(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink
) -> None:
    # a node dying and restarting: refused connections and 503s for a while, then 200
    crash: list[int | Exception] = [
        httpx.ConnectError("refused"),
        503,
        503,
        httpx.ConnectError("x"),
    ]
    sink.statuses = [*crash, *crash, 503]
    job_id = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    await ocr.drain()
    assert len(sink.requests) == 10
    assert ocr.callback_outcomes == {"delivered": 1}


def test_ocr_callback_retries_span_a_window_with_growing_jittered_waits() -> None:
    service = FakeOcrService()
    waits = [service.callback_delay(n) for n in range(1, service.callback_tries)]
    assert waits[0] <= timedelta(milliseconds=200)
    assert all(w <= timedelta(seconds=10) for w in waits)
    # the shortest window (all jitter at its low end) still outlasts a node's restart
    assert sum(waits, timedelta(0)) >= timedelta(seconds=30)
    assert waits[-1] >= timedelta(seconds=5) > waits[0] * 4


async def test_ocr_callback_gives_up_after_three_tries_and_logs(
    client: httpx.AsyncClient,
    ocr: FakeOcrService,
    sink: CallbackSink,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ocr.callback_tries = 3
    sink.statuses = [500, 500, 500, 500]
    job_id = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    with caplog.at_level(logging.WARNING, logger="flowpark.samples.fakes.ocr"):
        resp = await client.post(f"/fake/ocr/jobs/{job_id}/complete")
        assert resp.status_code == 200
        await ocr.drain()
    assert len(sink.requests) == 3
    assert ocr.callback_outcomes == {"failed": 1}
    assert any("given up" in r.getMessage() for r in caplog.records)


async def test_ocr_callback_does_not_retry_client_errors(
    client: httpx.AsyncClient, ocr: FakeOcrService, sink: CallbackSink
) -> None:
    sink.statuses = [404]
    job_id = (await upload(client, 1, callbackUrl=CALLBACK_URL))["jobId"]
    await client.post(f"/fake/ocr/jobs/{job_id}/complete")
    await ocr.drain()
    assert len(sink.requests) == 1
    assert ocr.callback_outcomes == {"failed": 1}


async def test_ocr_close_cancels_timers(clock: MutableClock, sink: CallbackSink) -> None:
    service = FakeOcrService(
        per_page=timedelta(hours=1),
        now=clock,
        callback_client_factory=sink.client_factory(),
        callback_bases=(CALLBACK_BASE,),
    )
    service.upload("doc", 1, CALLBACK_URL)
    timers = list(service._timers.values())
    assert len(timers) == 1
    await service.close()
    assert timers[0].cancelled()
    await service.drain()
    assert sink.requests == []


async def test_fakes_app_lifespan_drains_and_closes(
    clock: MutableClock, sink: CallbackSink
) -> None:
    ocr = FakeOcrService(
        per_page=timedelta(hours=1),
        now=clock,
        callback_client_factory=sink.client_factory(),
        callback_bases=(CALLBACK_BASE,),
    )
    app = create_fakes_app(ocr, FakeJobService(now=clock))
    async with app.router.lifespan_context(app):
        job = ocr.upload("doc", 1, CALLBACK_URL)
        ocr.complete(job.job_id)
    assert len(sink.requests) == 1
    assert ocr._timers == {}


# -- jobs ------------------------------------------------------------------------------------


async def test_job_state_progression(
    client: httpx.AsyncClient, clock: MutableClock, jobs: FakeJobService
) -> None:
    resp = await client.put("/fake/jobs/j-1", json={"input": {"n": 1}})
    assert resp.status_code == 201
    assert resp.json() == {"jobId": "j-1", "state": "QUEUED", "result": None, "error": None}

    async def state() -> str:
        return str((await client.get("/fake/jobs/j-1")).json()["state"])

    clock.advance(timedelta(seconds=2) - timedelta(microseconds=1))
    assert await state() == "QUEUED"
    clock.advance(timedelta(microseconds=1))
    assert await state() == "RUNNING"
    clock.advance(timedelta(seconds=4) - timedelta(microseconds=1))
    assert await state() == "RUNNING"
    clock.advance(timedelta(microseconds=1))
    body = (await client.get("/fake/jobs/j-1")).json()
    assert body == {
        "jobId": "j-1",
        "state": "SUCCEEDED",
        "result": {"jobId": "j-1", "output": "job j-1 done"},
        "error": None,
    }
    assert jobs.calls == {"start": 1, "status": 4}
    assert jobs.input_of("j-1") == {"n": 1}


async def test_job_put_is_idempotent(
    client: httpx.AsyncClient, clock: MutableClock, jobs: FakeJobService
) -> None:
    first = await client.put("/fake/jobs/j-2")
    assert first.status_code == 201
    clock.advance(timedelta(seconds=3))
    second = await client.put("/fake/jobs/j-2", json={"input": "other"})
    assert second.status_code == 200
    assert second.json()["state"] == "RUNNING"  # same job, still counting from the first PUT
    assert jobs.input_of("j-2") is None


async def test_job_complete_now(client: httpx.AsyncClient) -> None:
    await client.put("/fake/jobs/j-3")
    resp = await client.post("/fake/jobs/j-3/complete")
    assert resp.status_code == 200
    assert resp.json()["state"] == "SUCCEEDED"
    assert resp.json()["result"] == {"jobId": "j-3", "output": "job j-3 done"}
    assert (await client.get("/fake/jobs/j-3")).json()["state"] == "SUCCEEDED"
    conflict = await client.post("/fake/jobs/j-3/fail")
    assert conflict.status_code == 409
    assert conflict.json() == {"code": "job.already_finished", "state": "SUCCEEDED"}


async def test_job_fail(client: httpx.AsyncClient, clock: MutableClock) -> None:
    await client.put("/fake/jobs/j-4")
    resp = await client.post("/fake/jobs/j-4/fail", json={"reason": "disk full"})
    assert resp.status_code == 200
    assert resp.json() == {"jobId": "j-4", "state": "FAILED", "result": None, "error": "disk full"}
    clock.advance(timedelta(minutes=1))
    assert (await client.get("/fake/jobs/j-4")).json()["state"] == "FAILED"
    again = await client.post("/fake/jobs/j-4/fail", json={"reason": "other"})
    assert again.json()["error"] == "disk full"
    assert (await client.post("/fake/jobs/j-4/complete")).status_code == 409

    await client.put("/fake/jobs/j-5")
    assert (await client.post("/fake/jobs/j-5/fail")).json()["error"] == "job failed"


async def test_job_fail_after_time_success_is_409(
    client: httpx.AsyncClient, clock: MutableClock
) -> None:
    await client.put("/fake/jobs/j-6")
    clock.advance(timedelta(seconds=6))
    resp = await client.post("/fake/jobs/j-6/fail")
    assert resp.status_code == 409


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/fake/jobs/nope"),
        ("POST", "/fake/jobs/nope/complete"),
        ("POST", "/fake/jobs/nope/fail"),
    ],
)
async def test_job_unknown_is_404(client: httpx.AsyncClient, method: str, path: str) -> None:
    resp = await client.request(method, path)
    assert resp.status_code == 404
    assert resp.json() == {"code": "job.not_found"}


# -- idempotency keys and callback bases ---------------------------------------------------


async def test_ocr_upload_repeats_of_one_idempotency_key_create_one_job(
    client: httpx.AsyncClient, ocr: FakeOcrService
) -> None:
    body = {"documentId": "doc-1", "pages": 1}
    first = await client.post("/fake/ocr/jobs", json=body, headers={"Idempotency-Key": "k-1"})
    again = await client.post("/fake/ocr/jobs", json=body, headers={"Idempotency-Key": "k-1"})
    other = await client.post("/fake/ocr/jobs", json=body, headers={"Idempotency-Key": "k-2"})
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 201)
    assert again.json()["jobId"] == first.json()["jobId"] != other.json()["jobId"]
    assert len((await client.get("/fake/ocr/jobs")).json()) == 2
    assert ocr.calls["upload"] == 3 and ocr.calls["upload_repeat"] == 1


async def test_job_start_repeats_of_one_idempotency_key_answer_the_first_job(
    client: httpx.AsyncClient,
) -> None:
    first = await client.put("/fake/jobs/j-a", json={}, headers={"Idempotency-Key": "k"})
    again = await client.put("/fake/jobs/j-b", json={}, headers={"Idempotency-Key": "k"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["jobId"] == "j-a"
    assert (await client.get("/fake/jobs/j-b")).status_code == 404


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.test/steal",
        "http://flowpark.test:8080/callbacks/ocr",
        "https://flowpark.test/callbacks/ocr",
        "http://user:pw@flowpark.test/callbacks/ocr",
        "http://flowpark.test.evil.test/callbacks",
        "not a url",
    ],
)
async def test_ocr_refuses_a_callback_outside_its_allowed_bases(
    client: httpx.AsyncClient, ocr: FakeOcrService, url: str
) -> None:
    resp = await client.post(
        "/fake/ocr/jobs", json={"documentId": "doc-1", "pages": 1, "callbackUrl": url}
    )
    assert resp.status_code == 422 and resp.json() == {"code": "ocr.callback_not_allowed"}
    assert (await client.get("/fake/ocr/jobs")).json() == []


async def test_ocr_without_allowed_bases_accepts_no_callback(clock: MutableClock) -> None:
    service = FakeOcrService(now=clock, callback_token="t")
    try:
        with pytest.raises(OcrCallbackNotAllowed):
            service.upload("doc-1", 1, CALLBACK_URL)
    finally:
        await service.close()


def test_the_fake_ocr_keeps_its_jobs_in_its_state_file(tmp_path: Path) -> None:
    """A new service on the same file (a restarted node) knows every job: pending ones
    still complete by the clock, cancelled and early-completed ones keep their status, a
    repeated upload key answers its first job; a torn last line (a kill mid-write) is
    skipped."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    state = tmp_path / "fake-ocr.jsonl"
    first = FakeOcrService(per_page=timedelta(seconds=10), now=lambda: now[0], state_file=state)
    pending = first.upload("d-1", 1, idempotency_key="k-1").job_id
    cancelled = first.upload("d-2", 1).job_id
    completed = first.upload("d-3", 1).job_id
    first.cancel(cancelled)
    first.complete(completed)
    with state.open("a") as out:
        out.write('{"op": "upload", "jobId": "torn')

    again = FakeOcrService(per_page=timedelta(seconds=10), now=lambda: now[0], state_file=state)
    assert [(j.job_id, j.status) for j in again.list_jobs()] == [
        (pending, "pending"),
        (cancelled, "cancelled"),
        (completed, "completed"),
    ]
    assert again.upload("d-1", 1, idempotency_key="k-1").job_id == pending
    now[0] += timedelta(seconds=10)
    assert again.get(pending).status == "completed"
    assert FakeOcrService(now=lambda: now[0]).list_jobs() == []  # no file: memory only


def test_the_fake_job_runner_keeps_its_jobs_in_its_state_file(tmp_path: Path) -> None:
    """A restarted job runner knows every job: its start instant (so its state still follows
    the clock), its input, a forced outcome, and the job an idempotency key named."""
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    state = tmp_path / "fake-jobs.jsonl"

    def runner() -> FakeJobService:
        return FakeJobService(
            queued_for=timedelta(seconds=2),
            succeed_after=timedelta(seconds=6),
            now=lambda: now[0],
            state_file=state,
        )

    first = runner()
    first.start("j-1", {"size": 3}, idempotency_key="k-1")
    first.start("j-2")
    first.fail("j-2", "disk full")
    now[0] += timedelta(seconds=3)

    again = runner()
    assert again.get("j-1").state == "RUNNING" and again.input_of("j-1") == {"size": 3}
    assert (again.get("j-2").state, again.get("j-2").error) == ("FAILED", "disk full")
    view, created = again.start("j-other", idempotency_key="k-1")
    assert (view.job_id, created) == ("j-1", False)
    now[0] += timedelta(seconds=3)
    assert again.get("j-1").state == "SUCCEEDED"


async def test_a_restarted_fake_ocr_calls_back_once_per_job(
    tmp_path: Path, clock: MutableClock, sink: CallbackSink
) -> None:
    """A job that completed by the clock before the restart was called back then: the new
    service does not call it back again. One that came due while the service was down has
    had no callback yet: the new service sends it, once."""
    state = tmp_path / "fake-ocr.jsonl"

    def service() -> FakeOcrService:
        return FakeOcrService(
            per_page=timedelta(minutes=1),
            now=clock,
            callback_client_factory=sink.client_factory(),
            callback_backoff=timedelta(0),
            callback_bases=(CALLBACK_BASE,),
            state_file=state,
        )

    first = service()
    called_back = first.upload("doc-a", 1, CALLBACK_URL).job_id
    clock.advance(timedelta(minutes=1))
    assert first.get(called_back).status == "completed"
    await first.drain()
    came_due = first.upload("doc-b", 1, CALLBACK_URL).job_id
    await first.close()
    clock.advance(timedelta(minutes=1))

    again = service()
    try:
        assert {j.job_id: j.status for j in again.list_jobs()} == {
            called_back: "completed",
            came_due: "completed",
        }
        again.list_jobs()
        await again.drain()
    finally:
        await again.close()
    keys = [r.headers["idempotency-key"] for r in sink.requests]
    assert keys == [f"ocr-{called_back}", f"ocr-{came_due}"]
