"""The API's routes, assembled: one router per resource, included in the order the
routes must be matched (``/instances/actions`` and ``/instances/counts`` before
``/instances/{instance_id}``).

Routes are thin: they authenticate (a token dependency of :mod:`flowpark.api.deps`), parse,
call the engine or the store's read side, and return their answer model
(:mod:`flowpark.api.models`), which is the route's OpenAPI response schema too. Every error
leaves as problem+json (see :mod:`flowpark.api.problems`).

Bodies (start and signal routes, and the routes whose body is a model, such as bulk
actions and budget extensions, by the same check through ``JsonBodyRoute``) are JSON: a
non-empty body must be sent as ``application/json`` or ``application/*+json`` (any
parameters, e.g. ``charset``, are ignored: JSON is UTF-8), else 415
``unsupported_media_type``; a body sent without any ``Content-Type`` is read as JSON too. A
body larger than ``max_body_bytes`` is 413 ``body_too_large`` (``flowpark.runtime.app``). A body
that is not UTF-8 JSON, repeats a key in one object, nests deeper than ``MAX_DEPTH`` or
holds a string (or key) with U+0000 or a lone surrogate - which no store can keep - is 422
``input_invalid``.

Instance ids are canonical UUID strings (lowercase, dashed). An id in a path that cannot
name an instance is answered as an unknown id, 404 ``instance_not_found``, on both stores:
one longer than ``MAX_INSTANCE_ID`` or holding a control character or a surrogate without a
look-up, any other spelling that is not a canonical UUID (upper case, no dashes, braces, a
word) by the store, which refuses it as ``InstanceNotFound`` before any look-up.
"""

from __future__ import annotations

from fastapi import FastAPI

from flowpark.api.correlated import build_provider_signals_router
from flowpark.api.deliveries import build_delivery_router
from flowpark.api.events import build_events_router
from flowpark.api.flows import build_flows_router
from flowpark.api.health import build_health_router
from flowpark.api.instances import build_instances_router
from flowpark.api.nodes import build_nodes_router
from flowpark.api.operate import build_operator_router
from flowpark.api.providers import build_providers_router
from flowpark.api.reviews import build_reviews_router
from flowpark.api.signals import build_signals_router
from flowpark.api.starts import build_trigger_router
from flowpark.api.streams import build_streams_router
from flowpark.flows.plan import Plan

__all__ = ["include_api_routes", "include_health_routes"]


def include_api_routes(app: FastAPI, plans: list[Plan]) -> None:
    """Include the ``/api/v1`` routes: operator actions, instances, flows, signals,
    events and reviews, deliveries, streams, nodes, providers, then the start and signal
    routes of ``plans`` (the flows with an HTTP trigger) and their provider signal routes.

    Args:
        app: the application.
        plans: the flow versions the node serves.
    """
    # the operator's /instances/actions before /instances/{instance_id}: a request to it
    # with another method is answered from its own route (405, Allow: POST)
    app.include_router(build_operator_router())
    app.include_router(build_instances_router())
    app.include_router(build_flows_router())
    app.include_router(build_signals_router())
    app.include_router(build_events_router())
    app.include_router(build_reviews_router())
    app.include_router(build_delivery_router())
    app.include_router(build_streams_router())
    app.include_router(build_nodes_router())
    app.include_router(build_providers_router())
    app.include_router(build_trigger_router(plans))
    app.include_router(build_provider_signals_router(plans))


def include_health_routes(app: FastAPI) -> None:
    """Include ``/healthz`` and ``/readyz`` (no token)."""
    app.include_router(build_health_router())
