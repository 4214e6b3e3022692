"""Wiring: ``create_app(settings)`` builds the database engine, the flowpark engine, the
HTTP client and the sweep scheduler in the lifespan, never at import time."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from flowpark.api.hygiene import InputHygiene
from flowpark.api.openapi import api_app
from flowpark.api.problems import install_problem_handlers, problem
from flowpark.api.routes import include_api_routes, include_health_routes
from flowpark.engine.clock import Clock, SystemClock
from flowpark.engine.node.engine import Engine
from flowpark.engine.node.versions import log_unserved
from flowpark.errors import ErrorCode
from flowpark.flows import Catalog
from flowpark.flows.plan import Plan
from flowpark.redaction import register_secrets
from flowpark.runtime.delivery import Deliverer
from flowpark.runtime.heap import release_collector, settle_heap
from flowpark.runtime.http import outbound_client
from flowpark.runtime.jobs import NodeJobs
from flowpark.runtime.liveness import NodeBeat
from flowpark.runtime.loading import Deps, FlowSource, load_flows, register_flows
from flowpark.runtime.logs import set_node_id
from flowpark.runtime.metrics_route import add_metrics_route
from flowpark.runtime.node import node_engine
from flowpark.runtime.retention import Purger
from flowpark.runtime.scheduler import Sweeper
from flowpark.runtime.telemetry import Telemetry
from flowpark.settings import DEFAULT_API_TOKEN, SCOPES, Settings
from flowpark.store import check_schema_at_head, make_async_engine
from flowpark.store.console_sessions import SqlConsoleSessions
from flowpark.store.deliveries import SqlDeliveries
from flowpark.store.delivery_ids import SqlDeliveryIds
from flowpark.store.nodes import SqlNodes
from flowpark.store.provider_waits import SqlProviderWaits
from flowpark.store.retention import SqlRetention
from flowpark.store.schema import SqlSchema
from flowpark.ui import install_console

__all__ = ["BodyLimit", "create_app"]

log = logging.getLogger("flowpark.runtime")


class BodyLimit:
    """ASGI middleware: a request body larger than ``max_bytes`` is answered 413
    ``body_too_large`` (problem+json) before any route sees it - at once when its
    ``Content-Length`` says so, else once that many bytes were read (chunked bodies).

    A body within the bound is read whole first (at most ``max_bytes`` in memory) and handed
    on unchanged; later ``receive`` calls (a client's disconnect, which event streams wait
    for) go to the server. The refused rest of a body is discarded by the server, which
    keeps the connection, so a client still sending it reads the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: answer 413 for a body over the bound, else pass the request on."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, f"Content-Length is {declared} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(
                    scope, receive, send, f"more than {self.max_bytes} bytes were sent"
                )
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        response = problem(
            ErrorCode.BODY_TOO_LARGE,
            f"the request body is larger than {self.max_bytes} bytes "
            f"(FLOWPARK_MAX_BODY_BYTES): {why}",
            maxBodyBytes=self.max_bytes,
        )
        await response(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    """The declared ``Content-Length`` (None when absent or unreadable: the server's
    HTTP parser has refused a malformed one already)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    flows: Sequence[str | FlowSource] | None = None,
    tracer_provider: Any = None,
) -> FastAPI:
    """Build the flowpark ASGI app.

    Args:
        settings: :class:`Settings` (default: read from ``FLOWPARK_*``).
        clock: the engine clock (default the system clock).
        flows: the flows to serve: targets (module path, ``.py`` file, folder) or
            ``source(deps)`` callables (see :mod:`flowpark.runtime.loading`); default
            ``settings.flows`` (``FLOWPARK_FLOWS``, the samples unless set).
        tracer_provider: an OpenTelemetry ``TracerProvider`` (default: as the ``OTEL_*``
            environment configures, see :mod:`flowpark.runtime.tracing`; none: not traced).

    Raises:
        FlowsUnloadable: code ``flows_unloadable``: a target cannot be loaded.
        DefinitionError: code ``definition_invalid``: a flow breaks a rule.

    The app refuses to start (``SchemaBehindHead``, code ``schema_behind_head``) on a
    database whose schema is behind the migrations' head: run ``flowpark db upgrade``.
    """
    settings = settings or Settings()
    set_node_id(settings.node_id)  # every log line of this process names the node
    register_secrets(settings.secret_values())  # ... and shows none of its secrets
    wiring = _wire(settings, clock or SystemClock(), flows, tracer_provider)
    app = api_app(lifespan=_lifespan(wiring))
    app.state.settings = settings
    app.state.catalog = wiring.catalog
    app.state.flows = wiring.deps.state
    # the API accepts the tokens of the settings, plus those the flows modules added
    app.state.credentials = settings.api_credentials + tuple(wiring.deps.credentials)
    app.state.instance_credentials = tuple(wiring.deps.instance_credentials)
    app.state.telemetry = wiring.telemetry
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(InputHygiene)  # outermost: refused before any body is read
    _include_routers(app, wiring)
    _add_health_routes(app, wiring)
    wiring.telemetry.instrument_app(app)
    return app


@dataclass(frozen=True)
class _Wiring:
    """What the app and its lifespan share: built once by :func:`create_app`."""

    settings: Settings
    clock: Clock
    catalog: Catalog
    #: One pooled client for every outbound call of this app (closed by the lifespan);
    #: each call still passes its own timeout.
    http: httpx.AsyncClient
    telemetry: Telemetry
    deps: Deps


def _wire(
    settings: Settings,
    clock: Clock,
    flows: Sequence[str | FlowSource] | None,
    tracer_provider: Any,
) -> _Wiring:
    """The outbound client, the telemetry, and the catalog with the flows loaded."""
    http = outbound_client(settings.http_timeout_seconds)
    telemetry = Telemetry(settings, tracer_provider)
    telemetry.instrument_client(http)
    deps = Deps(http, settings, serving=True)
    catalog = Catalog()
    register_flows(catalog, load_flows(settings.flow_targets if flows is None else flows, deps))
    return _Wiring(settings, clock, catalog, http, telemetry, deps)


@dataclass
class _Workers:
    """The lifespan's running parts, each None until started; :meth:`stop` stops those
    started, the newest first."""

    #: the node's one scheduler: every periodic job below is a job of it
    jobs: NodeJobs = field(default_factory=NodeJobs)
    engine: Engine | None = None
    sweeper: Sweeper | None = None
    deliverer: Deliverer | None = None
    purger: Purger | None = None
    beat: NodeBeat | None = None

    async def stop(self, grace_seconds: float) -> None:
        """Stop the background jobs, then close the engine, all within ``grace_seconds``:
        the sweep claims nothing more, runs in flight may park or end until then, those
        still going are cancelled and their leases released (logged: the next sweep on any
        node continues them); the liveness row is marked stopped last."""
        deadline = time.monotonic() + grace_seconds
        if self.purger is not None:
            await self.purger.stop()
        if self.deliverer is not None:
            await self.deliverer.stop()
        if self.sweeper is not None:
            await self.sweeper.stop(grace_seconds=max(0.0, deadline - time.monotonic()))
        if self.engine is not None:
            left = await self.engine.close(max(0.0, deadline - time.monotonic()))
            if left:
                log.warning(
                    "node stopped with %d run(s) unfinished after its %.1f s grace; their "
                    "leases are released and the next sweep continues them: %s",
                    len(left),
                    grace_seconds,
                    ", ".join(left[:20]) + (" ..." if len(left) > 20 else ""),
                )
        if self.beat is not None:
            await self.beat.stop()
        self.jobs.shutdown()


def _lifespan(wiring: _Wiring) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: the database and the engine on startup, the background jobs
    the settings ask for; everything stopped and closed on shutdown."""
    settings = wiring.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        schema = settings.database_schema
        db = make_async_engine(
            settings.database_url, pool_size=settings.db_pool_size, schema=schema
        )
        workers = _Workers()
        try:
            await check_schema_at_head(db, schema)
            _warn_about_tokens(settings)
            _warn_about_signal_secrets(settings, wiring.catalog.plans())
            workers.engine = engine = _build_engine(wiring, db)
            app.state.engine = engine
            app.state.db = db
            await log_unserved(engine.store.operator, wiring.catalog, wiring.clock.now())
            wiring.telemetry.start(db, wiring.clock, workers.jobs)
            app.state.deliveries = SqlDeliveries(db)
            app.state.delivery_ids = SqlDeliveryIds(db)
            _start_jobs(wiring, workers, db, app.state.deliveries)
            app.state.sweeper = workers.sweeper
            app.state.nodes = nodes = SqlNodes(db)
            app.state.provider_waits = SqlProviderWaits(db)
            app.state.console_sessions = SqlConsoleSessions(db)
            app.state.schema = SqlSchema(db, schema)
            workers.beat = NodeBeat(
                nodes,
                wiring.clock,
                settings,
                wiring.catalog,
                "serve",
                workers.sweeper,
                jobs=workers.jobs,
            )
            await workers.beat.start()
            if settings.gc_freeze:
                settle_heap()  # what start-up made is kept: never scanned again
            else:
                release_collector()  # paused for the start-up (flowpark.runtime.heap)
            log.info(
                "flowpark node %s ready on %s (API docs at /docs%s)",
                settings.node_id,
                settings.self_url,
                ", console at /ui" if settings.console_enabled else "",
            )
            yield
        finally:
            await workers.stop(settings.shutdown_grace_seconds)
            await wiring.telemetry.stop()
            for close in reversed(wiring.deps.closers):
                await close()
            await wiring.http.aclose()
            await db.dispose()

    return lifespan


def _warn_about_tokens(settings: Settings) -> None:
    """Log a warning for the default token and for plain tokens that look like
    ``name:token:scopes`` entries."""
    if settings.tokens == {DEFAULT_API_TOKEN}:
        log.warning("FLOWPARK_API_TOKENS is the default %r: set your own tokens", DEFAULT_API_TOKEN)
    for name in settings.plain_tokens_with_colons:
        log.warning(
            "FLOWPARK_API_TOKENS entry %s is a plain token with every scope, its whole "
            "text the token: it is not name:token:scope+scope with scopes among %s",
            name,
            "+".join(SCOPES),
        )


def _warn_about_signal_secrets(settings: Settings, plans: Sequence[Plan]) -> None:
    """Log a warning for each served signal signed with a secret ``FLOWPARK_SIGNAL_SECRETS``
    does not hold (its every delivery would be refused with 401 ``signature_invalid``);
    the secret's name is logged, never a value."""
    held = settings.signal_secrets
    warned: set[tuple[str, str]] = set()
    for plan in plans:
        for signal in plan.signals.values():
            if (plan.name, signal.name) in warned:
                continue  # another version of the flow
            warned.add((plan.name, signal.name))
            if signal.verify is not None and signal.verify.secret not in held:
                log.warning(
                    "signal %s of %s is signed with the secret %r, which "
                    "FLOWPARK_SIGNAL_SECRETS does not hold: every delivery will be refused",
                    signal.name,
                    plan.name,
                    signal.verify.secret,
                )


def _build_engine(wiring: _Wiring, db: AsyncEngine) -> Engine:
    """The flowpark engine on the SQL journal, configured from the settings."""
    return node_engine(wiring.settings, db, wiring.catalog, wiring.clock, wiring.telemetry.observer)


def _start_jobs(
    wiring: _Wiring, workers: _Workers, db: AsyncEngine, deliveries: SqlDeliveries
) -> None:
    """Start the background jobs a sweeping node runs: the sweeper, the event deliverer
    (when there are subscribers) and the retention purger (when a retention is set)."""
    settings = wiring.settings
    if not settings.run_sweeper:
        return
    assert workers.engine is not None
    workers.sweeper = Sweeper(workers.engine, settings.timer_scan_interval, jobs=workers.jobs)
    workers.sweeper.start()
    if settings.subscribers:
        workers.deliverer = Deliverer(
            deliveries,
            settings.subscribers,
            wiring.http,
            wiring.clock,
            settings.node_id,
            settings,
            observer=wiring.telemetry.observer,
            jobs=workers.jobs,
        )
        workers.deliverer.start()
    if settings.retention_period is not None:
        workers.purger = Purger(
            SqlRetention(db),
            wiring.clock,
            settings.retention_period,
            batch=settings.retention_batch,
            interval_seconds=settings.retention_scan_seconds,
            jobs=workers.jobs,
        )
        workers.purger.start()


def _include_routers(app: FastAPI, wiring: _Wiring) -> None:
    """The API's routers, the flows' trigger routes, the console (unless disabled) and
    the routers the flows modules mounted (e.g. the samples' fake providers)."""
    include_api_routes(app, wiring.catalog.plans())
    if wiring.settings.console_enabled:
        install_console(app)
    for router, _tags in wiring.deps.routers:  # not the API's: kept out of its schema
        app.include_router(router, include_in_schema=False)


def _add_health_routes(app: FastAPI, wiring: _Wiring) -> None:
    """``/healthz`` (GET and HEAD) and ``/readyz``, then the metrics route."""
    include_health_routes(app)
    add_metrics_route(app, wiring.settings, wiring.telemetry)
