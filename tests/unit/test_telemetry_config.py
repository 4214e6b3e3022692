"""Tracing is configured by the standard OTEL_* variables only; JSON log lines carry the
engine's log context and the current trace id."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry.sdk.trace import TracerProvider

from flowpark.engine.observe import LOG_CONTEXT
from flowpark.runtime import tracing
from flowpark.runtime.logs import ContextFilter, RedactingJsonFormatter, log_config

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
)


@pytest.fixture(autouse=True)
def _no_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)


def test_tracing_is_off_without_otel_variables() -> None:
    assert tracing.available()
    assert not tracing.wanted()
    assert tracing.provider_from_env("node-a") is None


@pytest.mark.parametrize(
    ("variables", "wanted"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
    ],
)
def test_otel_variables_turn_tracing_on_or_off(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], wanted: bool
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert tracing.wanted() is wanted
    provider = tracing.provider_from_env("node-a")
    assert (provider is not None) is wanted
    if provider is not None:
        attributes = provider.resource.attributes
        assert attributes["service.name"] == "flowpark"
        assert attributes["service.instance.id"] == "node-a"
        provider.shutdown()


def test_service_name_comes_from_otel_service_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-flows")
    provider = tracing.provider_from_env("node-a")
    assert provider is not None
    assert provider.resource.attributes["service.name"] == "billing-flows"
    provider.shutdown()


def test_an_unknown_exporter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
    with pytest.raises(ValueError, match="carrier-pigeon"):
        tracing.provider_from_env("node-a")


def test_a_json_line_carries_the_log_context_and_trace_id() -> None:
    config = log_config("info", "json")
    assert config["formatters"]["node"]["()"] is RedactingJsonFormatter
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(ContextFilter())
    options = {k: v for k, v in config["formatters"]["node"].items() if k != "()"}
    handler.setFormatter(RedactingJsonFormatter(**options))
    logger = logging.getLogger("flowpark.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    provider = TracerProvider()
    try:
        token = LOG_CONTEXT.set({"instance_id": "i-1", "flow": "f", "step": 2, "scope": 3})
        with provider.get_tracer("t").start_as_current_span("s") as span:
            logger.warning("parked %s", "i-1")
            trace_id = format(span.get_span_context().trace_id, "032x")
        LOG_CONTEXT.reset(token)
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["message"] == "parked i-1"
    assert inside["level"] == "WARNING" and inside["logger"] == "flowpark.test.json"
    assert (inside["instance_id"], inside["flow"], inside["step"], inside["scope"]) == (
        "i-1",
        "f",
        2,
        3,
    )
    assert inside["trace_id"] == trace_id
    assert "timestamp" in inside and "node" in inside
    assert not {"instance_id", "trace_id", "step"} & set(outside)


def test_text_stays_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLOWPARK_LOG_FORMAT", raising=False)
    assert "format" in log_config("info")["formatters"]["node"]
    with pytest.raises(ValueError, match="text or json"):
        log_config("info", "xml")
