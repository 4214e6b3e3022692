"""The in-process client (:class:`flowpark.embedding.LocalClient`) of a running embedded
flowpark, on both stores: the HTTP API's answers and the HTTP client's error classes,
without HTTP; and what each role runs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine

from flowpark import Backoff, Capability, Flow, Signal, StepContext
from flowpark.client.errors import (
    IdempotencyKeyReused,
    InstanceEnded,
    InstanceKeyInUse,
    InstanceNotFound,
    InvalidRequest,
    NotFound,
)
from flowpark.embedding import Flowpark, Role
from flowpark.runtime.loading import Deps
from flowpark.settings import Settings
from flowpark.store.db import async_url
from tests.conftest import pg_admin_url


class Item(BaseModel):
    """The flow's input."""

    item_id: str


class Approved(BaseModel):
    """The signal that ends its wait."""

    by: str


def flows(deps: Deps) -> list[Flow]:
    """A flow that waits for one signal, then returns who approved it."""
    return [
        Flow("item.approve", "1.0.0", input=Item)
        .await_signal(Signal("approved", Approved), timeout="PT1H")
        .returns(lambda bag: {"by": bag.get(Approved).by}, reads=(Approved,))
    ]


class Hang(Capability):
    """A call that outlasts any shutdown grace."""

    id = "test.hang"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        """Wait for an event nobody sets."""
        await asyncio.Event().wait()


class Refused(Capability):
    """A call its vendor refuses, the refusal naming the URL with its key."""

    id = "test.refused"
    idempotent = True

    async def execute(self, ctx: StepContext) -> None:
        """Fail as httpx does on a 401 (its message holds the URL, query and all)."""
        url = f"https://vendor.test/v1/charge?api_key={VENDOR_KEY}"
        httpx.Response(401, request=httpx.Request("GET", url)).raise_for_status()


#: The vendor key in the URL a failed call names.
VENDOR_KEY = f"key-{uuid.uuid4().hex}"


def refused(deps: Deps) -> list[Flow]:
    """A flow whose one step fails for good, naming a secret in its error."""
    return [
        Flow("item.refused", "1.0.0", input=Item).step(Refused()),
        Flow("item.refused_poll", "1.0.0", input=Item).poll_until(
            Refused(), until=lambda bag: True, interval=Backoff.fixed("PT1M"), timeout="PT1H"
        ),
    ]


def hanging(deps: Deps) -> list[Flow]:
    """A flow whose one step never ends by itself."""
    return [Flow("item.hang", "1.0.0", input=Item).step(Hang())]


@pytest.fixture
async def fp(store_url: str) -> AsyncIterator[Flowpark]:
    embedded = Flowpark(Settings(database_url=store_url, timer_scan_interval=60.0), flows=[flows])
    async with embedded.running():
        yield embedded


def _id() -> str:
    return f"item-{uuid.uuid4().hex[:8]}"


async def test_start_signal_get_and_list_answer_the_apis_models(fp: Flowpark) -> None:
    client = fp.client
    item = _id()
    started = await client.start("item.approve", {"item_id": item}, instance_key=item)
    assert started.status == "suspended"
    assert [a.signal for a in started.awaiting or []] == ["approved"]
    listed = await client.list(flow="item.approve", state="suspended", instance_key=item)
    assert [row.instance_id for row in listed.instances] == [started.instance_id]
    answer = await client.signal(started.instance_id, "approved", Approved(by="ana"))
    assert answer.created and answer.state == "completed"
    view = await client.get(started.instance_id)
    assert view.state == "completed" and view.result == {"by": "ana"}
    with pytest.raises(InstanceEnded) as ended:
        await client.cancel(started.instance_id)
    assert ended.value.code == "instance_ended"


async def test_errors_are_the_http_clients_classes_with_their_codes(fp: Flowpark) -> None:
    client = fp.client
    with pytest.raises(InstanceNotFound) as missing:
        await client.get(str(uuid.uuid4()))
    assert missing.value.status == 404
    with pytest.raises(NotFound) as no_flow:
        await client.start("no.such.flow", {})
    assert no_flow.value.code == "flow_not_found"
    with pytest.raises(InvalidRequest) as invalid:
        await client.start("item.approve", {"itemId": "x", "colour": "red"})
    assert invalid.value.code == "input_invalid"
    assert invalid.value.problem.errors
    item = _id()
    await client.start("item.approve", {"item_id": item}, idempotency_key=item, instance_key=item)
    again = await client.start(
        "item.approve", {"item_id": item}, idempotency_key=item, instance_key=item
    )
    assert again.status == "suspended"
    with pytest.raises(IdempotencyKeyReused):
        await client.start("item.approve", {"item_id": "other"}, idempotency_key=item)
    with pytest.raises(InstanceKeyInUse):
        await client.start("item.approve", {"item_id": item}, instance_key=item)


