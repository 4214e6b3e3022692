"""The client's retries on a scripted transport (``httpx.MockTransport``): a read, and a
write with an idempotency key, are sent again after a 503 or a broken connection, within
the call's timeout; a write without a key never is; problems raise their classes."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from flowpark.client import (
    AsyncClient,
    Client,
    Conflict,
    InstanceKeyInUse,
    ServerError,
    TransportError,
)

ID = "01936b2e-7a40-7c3e-9a51-5f1d2c3b4a59"
VIEW = {
    "instanceId": ID,
    "status": "suspended",
}
UNAVAILABLE = {
    "type": "urn:flowpark:problem:store_unavailable",
    "title": "Store unavailable",
    "status": 503,
    "detail": "the database does not answer",
    "code": "store_unavailable",
}


def scripted(
    *answers: httpx.Response | Exception,
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    sent: list[httpx.Request] = []
    script = list(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return handle, sent


def client(handle: Callable[[httpx.Request], httpx.Response], **kwargs: float) -> Client:
    http = httpx.Client(transport=httpx.MockTransport(handle), base_url="http://node")
    return Client(token="t", http=http, **kwargs)  # type: ignore[arg-type]


def started() -> httpx.Response:
    return httpx.Response(202, json=VIEW)


def test_a_start_with_a_key_is_sent_again_after_a_503_and_a_broken_connection() -> None:
    handle, sent = scripted(
        httpx.Response(503, json=UNAVAILABLE), httpx.ConnectError("refused"), started()
    )
    answer = client(handle).start("/api/v1/documents", {"pages": 1}, idempotency_key="k")
    assert answer.instance_id == ID
    assert len(sent) == 3
    assert {r.headers["idempotency-key"] for r in sent} == {"k"}
    assert {r.headers["authorization"] for r in sent} == {"Bearer t"}
    assert json.loads(sent[0].content) == {"pages": 1}


def test_a_start_without_a_key_is_never_sent_twice() -> None:
    handle, sent = scripted(httpx.Response(503, json=UNAVAILABLE))
    with pytest.raises(ServerError) as caught:
        client(handle).start("/api/v1/documents", {"pages": 1})
    assert caught.value.code == "store_unavailable" and len(sent) == 1
    handle, sent = scripted(httpx.ReadTimeout("no answer"))
    with pytest.raises(TransportError):
        client(handle).start("/api/v1/documents", {"pages": 1})
    assert len(sent) == 1


def test_retries_stop_at_their_count_and_the_problem_is_raised() -> None:
    handle, sent = scripted(httpx.Response(503, json=UNAVAILABLE))
    with pytest.raises(ServerError):
        client(handle, retries=2).get(ID)
    assert len(sent) == 3


def test_a_problem_of_a_code_keeps_its_fields_and_an_unknown_code_its_status_family() -> None:
    in_use = {"status": 409, "code": "instance_key_in_use", "detail": "held", "instanceId": ID}
    handle, _ = scripted(httpx.Response(409, json=in_use))
    with pytest.raises(InstanceKeyInUse) as caught:
        client(handle).start("/api/v1/documents", {}, instance_key="b-1", idempotency_key="k")
    assert caught.value.problem["instanceId"] == ID
    handle, _ = scripted(httpx.Response(409, json={"status": 409, "code": "newer_code"}))
    with pytest.raises(Conflict):
        client(handle).wake(ID)
    handle, _ = scripted(httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(ServerError) as gateway:
        client(handle).cancel(ID)
    assert gateway.value.code == "http_502"


async def test_the_async_client_retries_a_read_the_same_way() -> None:
    handle, sent = scripted(httpx.ConnectError("refused"), httpx.Response(200, json=[]))
    http = httpx.AsyncClient(transport=httpx.MockTransport(handle), base_url="http://node")
    async with http, AsyncClient(token="t", http=http) as client:
        assert [e async for e in client.events(after=3)] == []
    assert len(sent) == 2 and sent[-1].url.params["after"] == "3"


def test_a_client_needs_a_url_and_a_positive_timeout() -> None:
    with pytest.raises(ValueError):
        Client()
    with pytest.raises(ValueError):
        Client("http://node", timeout=0)
    with pytest.raises(ValueError, match="retries"):
        Client("http://node", retries=-1)
    with pytest.raises(ValueError, match="retries"):
        AsyncClient("http://node", retries=-1)


def test_a_wait_of_a_negative_timeout_is_refused_before_anything_is_sent() -> None:
    handle, sent = scripted(started())
    with client(handle) as c, pytest.raises(ValueError, match="timeout"):
        c.wait(ID, timeout=-1)
    assert sent == []


@pytest.mark.parametrize("key", ["", "   ", "a\x00b", "a\nb", "\u00e9t\u00e9", "k" * 201, 42])
def test_a_key_the_node_cannot_take_is_refused_before_anything_is_sent(key: object) -> None:
    handle, sent = scripted(started())
    with client(handle) as c, pytest.raises(ValueError, match="idempotency_key must be"):
        c.start("/api/v1/documents", {}, idempotency_key=key)  # type: ignore[arg-type]
    with client(handle) as c, pytest.raises(ValueError, match="idempotency_key must be"):
        c.signal(ID, "ocr.completed", {}, idempotency_key=key)  # type: ignore[arg-type]
    assert sent == []


def test_request_answers_any_routes_json_with_the_same_retries_and_errors() -> None:
    counts = {"byState": [], "total": 0, "overdue": 0, "stuck": 0}
    handle, sent = scripted(httpx.Response(503, json=UNAVAILABLE), httpx.Response(200, json=counts))
    got = client(handle).request("get", "/api/v1/instances/counts", params={"overdue": 60})
    assert got == counts and len(sent) == 2  # a read: retried
    assert sent[-1].method == "GET" and sent[-1].url.params["overdue"] == "60"
    handle, sent = scripted(httpx.Response(503, json=UNAVAILABLE))
    with pytest.raises(ServerError):
        client(handle).request("POST", "/api/v1/instances/actions", body={"action": "wake"})
    assert len(sent) == 1  # a write without a key: sent once
    handle, sent = scripted(httpx.ConnectError("refused"), httpx.Response(202, json={"acted": 1}))
    keyed = client(handle).request("POST", "/api/v1/x", body={}, idempotency_key="bulk-1")
    assert keyed == {"acted": 1} and [r.headers["idempotency-key"] for r in sent] == ["bulk-1"] * 2
    handle, _ = scripted(httpx.Response(204))
    assert client(handle).request("POST", "/api/v1/x", idempotency_key="k") is None
    in_use = {"status": 409, "code": "instance_key_in_use", "detail": "held", "instanceId": ID}
    handle, _ = scripted(httpx.Response(409, json=in_use))
    with pytest.raises(InstanceKeyInUse):
        client(handle).request("POST", "/api/v1/documents", body={})


async def test_the_async_clients_request_is_the_same() -> None:
    handle, sent = scripted(httpx.ConnectError("refused"), httpx.Response(200, json={"nodes": []}))
    http = httpx.AsyncClient(transport=httpx.MockTransport(handle), base_url="http://node")
    async with http, AsyncClient(token="t", http=http) as client:
        assert await client.request("GET", "/api/v1/nodes") == {"nodes": []}
    assert len(sent) == 2 and sent[-1].headers["authorization"] == "Bearer t"


def test_a_keyed_action_is_repeated_while_its_first_request_still_acts() -> None:
    in_progress = {
        "type": "urn:flowpark:problem:action_in_progress",
        "title": "action_in_progress",
        "status": 409,
        "detail": "the first wake request with this Idempotency-Key is still acting",
        "code": "action_in_progress",
    }
    woken = {"instanceId": ID, "woken": True, "state": "suspended"}
    busy = httpx.Response(409, json=in_progress, headers={"Retry-After": "0"})
    handle, sent = scripted(busy, httpx.Response(200, json=woken))
    assert client(handle).wake(ID, idempotency_key="w-1").woken is True
    assert [r.headers["idempotency-key"] for r in sent] == ["w-1"] * 2
    handle, sent = scripted(busy)
    with pytest.raises(Conflict) as refused:  # without a key: sent once, the problem raised
        client(handle).wake(ID)
    assert refused.value.code == "action_in_progress" and len(sent) == 1
