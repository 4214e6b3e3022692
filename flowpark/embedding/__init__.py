"""flowpark inside your own FastAPI application: one process, your routes and flowpark's,
your lifespan wrapped (never replaced), an in-process client, and a start inside your own
transaction.

Example::

    from contextlib import asynccontextmanager
    from typing import Annotated

    from fastapi import Depends, FastAPI
    from flowpark.embedding import Flowpark, LocalClient

    fp = Flowpark(flows=["shop.flows"])

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.greeting = "hello"  # the host's own state, as before
        yield

    app = FastAPI(lifespan=lifespan)
    fp.include_in(app, prefix="/flowpark")  # routes, OpenAPI, and the lifespan wrapped

    @app.post("/orders")
    async def order(client: Annotated[LocalClient, Depends(fp.get_client)]) -> dict:
        started = await client.start("payment.await", {"orderId": "o-1"}, idempotency_key="o-1")
        return {"instance": started.instance_id}

What :meth:`Flowpark.include_in` does to the host: flowpark's application (its API, the
flows' trigger and signal routes, and the console if asked) is mounted at the prefix, so
its middleware, exception handlers (problem+json) and state apply to its own routes only;
the host's ``/openapi.json`` and ``/docs`` list flowpark's operations under the prefix
with tags ``flowpark: <resource>``; and the host's lifespan is wrapped: the host's startup
runs first and its state is its own, flowpark's store, sweep, deliveries and liveness start
after it and stop before it. Shutdown lets runs in flight finish within
``FLOWPARK_SHUTDOWN_GRACE_SECONDS`` (default 8 s), releases the leases of those still going
and logs them (the next sweep continues them).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from enum import StrEnum
from typing import Any

from fastapi import FastAPI

from flowpark.embedding.client import LocalClient, Transaction, client_error
from flowpark.embedding.openapi import merge_openapi
from flowpark.engine.clock import Clock
from flowpark.engine.node.engine import Engine
from flowpark.engine.records import NewInstance
from flowpark.errors import EmbeddingInvalid, NotReady
from flowpark.runtime.app import create_app
from flowpark.runtime.loading import FlowSource
from flowpark.settings import Settings
from flowpark.store.db import schema_translate_map

__all__ = ["Flowpark", "LocalClient", "Role", "Transaction", "client_error"]

log = logging.getLogger("flowpark.embedding")

Lifespan = Callable[[Any], AbstractAsyncContextManager[Any]]

#: A prefix: one or more ``/segment``, none holding a query, a fragment, a percent-escape,
#: white space or a control character (a request's path could never reach it).
_PREFIX = re.compile(r"(?:/[^/?#%\s\x00-\x1f\x7f]+)+")


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


class Role(StrEnum):
    """What an embedded flowpark does in this process.

    Attributes:
        API: starts, signals, reads and operator actions (routes and the in-process client);
            no sweep: parked instances are woken by another process's.
        WORKER: the sweep, event deliveries and retention; no routes (the in-process client
            still works).
        BOTH: both (the default).
    """

    API = "api"
    WORKER = "worker"
    BOTH = "both"


class Flowpark:
    """flowpark embedded in a host application (see the module).

    Including it in the host (or first using :attr:`app`) loads the flows: a definition
    error raises then, before the host serves anything; nothing connects to the database
    until the host's lifespan starts it.

    Args:
        settings: :class:`~flowpark.settings.Settings` (default: read from ``FLOWPARK_*``).
            ``database_url`` is flowpark's database, which may be the host's own: then a
            start can be written in the host's transaction (:meth:`LocalClient.start`).
        flows: the flows to serve: module paths, ``.py`` files, folders, or
            ``source(deps)`` callables (default ``settings.flows``).
        role: :class:`Role` or its value (default ``both``).
        clock: the engine clock (default the system clock; tests pass a virtual one).
        tracer_provider: an OpenTelemetry ``TracerProvider`` (default: as ``OTEL_*`` say).

    Raises:
        FlowsUnloadable: code ``flows_unloadable``: a flows target cannot be loaded.
        DefinitionError: code ``definition_invalid``: a flow breaks a rule.
        ValueError: ``role`` is not one of ``api``, ``worker``, ``both``.

    Attributes:
        settings: the settings in force.
        role: the role.
        prefix: the path flowpark is included under ("" until :meth:`include_in`).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        flows: Sequence[str | FlowSource] | None = None,
        role: Role | str = Role.BOTH,
        clock: Clock | None = None,
        tracer_provider: Any = None,
    ) -> None:
        self.role = Role(role)
        self.settings = settings or Settings()
        self.prefix = ""
        self._flows = flows
        self._clock = clock
        self._tracer_provider = tracer_provider
        self._app: FastAPI | None = None
        self._host: FastAPI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._tasks: set[asyncio.Task[Any]] = set()
        self._console = False
        self.client = LocalClient(self)

    @property
    def app(self) -> FastAPI:
        """flowpark's own ASGI application (what :meth:`include_in` mounts), built on first
        use: the flows are loaded and checked then.

        Raises:
            FlowsUnloadable, DefinitionError: as the class says.
        """
        if self._app is None:
            settings = self.settings.model_copy(
                update={"run_sweeper": self.role is not Role.API, "console_enabled": self._console}
            )
            self._app = create_app(
                settings,
                clock=self._clock,
                flows=self._flows,
                tracer_provider=self._tracer_provider,
            )
        return self._app

    @property
    def schema_map(self) -> dict[str | None, str] | None:
        """``{None: schema}`` when flowpark's tables live in a PostgreSQL schema of their
        own (``FLOWPARK_DATABASE_SCHEMA``), else None: the statements flowpark runs on a
        caller's connection name that schema, leaving the connection's own untouched."""
        return schema_translate_map(self.settings.database_schema)

    # -- joining the host --------------------------------------------------------------
    def include_in(self, app: FastAPI, *, prefix: str = "/flowpark", console: bool = False) -> None:
        """Join the host application ``app``: mount flowpark's routes at ``prefix`` (none
        for the ``worker`` role), list them in the host's OpenAPI document, and wrap the
        host's lifespan with flowpark's.

        Args:
            app: the host's FastAPI application (its routes, middleware, exception handlers
                and lifespan stay as they are).
            prefix: the path flowpark's routes are served under: it starts with ``/``,
                does not end with one, and no route of the host is at it or under it
                (default ``/flowpark``: the API at ``/flowpark/api/v1/...``). A host
                route added under it later stops the startup (``embedding_invalid``).
            console: also serve the web console at ``{prefix}/ui``.

        Raises:
            EmbeddingInvalid: code ``embedding_invalid``: this flowpark was included
                already (in this or another application), ``prefix`` is not a path, or
                the host serves a route at or under it.
        """
        if self._host is not None:
            raise EmbeddingInvalid(
                "this Flowpark is included in an application already: include it once, "
                "in one application (several apps: one Flowpark each)",
            )
        segments = prefix.split("/")
        if not _PREFIX.fullmatch(prefix) or "." in segments or ".." in segments:
            raise EmbeddingInvalid(
                f"prefix {prefix!r} is not a path such as /flowpark (a leading /, no trailing "
                "/, no '.' or '..' segment, no ?, #, %, white space or control character)",
                prefix=prefix,
            )
        paths = [str(getattr(r, "path", "")) for r in app.router.routes]
        taken = [path for path in paths if _under(path, prefix)]
        if taken:
            raise EmbeddingInvalid(
                f"the host already serves {taken[0]} under {prefix}: choose another prefix",
                prefix=prefix,
            )
        self._host = app
        self.prefix = prefix if self.role is not Role.WORKER else ""
        if console != self._console:
            self._console, self._app = console, None  # built again, with the console
        if self.role is not Role.WORKER:
            app.mount(prefix, self.app, name="flowpark")
            self._merge_openapi(app, prefix)
        app.router.lifespan_context = self.lifespan(app.router.lifespan_context)

    def _merge_openapi(self, app: FastAPI, prefix: str) -> None:
        host_openapi = app.openapi
        ours = self.app

        def openapi() -> dict[str, Any]:
            if app.openapi_schema:
                return app.openapi_schema
            schema = merge_openapi(host_openapi(), ours.openapi(), prefix)
            app.openapi_schema = schema
            return schema

        app.openapi = openapi  # type: ignore[method-assign]

    def lifespan(self, host: Lifespan | None = None) -> Lifespan:
        """A lifespan that wraps ``host``'s: the host's startup runs first (its yielded
        state is the host's, passed on unchanged), then flowpark's; on shutdown flowpark
        stops first, within its grace, then the host's.

        Use it when building the app yourself (``FastAPI(lifespan=fp.lifespan(mine))``)
        instead of :meth:`include_in`'s wrapping.

        Args:
            host: the host's own lifespan (a callable taking the app and returning an async
                context manager), or None.

        Returns:
            The wrapping lifespan.
        """

        @asynccontextmanager
        async def wrapped(app: Any) -> AsyncIterator[Any]:
            self._check_shadowed(app)
            if host is None:
                async with self.running():
                    yield None
                return
            async with host(app) as state, self.running():
                yield state

        return wrapped

    def _check_shadowed(self, app: Any) -> None:
        """Refuse a host route added after :meth:`include_in` under its prefix: flowpark's
        mount, before it, would answer its every request with a 404.

        Raises:
            EmbeddingInvalid: code ``embedding_invalid``, naming the route.
        """
        routes = list(getattr(getattr(app, "router", None), "routes", []))
        mounts = [i for i, r in enumerate(routes) if getattr(r, "app", None) is self._app]
        if not mounts or not self.prefix:
            return
        after = routes[mounts[0] + 1 :]
        hidden = [str(r.path) for r in after if _under(getattr(r, "path", ""), self.prefix)]
        if hidden:
            raise EmbeddingInvalid(
                f"the host's route {hidden[0]} is under flowpark's prefix {self.prefix}, "
                "which answers every path under it: move the route, or include flowpark "
                "under another prefix",
                prefix=self.prefix,
            )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Flowpark]:
        """Run flowpark (store, engine, and by role the sweep, deliveries, retention and
        liveness) for the block: what the wrapped lifespan does, for a script or a test.

        Raises:
            SchemaBehindHead: code ``schema_behind_head``: run ``flowpark db upgrade``.
            EmbeddingInvalid: already running.
        """
        if self._running:
            raise EmbeddingInvalid("this Flowpark is running already")
        self._running = True
        try:
            try:
                async with self.app.router.lifespan_context(self.app):
                    self._loop = asyncio.get_running_loop()
                    try:
                        yield self
                    finally:
                        self._loop = None  # no after-commit run begins from now on
            finally:
                await self._settle()
        finally:
            self._running = False

    async def _settle(self) -> None:
        """End the after-commit runs begun here, once the lifespan has stopped the engine:
        its shutdown gave their runs the grace, then cut off and released those still
        going, so what is left of them is cancelled (a claim not yet run keeps its lease
        until it expires: the next sweep continues it)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- the engine and the client -----------------------------------------------------
    def engine(self) -> Engine:
        """The running engine.

        Raises:
            NotReady: code ``not_ready``: flowpark has not started (the host's lifespan has
                not run, or has ended).
        """
        engine = getattr(self.app.state, "engine", None) if self._loop is not None else None
        if engine is None:
            raise NotReady(
                "flowpark has not started: its lifespan runs inside the host's (include_in "
                "or lifespan()); call the client from a route or after startup",
            )
        assert isinstance(engine, Engine)
        return engine

    def get_client(self) -> LocalClient:
        """FastAPI dependency: the in-process client
        (``client: Annotated[LocalClient, Depends(fp.get_client)]``)."""
        return self.client

    def run_soon(self, new: NewInstance) -> None:
        """Run an instance started in a caller's transaction once it committed: claim it
        and advance it on this node (from any thread; a no-op when flowpark is not running:
        the sweep runs it then)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._spawn, new)

    def _spawn(self, new: NewInstance) -> None:
        if self._loop is None:
            return
        task = asyncio.ensure_future(self._run_committed(new))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_committed(self, new: NewInstance) -> None:
        try:
            await self.engine().run_committed(new)
        except Exception:  # the sweep runs it: it is durable and its lease expired
            log.exception("instance %s started in a transaction did not run now", new.id)