async def test_bad_keys_inputs_and_filters_are_refused_as_the_http_api_refuses_them(
    fp: Flowpark,
) -> None:
    client = fp.client
    item = {"item_id": _id()}
    for key in (5, "k" * 201, "a\nb", "a\x00b", "clé"):
        with pytest.raises(InvalidRequest) as bad_key:
            await client.start("item.approve", item, idempotency_key=key)  # type: ignore[arg-type]
        assert bad_key.value.code == "idempotency_key_invalid", key
    for instance_key in (5, "a\x00b", "\ud800"):
        with pytest.raises(InvalidRequest) as bad_instance_key:
            await client.start("item.approve", item, instance_key=instance_key)  # type: ignore[arg-type]
        assert bad_instance_key.value.code == "input_invalid", instance_key
    with pytest.raises(InvalidRequest) as unstorable:
        await client.start("item.approve", {"item_id": "a\x00b"})
    assert unstorable.value.code == "input_invalid"
    with pytest.raises(InvalidRequest) as bad_filter:
        await client.list(flow="item.approve\x00")
    assert bad_filter.value.code == "input_invalid"
    with pytest.raises(InstanceNotFound):
        await client.get(5)  # type: ignore[arg-type]
    started = await client.start("item.approve", item, idempotency_key=" ")  # blank: no key
    again = await client.start("item.approve", item, idempotency_key="")
    assert again.instance_id != started.instance_id
    with pytest.raises(InvalidRequest) as bad_payload:
        await client.signal(started.instance_id, "approved", {"by": "a\x00"})
    assert bad_payload.value.code == "input_invalid"
    with pytest.raises(InvalidRequest) as bad_action_key:
        await client.cancel(started.instance_id, idempotency_key="x" * 201)
    assert bad_action_key.value.code == "idempotency_key_invalid"


async def test_a_session_of_another_database_is_refused_without_showing_its_password(
    fp: Flowpark,
) -> None:
    admin = make_url(pg_admin_url())
    secret = admin.password or "a-password-of-the-query"
    theirs = (
        admin.set(drivername="postgresql+psycopg", password=None, database="postgres")
        .update_query_dict({"password": secret})
        .render_as_string(hide_password=False)
    )
    db = create_async_engine(theirs)
    try:
        async with async_sessionmaker(db)() as session, session.begin():
            with pytest.raises(InvalidRequest) as refused:
                await fp.client.start("item.approve", {"item_id": _id()}, session=session)
    finally:
        await db.dispose()
    assert refused.value.code == "transaction_not_shared"
    assert "/postgres" in str(refused.value) and secret not in str(refused.value)
    assert secret not in refused.value.problem.model_dump_json()


async def test_a_session_of_the_other_kind_is_a_type_error_naming_the_right_call(
    fp: Flowpark, store_url: str
) -> None:
    db = create_async_engine(async_url(store_url))
    try:
        async with async_sessionmaker(db)() as session, session.begin():
            with pytest.raises(TypeError, match="await start"):
                fp.client.start_sync("item.approve", {"item_id": _id()}, session=session)  # type: ignore[arg-type]
    finally:
        await db.dispose()


async def test_cancel_and_wake_are_recorded_with_the_clients_actor(fp: Flowpark) -> None:
    client = fp.client
    started = await client.start("item.approve", {"item_id": _id()})
    woken = await client.wake(started.instance_id)
    assert not woken.woken and woken.reason  # waits for a signal: nothing to run now
    cancelled = await client.cancel(started.instance_id)
    assert cancelled.state == "cancelled"
    view = await client.get(started.instance_id)
    assert [a.actor for a in view.actions or []][-1] == "in-process"


async def test_roles_api_runs_no_sweep_and_worker_serves_no_routes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/roles.db"
    api = Flowpark(Settings(database_url=url), flows=[flows], role=Role.API)
    host = FastAPI()
    api.include_in(host, prefix="/flowpark")
    assert any(getattr(r, "path", "") == "/flowpark" for r in host.router.routes)
    assert api.app.state.settings.run_sweeper is False
    worker = Flowpark(Settings(database_url=url), flows=[flows], role="worker")
    other = FastAPI()
    worker.include_in(other, prefix="/flowpark")
    assert not any(getattr(r, "path", "") == "/flowpark" for r in other.router.routes)
    assert worker.app.state.settings.run_sweeper is True
    with pytest.raises(ValueError):
        Flowpark(Settings(database_url=url), flows=[flows], role="sweeper")


