"""OpenTelemetry traces (the optional extra ``flowpark[otel]``).

Off unless the standard ``OTEL_*`` environment variables ask for it:
``OTEL_TRACES_EXPORTER`` (``otlp`` or ``console``; ``none`` turns tracing off) or an OTLP
endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless
``OTEL_SDK_DISABLED=true``. The OTLP exporter reads its own ``OTEL_EXPORTER_OTLP_*``
settings; the resource reads ``OTEL_SERVICE_NAME`` (default ``flowpark``) and
``OTEL_RESOURCE_ATTRIBUTES``.

Spans: ``flowpark.start`` (a start: create and first advance), ``flowpark.run`` (one run of
an instance, claim to park or end) and ``capability <id>`` (one try), with the instance id,
flow, step, scope and try as attributes; HTTP server spans for requests (FastAPI
instrumentation) and client spans for outbound calls, which carry ``traceparent`` to the
provider (httpx instrumentation). The start's trace context is stored with the instance,
so every later run, on any node and hours later, is a child of the start in the same
trace, and links to it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = ["Tracing", "available", "provider_from_env", "wanted"]


def available() -> bool:
    """Whether the OpenTelemetry SDK and instrumentations are installed."""
    try:
        import opentelemetry.instrumentation.fastapi  # noqa: F401
        import opentelemetry.instrumentation.httpx  # noqa: F401
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


def wanted() -> bool:
    """Whether the ``OTEL_*`` environment asks for traces (see the module docstring)."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def provider_from_env(node_id: str) -> Any:
    """A ``TracerProvider`` exporting as the ``OTEL_*`` environment says, or None when
    tracing is not wanted or the ``otel`` extra is not installed.

    Raises:
        ValueError: ``OTEL_TRACES_EXPORTER`` names an exporter other than ``otlp`` or
            ``console``.
    """
    if not wanted() or not available():
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp"
    exporter: Any
    if exporter_name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    elif exporter_name == "console":
        exporter = ConsoleSpanExporter()
    else:
        raise ValueError(f"OTEL_TRACES_EXPORTER={exporter_name!r}: use otlp, console or none")
    attributes = {"service.instance.id": node_id}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "flowpark"
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


class Tracing:
    """The spans of one node, made with ``provider`` (an OpenTelemetry ``TracerProvider``).

    Args:
        provider: the tracer provider (:func:`provider_from_env`, or a test's).
        node_id: this node's name (attribute ``flowpark.node``).
    """

    def __init__(self, provider: Any, node_id: str) -> None:
        from opentelemetry import propagate, trace

        self.provider = provider
        self.node_id = node_id
        self.tracer = provider.get_tracer("flowpark")
        self._propagate = propagate
        self._trace = trace

    def instrument_client(self, client: Any) -> None:
        """Trace the outbound calls of an ``httpx.AsyncClient``: each gets a client span
        and carries ``traceparent`` (W3C trace context) to the provider."""
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor.instrument_client(client, tracer_provider=self.provider)

    def instrument_app(self, app: Any) -> None:
        """Trace the requests a FastAPI app serves (health and metrics routes excluded)."""
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, tracer_provider=self.provider, excluded_urls="healthz,readyz,metrics"
        )

    def context(self) -> dict[str, str] | None:
        """The current trace context as W3C headers, or None outside any span."""
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier)
        return carrier or None

    def started(self, instance_id: str) -> None:
        """Name the instance a start created on the start's span."""
        self._trace.get_current_span().set_attribute("flowpark.instance_id", instance_id)

    @contextmanager
    def start_span(self, flow: str, version: str) -> Iterator[Any]:
        """The span of one start."""
        with self.tracer.start_as_current_span(
            "flowpark.start",
            attributes={
                "flowpark.flow": flow,
                "flowpark.flow_version": version,
                "flowpark.node": self.node_id,
            },
        ) as span:
            yield span

    @contextmanager
    def run_span(
        self, instance_id: str, flow: str, version: str, trace_context: Mapping[str, str] | None
    ) -> Iterator[Any]:
        """The span of one run: a child of the instance's start (its stored context), with
        a link to it."""
        parent = None
        links = []
        if trace_context:
            parent = self._propagate.extract(dict(trace_context))
            started = self._trace.get_current_span(parent).get_span_context()
            if started.is_valid:
                links.append(self._trace.Link(started, {"flowpark.link": "start"}))
        with self.tracer.start_as_current_span(
            "flowpark.run",
            context=parent,
            links=links,
            attributes={
                "flowpark.instance_id": instance_id,
                "flowpark.flow": flow,
                "flowpark.flow_version": version,
                "flowpark.node": self.node_id,
            },
        ) as span:
            yield span

    @contextmanager
    def call_span(
        self, instance_id: str, flow: str, capability: str, step: int, scope: int, try_number: int
    ) -> Iterator[Any]:
        """The span of one capability try."""
        with self.tracer.start_as_current_span(
            f"capability {capability}",
            attributes={
                "flowpark.instance_id": instance_id,
                "flowpark.flow": flow,
                "flowpark.capability": capability,
                "flowpark.step": step,
                "flowpark.scope": scope,
                "flowpark.try": try_number,
            },
        ) as span:
            yield span
