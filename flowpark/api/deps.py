"""The API's FastAPI dependencies, as ``Annotated`` types a route declares by name.

A route asks for what it uses and gets it typed, never by reading ``request.app.state``
itself::

    @router.post("/instances/{instance_id}/wake")
    async def wake_instance(token: OperateToken, engine: EngineDep, ...) -> WakeAnswer: ...

* the acting token: :data:`ReadToken`, :data:`StartToken`, :data:`SignalToken`,
  :data:`OperateToken` (the :class:`~flowpark.api.auth.Principal` of a bearer token that holds
  that scope: 401 ``unauthorized`` without an accepted token, 403 ``forbidden`` without
  the scope), :data:`AnyToken` (any accepted token, whatever its scopes);
* the node's parts, wired by :func:`flowpark.runtime.app.create_app` on ``app.state``:
  :data:`EngineDep` (the flowpark engine), :data:`CatalogDep` (its flow versions),
  :data:`OperatorReadsDep` (the operator's read model and action history),
  :data:`DeliveriesDep` (event deliveries), :data:`DeliveryIdsDep` (signed delivery ids),
  :data:`NodesDep` (the nodes' liveness rows), :data:`SettingsDep`, and
  :data:`NodePartsDep` (what the lifespan has built so far, for readiness).

The plain functions (:func:`engine_of`, :func:`nodes_of`, :func:`settings_of`) give the
same objects to code that holds a request but is no route (the console's helpers).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Protocol, cast

from fastapi import Depends, Request

from flowpark.api.auth import Principal, require_scope, require_token
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.nodes import Nodes, Schema
from flowpark.engine.ports.operator import OperatorReads
from flowpark.engine.ports.outbox import Deliveries
from flowpark.flows.catalog import Catalog
from flowpark.settings import Settings

__all__ = [
    "AnyToken",
    "CatalogDep",
    "DeliveriesDep",
    "DeliveryIds",
    "DeliveryIdsDep",
    "EngineDep",
    "NodeParts",
    "NodePartsDep",
    "NodesDep",
    "OperateToken",
    "OperatorReadsDep",
    "ReadToken",
    "SettingsDep",
    "SignalToken",
    "StartToken",
    "Sweeping",
    "engine_of",
    "nodes_of",
    "settings_of",
]


class DeliveryIds(Protocol):
    """Which instance a signed delivery id reached first (``flowpark.store.delivery_ids``)."""

    async def claim(
        self, flow: str, signal: str, delivery_id: str, instance_id: str, now: datetime
    ) -> str | None:
        """Record ``instance_id`` as the first owner of the id unless one is; returns the
        owner recorded first (None when this call recorded it)."""
        ...

    async def owner(self, flow: str, signal: str, delivery_id: str) -> str | None:
        """The instance the id reached first, or None when it reached none."""
        ...


class Sweeping(Protocol):
    """The node's sweep job, as readiness sees it."""

    @property
    def last_success(self) -> float | None:
        """``time.monotonic()`` when a sweep last ended without error (None: none yet)."""
        ...


@dataclass(frozen=True)
class NodeParts:
    """The node's parts as far as the lifespan has built them (each None until then, and
    ``sweeper`` on a node that does not sweep): what ``/readyz`` checks."""

    schema: Schema | None
    engine: Engine | None
    nodes: Nodes | None
    sweeper: Sweeping | None


def engine_of(request: Request) -> Engine:
    """The node's flowpark engine (set by the app's lifespan).

    Args:
        request: any request to the app.

    Returns:
        The :class:`~flowpark.engine.node.engine.Engine` the lifespan built.
    """
    return cast(Engine, request.app.state.engine)


def settings_of(request: Request) -> Settings:
    """The node's :class:`~flowpark.settings.Settings` (given to ``create_app``)."""
    return cast(Settings, request.app.state.settings)


def nodes_of(request: Request) -> Nodes:
    """The nodes' liveness rows (set by the app's lifespan)."""
    return cast(Nodes, request.app.state.nodes)


async def _engine(request: Request) -> Engine:
    return engine_of(request)


async def _catalog(request: Request) -> Catalog:
    return engine_of(request).catalog


async def _settings(request: Request) -> Settings:
    return settings_of(request)


async def _operator_reads(request: Request) -> OperatorReads:
    return engine_of(request).store.operator


async def _deliveries(request: Request) -> Deliveries:
    return cast(Deliveries, request.app.state.deliveries)


async def _delivery_ids(request: Request) -> DeliveryIds:
    return cast(DeliveryIds, request.app.state.delivery_ids)


async def _nodes(request: Request) -> Nodes:
    return nodes_of(request)


async def _node_parts(request: Request) -> NodeParts:
    state = request.app.state
    return NodeParts(
        schema=getattr(state, "schema", None),
        engine=getattr(state, "engine", None),
        nodes=getattr(state, "nodes", None),
        sweeper=getattr(state, "sweeper", None),
    )


#: The node's flowpark engine.
EngineDep = Annotated[Engine, Depends(_engine)]
#: The flow versions this node serves (the engine's catalog).
CatalogDep = Annotated[Catalog, Depends(_catalog)]
#: The node's settings.
SettingsDep = Annotated[Settings, Depends(_settings)]
#: The operator's read model and action history (``engine.store.operator``).
OperatorReadsDep = Annotated[OperatorReads, Depends(_operator_reads)]
#: Event deliveries to subscribers.
DeliveriesDep = Annotated[Deliveries, Depends(_deliveries)]
#: The first instance each signed delivery id reached.
DeliveryIdsDep = Annotated[DeliveryIds, Depends(_delivery_ids)]
#: The nodes' liveness rows.
NodesDep = Annotated[Nodes, Depends(_nodes)]
#: The node's parts built so far (readiness).
NodePartsDep = Annotated[NodeParts, Depends(_node_parts)]

#: A token with the ``read`` scope.
ReadToken = Annotated[Principal, Depends(require_scope("read"))]
#: A token with the ``start`` scope.
StartToken = Annotated[Principal, Depends(require_scope("start"))]
#: A token with the ``signal`` scope.
SignalToken = Annotated[Principal, Depends(require_scope("signal"))]
#: A token with the ``operate`` scope.
OperateToken = Annotated[Principal, Depends(require_scope("operate"))]
#: Any accepted token (its name), whatever its scopes.
AnyToken = Annotated[str, Depends(require_token)]