async def test_shutdown_cuts_a_run_started_in_a_transaction_off_within_the_grace(
    store_url: str,
) -> None:
    settings = Settings(
        database_url=store_url, timer_scan_interval=60.0, shutdown_grace_seconds=0.5
    )
    embedded = Flowpark(settings, flows=[hanging])
    db = create_async_engine(async_url(store_url))
    read = text("SELECT state, lease_owner FROM flow_instance WHERE id = :id")
    try:
        async with embedded.running():
            async with async_sessionmaker(db)() as session, session.begin():
                started = await embedded.client.start(
                    "item.hang", {"item_id": _id()}, session=session
                )
            runs = embedded.engine().runs
            for _ in range(200):  # claimed after the commit: its run is in flight here
                if runs.in_flight:
                    break
                await asyncio.sleep(0.05)
            assert [c.instance_id for c in runs.in_flight.values()] == [started.instance_id]
            stopping = time.monotonic()
        took = time.monotonic() - stopping
        async with db.connect() as conn:
            row = (await conn.execute(read, {"id": started.instance_id})).one()
    finally:
        await db.dispose()
    assert took < 0.5 + 3.0, took  # the grace, not the step's own timeout
    assert row.state == "suspended" and row.lease_owner is None  # left to the next sweep


@pytest.mark.postgres
async def test_a_hosts_schema_translate_map_does_not_send_the_start_elsewhere(
    pg_url: str,
) -> None:
    from flowpark.migrations import upgrade

    upgrade(pg_url)  # flowpark's tables in public, the connection's default schema
    db = create_async_engine(async_url(pg_url))
    async with db.begin() as conn:  # a tenant's schema, with a table of the same name
        await conn.execute(text("CREATE SCHEMA tenant"))
        await conn.execute(
            text("CREATE TABLE tenant.flow_instance (LIKE public.flow_instance INCLUDING ALL)")
        )
    tenant = db.execution_options(schema_translate_map={None: "tenant"})
    embedded = Flowpark(Settings(database_url=pg_url, timer_scan_interval=60.0), flows=[flows])
    try:
        async with embedded.running():
            async with async_sessionmaker(tenant)() as session, session.begin():
                started = await embedded.client.start(
                    "item.approve", {"item_id": _id()}, session=session
                )
            view = await embedded.client.get(started.instance_id)  # where flowpark reads
            async with db.connect() as conn:
                strays = (await conn.execute(text("SELECT id FROM tenant.flow_instance"))).all()
    finally:
        await db.dispose()
    assert view.instance_id == started.instance_id and strays == []


async def test_a_failure_naming_a_secret_is_shown_masked_by_the_client_and_the_console(
    tmp_path: Path,
) -> None:
    from flowpark.migrations import upgrade

    url = f"sqlite:///{tmp_path}/secret.db"
    upgrade(url)
    embedded = Flowpark(Settings(database_url=url, api_tokens="ops-token"), flows=[refused])
    host = FastAPI()
    embedded.include_in(host, prefix="/flowpark", console=True)
    async with embedded.running():
        started = await embedded.client.start("item.refused", {"item_id": _id()})
        view = await embedded.client.get(started.instance_id)
        polled = await embedded.client.start("item.refused_poll", {"item_id": _id()})
        poll_view = await embedded.client.get(polled.instance_id)
        transport = httpx.ASGITransport(app=host)
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as http:
            signed = await http.post("/flowpark/ui/sign-in", data={"token": "ops-token"})
            assert signed.status_code == 303, signed.text
            page = await http.get(f"/flowpark/ui/instances/{started.instance_id}")
    assert view.state == "failed" and view.error is not None
    assert "api_key=***" in view.error.message
    assert VENDOR_KEY not in view.model_dump_json()
    tries = [t for a in poll_view.attempts or [] for t in a.tries or []]
    assert tries and all(t.error and "api_key=***" in (t.error.detail or "") for t in tries)
    assert VENDOR_KEY not in poll_view.model_dump_json()
    assert page.status_code == 200 and "api_key=***" in page.text
    assert VENDOR_KEY not in page.text
