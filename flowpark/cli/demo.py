"""``flowpark demo``: the main job end to end on SQLite, printed as it happens.

Migrates the database, serves flowpark (samples + fake OCR) on loopback with uvicorn, sends
a demo document over HTTP with a bearer token and an idempotency key, and prints its state
and journal until it completes. Then a second document shows the webhook path: the fake
OCR's complete-now route calls the ``ocr.completed`` signal, which ends the wait at once.

``flowpark demo --embedded`` serves the shop sample instead (:mod:`flowpark.samples.shop`:
flowpark inside a FastAPI app of its own): an order and its payment's start written in one
transaction, followed until the order is paid, then an order the shop refuses after the
start, which leaves no instance and calls no provider.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx

from flowpark.cli.consoles import printable
from flowpark.engine.decide.deadlines import POLL_BUDGET, RETRY_TOTAL, SIGNAL_TIMEOUT
from flowpark.settings import DEFAULT_API_TOKEN, Settings

__all__ = ["journal_lines", "listening_socket", "port_refused", "run_demo", "run_embedded_demo"]


def run_demo(
    *, host: str, port: int, pages: int, per_page: float, scan_interval: float, database_url: str
) -> int:
    """Run the demo; returns the process exit code.

    The demo's listening socket is bound first and held until the demo ends (uvicorn
    serves that very socket), so no other process can take the port between the check
    and the serving. ``port`` 0 takes any free port; the serving line names it.

    Returns:
        0 when both documents completed; 1 when one did not; 2 when ``host:port`` cannot
        be listened on (in use, or not an address of this machine): one line on stderr
        naming the port and how to choose another, before anything is migrated; 3 when
        the database cannot be migrated (unreachable, not a database URL): one line on
        stderr. Never a traceback.
    """
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        print(
            f"error: cannot serve the demo on {host}:{port}: {_reason(exc)} "
            "(choose another with --port, or --port 0 for any free port)",
            file=sys.stderr,
        )
        return 2
    with sock:
        return asyncio.run(_demo(sock, host, pages, per_page, scan_interval, database_url))


def run_embedded_demo(*, host: str, port: int, scan_interval: float, database_url: str) -> int:
    """Run the embedded demo (the shop sample); returns the process exit code.

    Returns:
        0 when the order was paid and the refused order left nothing behind; 1 when not;
        2 and 3 as :func:`run_demo`.
    """
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        print(
            f"error: cannot serve the demo on {host}:{port}: {_reason(exc)} "
            "(choose another with --port, or --port 0 for any free port)",
            file=sys.stderr,
        )
        return 2
    with sock:
        return asyncio.run(_shop_demo(sock, host, scan_interval, database_url))


def _store_unavailable(detail: str) -> int:
    """Print ``error: store_unavailable: <detail>`` (one line, secrets masked); exit code 3."""
    from flowpark.redaction import redact

    print(f"error: store_unavailable: {redact(' '.join(detail.split()))}", file=sys.stderr)
    return 3


def _reason(exc: OSError) -> str:
    """An ``OSError`` of a bind as a short phrase, e.g. ``address already in use``."""
    return str(exc.strerror or exc).lower()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, with the options uvicorn uses
    (``SO_REUSEADDR``, so a port left in ``TIME_WAIT`` is taken) and ``IPPROTO_TCP`` (as
    :func:`flowpark.cli.serving.tcp_socket`, for ``TCP_NODELAY``).

    Args:
        host: an address or a name of this machine.
        port: the TCP port; 0 for any free one (read it back with ``getsockname()``).

    Returns:
        The socket; the caller closes it.

    Raises:
        OSError: the host does not resolve, or the port cannot be bound (in use, not an
            address of this machine, a privileged port).
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def port_refused(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (e.g. ``address already in use``), or None.

    Binds and closes a socket as :func:`listening_socket` does, so a port another process
    listens on is refused here, and a port left in ``TIME_WAIT`` is not. The port may be
    taken again as soon as this returns: hold :func:`listening_socket`'s socket instead
    where that matters.
    """
    try:
        listening_socket(host, port).close()
    except OSError as exc:
        return _reason(exc)
    return None


