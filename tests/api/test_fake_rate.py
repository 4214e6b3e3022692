"""The fake OCR's rate limit, scripted pushback and per-100 ms load counts, over real HTTP
(``flowpark fakes``' app under uvicorn on loopback), on a hand-moved gate clock."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from flowpark.samples.fakes.ratelimit import RateGate
from flowpark.samples.fakes.server import create_fakes_server
from flowpark.samples.settings import SampleSettings
from flowpark.settings import Settings
from tests.support.server import live_server

T0 = 1_800_000_000.0  # epoch seconds, on a bucket boundary


class Clock:
    """Epoch seconds a test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def serve(sample: SampleSettings, clock: Clock) -> Iterator[tuple[httpx.Client, RateGate]]:
    built: list[RateGate] = []

    def factory(settings: Settings) -> object:
        app = create_fakes_server(settings, sample, per_page=3600)
        gate: RateGate = app.state.fake_ocr.gate
        gate.clock = clock
        gate.set_rate(gate.rate_per_second, gate.burst)  # the bucket fills on the test clock
        built.append(gate)
        return app

    with (
        live_server("sqlite+aiosqlite://", app_factory=factory) as server,  # type: ignore[arg-type]
        httpx.Client(base_url=server.base_url, timeout=10) as client,
    ):
        yield client, built[0]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limited(clock: Clock) -> Iterator[tuple[httpx.Client, RateGate]]:
    yield from serve(SampleSettings(ocr_rate_limit=2, ocr_rate_burst=2), clock)


@pytest.fixture
def open_gate(clock: Clock) -> Iterator[tuple[httpx.Client, RateGate]]:
    yield from serve(SampleSettings(), clock)


def upload(client: httpx.Client) -> httpx.Response:
    return client.post("/fake/ocr/jobs", json={"documentId": "d", "pages": 1})


def test_beyond_the_rate_is_429_with_retry_after(
    limited: tuple[httpx.Client, RateGate], clock: Clock
) -> None:
    client, gate = limited
    assert (gate.rate_per_second, gate.burst) == (2, 2)  # from FLOWPARK_OCR_RATE_*
    first = upload(client)
    assert first.status_code == 201
    job = first.json()["jobId"]
    assert client.get(f"/fake/ocr/jobs/{job}").status_code == 200  # the burst: two at once
    refused = client.get(f"/fake/ocr/jobs/{job}")
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"  # one token at 2/s: 0.5 s, rounded up
    assert refused.json() == {"code": "ocr.rate_limited"}
    assert upload(client).status_code == 429  # uploads share the limit

    clock.now += 0.5  # one token back
    assert client.get(f"/fake/ocr/jobs/{job}").status_code == 200
    assert client.get(f"/fake/ocr/jobs/{job}").status_code == 429
    # admin routes are not limited
    assert client.get("/fake/ocr/jobs").status_code == 200

    load = client.get("/fake/ocr/admin/load").json()
    assert load["bucketMs"] == 100 and load["ratePerSecond"] == 2 and load["burst"] == 2
    assert load["buckets"] == [
        {"startMs": int(T0 * 1000), "served": 2, "refused": 2},
        {"startMs": int(T0 * 1000) + 500, "served": 1, "refused": 1},
    ]
    assert (load["served"], load["refused"]) == (3, 3)
    since = client.get("/fake/ocr/admin/load", params={"since": int(T0 * 1000) + 100}).json()
    assert [b["startMs"] for b in since["buckets"]] == [int(T0 * 1000) + 500]


def test_a_slow_rate_asks_for_a_longer_retry_after(
    open_gate: tuple[httpx.Client, RateGate], clock: Clock
) -> None:
    client, _gate = open_gate
    changed = client.put("/fake/ocr/admin/rate", json={"ratePerSecond": 0.25, "burst": 1})
    assert changed.status_code == 200 and changed.json()["ratePerSecond"] == 0.25
    assert upload(client).status_code == 201
    refused = upload(client)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "4"
    clock.now += 3
    assert upload(client).headers["retry-after"] == "1"
    clock.now += 1
    assert upload(client).status_code == 201
    # no limit again
    assert client.put("/fake/ocr/admin/rate", json={"ratePerSecond": None}).status_code == 200
    assert all(upload(client).status_code == 201 for _ in range(5))


def test_bad_rates_are_refused(open_gate: tuple[httpx.Client, RateGate]) -> None:
    client, gate = open_gate
    for body in ({"ratePerSecond": 0}, {"ratePerSecond": -1}, {"ratePerSecond": 1, "burst": 0}):
        assert client.put("/fake/ocr/admin/rate", json=body).status_code == 422, body
    assert gate.rate_per_second is None
    with pytest.raises(ValueError, match="rate_per_second"):
        RateGate(0)


def test_a_scripted_pushback_window(open_gate: tuple[httpx.Client, RateGate], clock: Clock) -> None:
    client, _gate = open_gate
    job = upload(client).json()["jobId"]
    started = client.post(
        "/fake/ocr/admin/pushback",
        json={"status": 429, "retryAfterSeconds": 5, "durationSeconds": 30},
    )
    assert started.status_code == 200
    assert started.json()["pushbackUntilMs"] == int((T0 + 30) * 1000)
    clock.now += 29.9
    refused = client.get(f"/fake/ocr/jobs/{job}")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
    clock.now += 0.1
    assert client.get(f"/fake/ocr/jobs/{job}").status_code == 200
    assert client.get("/fake/ocr/admin/rate").status_code == 405

    client.post(
        "/fake/ocr/admin/pushback",
        json={"status": 503, "retryAfterSeconds": 2, "durationSeconds": 10},
    )
    unavailable = upload(client)
    assert unavailable.status_code == 503 and unavailable.headers["retry-after"] == "2"
    client.post("/fake/ocr/admin/pushback", json={"durationSeconds": 0})  # ends it now
    assert client.get(f"/fake/ocr/jobs/{job}").status_code == 200

    load = client.get("/fake/ocr/admin/load").json()
    assert (load["served"], load["refused"]) == (3, 2)
    assert client.delete("/fake/ocr/admin/load").status_code == 200
    assert client.get("/fake/ocr/admin/load").json()["buckets"] == []