async def _demo(
    sock: socket.socket,
    host: str,
    pages: int,
    per_page: float,
    scan_interval: float,
    database_url: str,
) -> int:
    from flowpark.runtime.app import create_app
    from flowpark.samples.registry import sample_flows
    from flowpark.samples.settings import SampleSettings

    base = _base_url(sock, host)
    settings = _demo_settings(database_url, base, scan_interval, flows="samples")
    token = sorted(settings.tokens)[0]
    failed = await _migrate(database_url, settings.database_schema)
    if failed is not None:
        return failed
    app = create_app(settings, flows=[sample_flows(SampleSettings(sample_ocr_per_page=per_page))])
    async with _serving(app, sock, host, settings) as started:
        if not started:
            return 1
        print(
            f"flowpark serving on {base} (sweep every {scan_interval}s, fake OCR "
            f"{per_page}s/page); OpenAPI at {base}/docs, console at {base}/ui"
        )
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            callbacks = SampleSettings().ocr_callbacks
            ok = await _document(client, pages, webhook=False, callbacks=callbacks)
            ok = await _document(client, pages, webhook=True, callbacks=callbacks) and ok
            events = (await client.get("/api/v1/events")).json()
            names = ", ".join(sorted({e["name"] for e in events}))
            print(f"outbox: {len(events)} event(s) in this database: {names}")
            print(
                "next: `flowpark serve` runs a node that stays up (its console at /ui, "
                "`flowpark instances list` lists what ran); the README's 'Your own flows' "
                "serves yours"
            )
        return 0 if ok else 1


async def _shop_demo(
    sock: socket.socket, host: str, scan_interval: float, database_url: str
) -> int:
    from flowpark.samples.shop.app import ShopSettings, create_app

    base = _base_url(sock, host)
    settings = _demo_settings(database_url, base, scan_interval)
    token = sorted(settings.tokens)[0]
    failed = await _migrate(database_url, settings.database_schema)
    if failed is not None:
        return failed
    shop = ShopSettings(base_url=base)
    async with _serving(create_app(shop, settings), sock, host, settings) as started:
        if not started:
            return 1
        print(
            f"shop serving on {base}, flowpark included at /flowpark (sweep every "
            f"{scan_interval}s; the fake payment provider takes {shop.fake_payment_seconds}s)"
        )
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as client:
            paid = await _paid_order(client)
            refused = await _refused_order(client)
        where = f"FLOWPARK_DATABASE_URL={database_url} uvicorn flowpark.samples.shop.app:app"
        print(
            f"\nnext: serve the shop and keep it up ({where}), then look at /docs (the "
            "shop's routes and flowpark's, tagged 'flowpark: ...'), GET /orders/{id}, and "
            "the payments at /flowpark/api/v1/instances?flow=payment.await (with "
            f"'Authorization: Bearer {token}'); docs/embedding.md explains the code"
        )
        return 0 if paid and refused else 1


async def _paid_order(client: httpx.AsyncClient) -> bool:
    """An order saved with its payment's start in one transaction, followed until paid."""
    body = {"sku": "tea", "quantity": 2}
    print(f"\n== an order: POST /orders {json.dumps(body)}")
    resp = await client.post("/orders", json=body)
    print(f"POST /orders -> {resp.status_code} {json.dumps(resp.json())}")
    if resp.status_code != 201:
        return False
    order = resp.json()
    instance_id = order["payment"]["instance_id"]
    print(
        "  the order's row and its payment's start (one INSERT into flow_instance) were "
        "written in one transaction; on its commit the payment runs at once"
    )
    started, last = time.monotonic(), None
    while True:
        order = (await client.get(f"/orders/{order['id']}")).json()
        payment = order["payment"]
        line = (order["status"], payment["state"], payment["next_check_at"])
        if line != last:
            last = line
            waits = ""
            if payment["state"] == "suspended":
                webhook = " or ".join(payment["awaiting"]) or "nothing"
                waits = f"  waits for {webhook}, next status check {_instant(line[2])}"
            print(
                f"t+{time.monotonic() - started:5.1f}s order={order['status']:<16} "
                f"payment={payment['state']:<9}{waits}"
            )
        if payment["state"] in ("completed", "failed", "cancelled"):
            break
        if time.monotonic() - started > 120:
            print("gave up after 120 s")
            return False
        await asyncio.sleep(0.25)
    view = (await client.get(f"/flowpark/api/v1/instances/{instance_id}")).json()
    print(f"journal of payment.await {instance_id} (GET /flowpark/api/v1/instances/{{id}}):")
    for sentence in journal_lines(view["journal"]):
        print(f"  {sentence}")
    ended = view["result"] if view["error"] is None else view["error"]
    print(f"{'result' if view['error'] is None else 'error'}: {json.dumps(ended)}")
    intents = await _intents(client, order["id"])
    print(f"the fake provider's intents for {order['id']}: {len(intents)}")
    return bool(order["status"] == "paid" and view["state"] == "completed" and len(intents) == 1)


async def _refused_order(client: httpx.AsyncClient) -> bool:
    """An order the shop's table refuses after its payment's start: nothing is left."""
    body = {"sku": "tea", "quantity": 50}
    print(f"\n== an order the shop refuses: POST /orders {json.dumps(body)}")
    before = await _payments(client)
    resp = await client.post("/orders", json=body)
    print(f"POST /orders -> {resp.status_code} {json.dumps(resp.json())}")
    if resp.status_code != 422:
        return False
    order_id = resp.json()["detail"]["orderId"]
    print(
        "  the payment was started first, then the shop's table refused the order (its "
        "CHECK: 1 to 10 of an item): the transaction rolled back, the start with it"
    )
    after = await _payments(client)
    intents = await _intents(client, order_id)
    read = await client.get(f"/orders/{order_id}")
    print(
        f"payment.await instances: {len(before)} before, {len(after)} after (no instance "
        f"for {order_id})"
    )
    print(f"the fake provider's intents for {order_id}: {len(intents)} (nothing was called)")
    print(f"GET /orders/{order_id} -> {read.status_code}")
    return before == after and not intents and read.status_code == 404


async def _intents(client: httpx.AsyncClient, order_id: str) -> list[dict[str, Any]]:
    """The fake payment provider's intents made for ``order_id``."""
    answer = await client.get("/fake/payments/intents", params={"reference": order_id})
    return list(answer.json())


async def _payments(client: httpx.AsyncClient) -> list[str]:
    """The ids of the ``payment.await`` instances (the newest 1,000)."""
    params: dict[str, str | int] = {"flow": "payment.await", "limit": 1000}
    listed = (await client.get("/flowpark/api/v1/instances", params=params)).json()
    return [row["instanceId"] for row in listed["instances"]]


def _base_url(sock: socket.socket, host: str) -> str:
    port = sock.getsockname()[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _demo_settings(database_url: str, base: str, scan_interval: float, **more: Any) -> Settings:
    """The demo node's settings: the database, its own URL, the sweep's interval and the
    API tokens (``FLOWPARK_API_TOKENS``, else the default), the rest from ``FLOWPARK_*``."""
    return Settings(
        database_url=database_url,
        self_url=base,
        timer_scan_interval=scan_interval,
        api_tokens=os.environ.get("FLOWPARK_API_TOKENS", DEFAULT_API_TOKEN),
        **more,
    )


async def _migrate(database_url: str, schema: str | None = None) -> int | None:
    """Migrate the demo's database to head (as ``flowpark db upgrade``); None when done,
    else the exit code 3, after one line on stderr."""
    from sqlalchemy.exc import ArgumentError, DBAPIError

    from flowpark.redaction import redact_url
    from flowpark.store.db import sync_url
    from flowpark.store.migrate import upgrade

    print(f"flowpark demo: migrating {redact_url(database_url)}")
    try:
        sync_url(database_url)
    except (ValueError, ArgumentError) as exc:  # not a database URL: one line
        return _store_unavailable(f"invalid database URL: {exc}")
    try:
        await asyncio.to_thread(upgrade, database_url, schema=schema)
    except DBAPIError as exc:  # unreachable: one line
        return _store_unavailable(f"cannot migrate the database at {database_url}: {exc.orig}")
    return None


@asynccontextmanager
async def _serving(
    app: Any, sock: socket.socket, host: str, settings: Settings
) -> AsyncIterator[bool]:
    """Serve ``app`` with uvicorn on ``sock`` (as ``flowpark serve`` does: the head and time
    bounds, and the problem+json refusals); yields True once serving, False when the server
    stopped first; stops it when the block ends."""
    import uvicorn  # here: the worker imports this module for port_refused alone

    from flowpark.runtime.forwarded import forwarded_options
    from flowpark.runtime.protocol import BoundedHttpToolsProtocol

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=sock.getsockname()[1],
            log_level="warning",
            lifespan="on",
            http=BoundedHttpToolsProtocol,
            timeout_keep_alive=settings.keep_alive_seconds,
            **forwarded_options(settings),
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
                yield False
                return
            await asyncio.sleep(0.05)
        yield True
    finally:
        server.should_exit = True
        await serving


def _path(*, webhook: bool, callbacks: bool) -> str:
    """What ends the wait of a demo document, as its heading says it.

    Args:
        webhook: the fake OCR's job is completed at once (the second document).
        callbacks: the fake OCR calls the ``ocr.completed`` webhook (``FLOWPARK_OCR_CALLBACKS``).

    Returns:
        The ``path:`` phrase of the heading.
    """
    if webhook and callbacks:
        return "webhook (fake OCR completes now)"
    if webhook:
        return "fake OCR completes now; callbacks off, so the next status check sees it"
    if callbacks:
        return "parked poll, until a status check or the OCR's callback says done"
    return "parked poll, until a status check says done (callbacks off)"


async def _document(
    client: httpx.AsyncClient, pages: int, *, webhook: bool, callbacks: bool
) -> bool:
    doc_id = f"demo-{uuid.uuid4().hex[:8]}"
    path = _path(webhook=webhook, callbacks=callbacks)
    print(f"\n== document {doc_id}: {pages} pages, path: {path}")
    resp = await client.post(
        "/api/v1/documents",
        json={"documentId": doc_id, "contentType": "application/pdf", "pages": pages},
        headers={"Idempotency-Key": f"{doc_id}-key"},
    )
    print(f"POST /api/v1/documents -> {resp.status_code} {json.dumps(resp.json())}")
    if resp.status_code != 202:
        return False
    instance_id = resp.json()["instanceId"]
    started = time.monotonic()
    if webhook:
        jobs = (await client.get("/fake/ocr/jobs")).json()
        job = next(j for j in jobs if j["documentId"] == doc_id)
        fires = "the provider's webhook fires" if callbacks else "no webhook: callbacks off"
        print(f"POST /fake/ocr/jobs/{job['jobId']}/complete ({fires})")
        await client.post(f"/fake/ocr/jobs/{job['jobId']}/complete")
    last = None
    while True:
        view = (await client.get(f"/api/v1/instances/{instance_id}")).json()
        line = (view["state"], view["wakeAt"], len(view["journal"]))
        if line != last:
            last = line
            wakes = f"wakes at {_instant(view['wakeAt'])}  " if view["wakeAt"] else ""
            print(
                f"t+{time.monotonic() - started:5.1f}s state={view['state']:<9}  {wakes}"
                f"{_last_attempt(view['attempts'])}"
            )
        if view["state"] in ("completed", "failed", "cancelled"):
            break
        if time.monotonic() - started > 120:
            print("gave up after 120 s")
            return False
        await asyncio.sleep(0.25)
    print(
        "journal (what the engine stored, in commit order; #n is the write: rows written"
        " together share it, #0 is the start's):"
    )
    for sentence in journal_lines(view["journal"]):
        print(f"  {printable(sentence)}")
    ended = (
        f"result: {json.dumps(view['result'])}"
        if view["error"] is None
        else (f"error: {json.dumps(view['error'])}")
    )
    print(f"{ended}  ({time.monotonic() - started:.1f}s)")
    return bool(view["state"] == "completed")


def _last_attempt(attempts: list[dict[str, object]]) -> str:
    """One short phrase for an instance's attempts: how many, and how the last one went.

    Args:
        attempts: The ``attempts`` list of ``GET /api/v1/instances/{id}`` (camelCase keys).

    Returns:
        ``"attempts: 0"`` when there is none, else e.g. ``"attempts: 3, last #2 success
        (0.80 s late)"`` or ``"attempts: 4, last #3 ended by signal ocr.completed"``.
    """
    if not attempts:
        return "attempts: 0"
    last = attempts[-1]
    if last.get("signal"):
        text = (
            f"attempts: {len(attempts)}, last #{last['attempt']} ended by signal {last['signal']}"
        )
    else:
        text = f"attempts: {len(attempts)}, last #{last['attempt']} {last['outcome']}"
    lateness = last.get("latenessSeconds")
    if isinstance(lateness, (int, float)):
        text += f" ({-lateness:.2f} s early)" if lateness < 0 else f" ({lateness:.2f} s late)"
    return text


#: What each stored bound is called (the console's words).
_BOUNDS = {
    POLL_BUDGET: "poll budget",
    SIGNAL_TIMEOUT: "signal timeout",
    RETRY_TOTAL: "retry window",
}


def journal_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The journal of ``GET /api/v1/instances/{id}`` as one plain sentence per row.

    Args:
        rows: its ``journal`` list (camelCase keys), in commit order.

    Returns:
        One line per row: ``#<sequence>``, the step's index and name, then what the row
        says, e.g. ``#5    step 2 ocr.status           attempt 0, try 1: success`` or
        ``#3    step 1 poll                 poll budget stored: ends 01:05:06 UTC``.
    """
    polls = {
        row["stepId"]
        for row in rows
        if row["kind"] == "deadline" and row["capabilityId"] == POLL_BUDGET
    }
    executions = {  # the capability each (step, scope) ran: what a retry window bounds
        (row["stepId"], row["scope"]): row["capabilityId"]
        for row in rows
        if row["kind"] in ("step", "compensation")
    }
    return [_journal_line(row, polls, executions) for row in rows]


def _journal_line(
    row: dict[str, Any], polls: set[int], executions: dict[tuple[int, int], str]
) -> str:
    """One journal row as a sentence; ``polls`` are the steps that are polls (their next
    step is the body whose executions are the attempts), ``executions`` the capability
    each (step, scope) ran."""
    kind, name, step = row["kind"], row["capabilityId"], row["stepId"]
    in_poll = step - 1 in polls or (kind == "signal" and step in polls)
    attempt = f"attempt {row['scope']}" if in_poll else ""
    if kind == "deadline":
        bound = _BOUNDS.get(name, name)
        what = f"{bound} stored: ends {_instant((row.get('values') or {}).get('endsAt'))}"
        if name == POLL_BUDGET:
            name = "poll"
        else:
            name = executions.get((step, row["scope"]), "await" if name == SIGNAL_TIMEOUT else name)
            what = f"{attempt}, {what}" if attempt else what
    elif kind == "step":
        what = f"try {row['try']}: {row['outcome']}"
        if row.get("errorType"):
            retry = "final" if row.get("final") else f"next try {_instant(row.get('nextTryAt'))}"
            what += f" ({row['errorType']}; {retry})"
        what = f"{attempt}, {what}" if attempt else what
    elif kind == "signal":
        what = "signal taken: the wait ends" + (f" (during {attempt})" if attempt else "")
        name = f"signal {name}"
    elif kind == "emit":
        what = "event written to the outbox"
        name = f"emit {name}"
    elif kind == "compensation":
        what = f"compensation (undo) try {row['try']}: {row['outcome']}"
    else:
        what = f"{kind}: {row['outcome']}"
    return f"#{row['sequence']:<4} step {step} {name:<26} {what}"


def _instant(text: object) -> str:
    """An API instant (ISO-8601, UTC) as ``HH:MM:SS UTC`` (with its date when it is not
    today's), or ``?`` when there is none."""
    if not isinstance(text, str):
        return "?"
    at = datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)
    shown = at.strftime("%H:%M:%S UTC")
    if at.date() != datetime.now(UTC).date():
        shown = f"{at.date().isoformat()} {shown}"
    return shown
