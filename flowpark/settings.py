"""flowpark's settings, read from ``FLOWPARK_*`` environment variables (pydantic-settings).

``create_app(settings)`` takes a :class:`Settings` object; nothing reads the environment at
import time.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cached_property
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from flowpark.flows.durations import to_timedelta
from flowpark.flows.providers import check_limit

__all__ = [
    "DEFAULT_API_TOKEN",
    "OTHER_NAMES",
    "SCOPES",
    "ApiToken",
    "Settings",
    "Subscriber",
    "check_provider_limits",
    "overdue_before",
    "parse_api_tokens",
    "unknown_names",
]

DEFAULT_API_TOKEN = "dev-token"

#: The scopes a token may hold: read (lists, views, streams), start (start routes), signal
#: (signal routes), operate (wake, extend budget, cancel, bulk actions).
SCOPES: tuple[str, ...] = ("operate", "read", "signal", "start")


@dataclass(frozen=True)
class ApiToken:
    """One accepted bearer token.

    Attributes:
        name: what the node calls it in logs and the instance history (never the value).
        value: the secret itself.
        scopes: what it may do (a subset of :data:`SCOPES`).
    """

    name: str
    value: str = field(repr=False)
    scopes: frozenset[str]


_SCOPE_LIST = re.compile(r"[a-z]+(?:\+[a-z]+)*")


def parse_api_tokens(spec: str) -> list[ApiToken]:
    """Parse ``FLOWPARK_API_TOKENS``: comma-separated entries, each either
    ``name:token:scope+scope`` (a named token with those scopes) or a plain ``token``
    (every scope; named ``token-N`` after its 1-based position). An entry of three parts
    whose last is a ``+``-joined list of lower-case words naming a scope that does not
    exist (``ops:secret:read+operat``) is refused: read as a plain token it would hold
    every scope the entry meant to withhold. Any other entry with colons is a plain token
    (colons and all).

    Raises:
        ValueError: two entries share a name, or an entry names an unknown scope (the
            message names the entry and the scope, never a value).
    """
    tokens: list[ApiToken] = []
    for position, raw in enumerate(spec.split(","), start=1):
        entry = raw.strip()
        if not entry:
            continue
        name, value, scopes = f"token-{position}", entry, frozenset(SCOPES)
        parts = entry.split(":")
        if len(parts) == 3 and parts[0] and parts[1]:
            wanted = frozenset(parts[2].split("+"))
            if wanted and wanted <= frozenset(SCOPES):
                name, value, scopes = parts[0], parts[1], wanted
            elif _SCOPE_LIST.fullmatch(parts[2]):
                unknown = "+".join(sorted(wanted - frozenset(SCOPES)))
                raise ValueError(
                    f"FLOWPARK_API_TOKENS entry {parts[0]!r} names an unknown scope "
                    f"{unknown!r} (scopes: {'+'.join(SCOPES)})"
                )
        if any(t.name == name for t in tokens):
            raise ValueError(f"FLOWPARK_API_TOKENS names two tokens {name!r}")
        tokens.append(ApiToken(name, value, scopes))
    return tokens


#: The keys an entry of ``FLOWPARK_PROVIDER_LIMITS`` may name.
PROVIDER_LIMIT_KEYS = ("rate_per_second", "burst", "max_in_flight", "floor_ratio")


def check_provider_limits(limits: Mapping[str, Mapping[str, float | None]]) -> None:
    """Refuse a ``FLOWPARK_PROVIDER_LIMITS`` entry out of range, as a declaration is
    refused (:func:`flowpark.flows.providers.check_limit`): a rate from 0.001 to 1,000,000
    calls per second, a burst and a cap that are whole numbers from 1, a floor ratio in
    (0, 1], and no other key.

    Raises:
        ValueError: names the provider, the key and the range.
    """
    for name, entry in limits.items():
        unknown = sorted(set(entry) - set(PROVIDER_LIMIT_KEYS))
        if unknown:
            raise ValueError(
                f"provider {name!r}: unknown key(s) {', '.join(unknown)} (the keys are "
                f"{', '.join(PROVIDER_LIMIT_KEYS)})"
            )
        whole: dict[str, int | None] = {}
        for key in ("burst", "max_in_flight"):
            value = entry.get(key)
            if value is not None and not float(value).is_integer():
                raise ValueError(f"provider {name!r}: {key} must be a whole number")
            whole[key] = None if value is None else int(value)
        rate = entry.get("rate_per_second", 1.0)
        if rate is None:
            raise ValueError(f"provider {name!r}: rate_per_second must be a number")
        floor = entry.get("floor_ratio")
        check_limit(name, float(rate), whole["burst"], whole["max_in_flight"], floor)


def _default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class Subscriber(BaseModel):
    """An event subscriber (``FLOWPARK_SUBSCRIBERS`` holds a JSON list of them).

    Attributes:
        name: a stable name (deliveries are kept per name: renaming one starts afresh).
        url: where each event is POSTed.
        secret: the Standard Webhooks signing secret (``whsec_`` and base64), shared with
            the subscriber, which verifies each delivery's ``webhook-signature`` with it.
    """

    name: str = Field(min_length=1, max_length=200)
    url: str = Field(min_length=1)
    secret: SecretStr


class Settings(BaseSettings):
    """Every setting, with its environment variable ``FLOWPARK_<NAME>``.

    Durations are seconds (floats) and named ``*_seconds`` or ``*_interval``.
    """

    model_config = SettingsConfigDict(env_prefix="FLOWPARK_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///flowpark.db",
        description="SQLAlchemy-style URL: sqlite:///file.db or postgresql://user@host/db; "
        "several PostgreSQL hosts as libpq takes them (postgresql://user@h1:5432,h2:5432/db) "
        "reach whichever is the primary (target_session_attrs=read-write is added).",
    )
    database_schema: str | None = Field(
        default=None,
        description="PostgreSQL only: the schema that holds every flowpark table (and "
        "flowpark's version table, flow_alembic_version), created by `flowpark db upgrade` "
        "when missing; a plain SQL identifier (lowercase letters, digits, _; at most 63 "
        "characters). Unset: the connection's default schema (public). Refused on SQLite.",
    )
    api_tokens: str = Field(
        default=DEFAULT_API_TOKEN,
        description="Comma-separated bearer tokens accepted on /api routes: "
        "'name:token:scope+scope' (scopes read, start, signal, operate) or a plain 'token' "
        "(every scope). The default 'dev-token' is for local trials only: set your own in "
        "any shared deployment.",
    )
    timer_scan_interval: float = Field(
        default=10.0, gt=0, description="Seconds between sweeps (jittered by up to 10%)."
    )
    public_base_url: str | None = Field(
        default=None, description="This server's base URL for webhooks; default: self_url."
    )
    self_url: str = Field(
        default="http://127.0.0.1:8000", description="How this node reaches itself over HTTP."
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Lease duration: how long a node holds a claimed instance without "
        "renewing it; renewed every third of it while a capability runs. A dead node's "
        "instances are taken over within lease + scan interval. Node clocks may differ by "
        "less than two thirds of it (20 s at the default) without a live lease being taken.",
    )
    sweep_batch: int = Field(
        default=100,
        ge=1,
        description="Most instances one claim statement takes (never more than free slots).",
    )
    concurrency: int = Field(
        default=32,
        ge=1,
        description="Instances a node advances at once; a sweep claims no more than the free "
        "slots (back-pressure).",
    )
    db_pool_size: int = Field(
        default=20,
        ge=1,
        description="Database connections per node, each kept open once opened (no overflow).",
    )
    node_id: str = Field(
        default_factory=_default_node_id,
        description="This node's name (lease owner, in every log line).",
    )
    start_wait_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How long a start request waits for the new instance to park or end; "
        "past it the answer is 202 with status running (the instance row is durable) and "
        "the run goes on on the node.",
    )
    run_sweeper: bool = Field(default=True, description="Run the sweep job in this process.")
    shutdown_grace_seconds: float = Field(
        default=8.0,
        gt=0,
        le=300,
        description="How long a stopping node lets its runs in flight finish (seconds, default "
        "8: within a platform's usual 10 s stop limit); the runs still going then are cancelled "
        "and their leases released, so the next sweep on any node continues them at once.",
    )
    http_timeout_seconds: float = Field(default=10.0, gt=0, description="Outbound call timeout.")
    max_body_bytes: int = Field(
        default=1 << 20,
        ge=1,
        description="Largest request body accepted (bytes, default 1 MiB); a larger one "
        "(by Content-Length or as read) is answered 413 body_too_large.",
    )
    max_header_bytes: int = Field(
        default=16384,
        ge=1024,
        description="Largest request head accepted (request line and headers, bytes, default "
        "16 KiB); past it the answer is 431 headers_too_large and the connection is closed.",
    )
    max_headers: int = Field(
        default=100,
        ge=10,
        description="Most request headers accepted (431 headers_too_large past it).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Longest a client may take to send a request's head, from its "
        "connection or its first byte; a slower client's connection is closed.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Longest a client may take to send a request's body once its head "
        "arrived; a slower client's connection is closed.",
    )
    keep_alive_seconds: int = Field(
        default=20,
        ge=1,
        description="Longest an idle connection is kept open between two requests. Longer "
        "than the clients' own idle expiry (httpx 5 s, aiohttp 15 s), so that a client never "
        "sends a request on a connection the node is closing.",
    )
    flows: str = Field(
        default="samples",
        description="Comma-separated flows to serve, each a module path (mycompany.flows), "
        "a .py file or a folder of .py files (its folder goes on sys.path); the "
        "`--flows` option of serve, worker and flows check overrides it. Default: the "
        "sample flows (with their fake providers).",
    )

    console_enabled: bool = Field(
        default=True,
        description="Serve the web console at /ui (sign-in with an API token).",
    )
    console_secret: SecretStr | None = Field(
        default=None,
        description="Key that signs the console's session cookies; every node serving the "
        "same console needs the same one. Default: derived from FLOWPARK_API_TOKENS (so "
        "changing the tokens signs everyone out).",
    )
    console_session_seconds: float = Field(
        default=8 * 3600.0,
        gt=0,
        description="How long a console sign-in lasts at most (seconds, default 8 hours).",
    )
    console_idle_seconds: float = Field(
        default=1800.0,
        gt=0,
        description="A console session not used for this long is over, on every node "
        "(seconds, default 30 minutes).",
    )
    forwarded_allow_ips: str | None = Field(
        default=None,
        description="The proxies whose X-Forwarded-For and X-Forwarded-Proto headers are "
        "trusted (comma-separated addresses or networks, or * for any): from them the "
        "client's address (access log, /metrics' loopback check, the fakes' admin routes) "
        "and scheme (the console cookie's Secure flag) are taken. Unset: uvicorn's own "
        "FORWARDED_ALLOW_IPS when that is set, else no proxy is trusted.",
    )
    metrics_enabled: bool = Field(
        default=True, description="Count and serve Prometheus metrics (GET /metrics)."
    )
    gc_freeze: bool = Field(
        default=False,
        description="Once the node has started, freeze the objects start-up allocated "
        "(never scanned by the garbage collector again) and collect young objects every "
        "10,000 allocations (flowpark.runtime.heap). flowpark serve and flowpark worker turn it "
        "on unless it is set; off for an app built with create_app elsewhere.",
    )
    metrics_access: Literal["loopback", "token", "open"] = Field(
        default="loopback",
        description="Who may read /metrics: loopback (clients on a loopback address only), "
        "token (a bearer token of FLOWPARK_API_TOKENS) or open.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="flowpark worker: serve /metrics on this port (the worker has no HTTP "
        "API otherwise).",
    )
    metrics_host: str = Field(
        default="127.0.0.1", description="flowpark worker: address of the metrics listener."
    )
    metrics_refresh_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Seconds between refreshes of the instance gauges (one grouped query), "
        "the pending deliveries gauge (one more, with subscribers) and the database pool "
        "gauge.",
    )
    log_format: Literal["text", "json"] = Field(
        default="text",
        description="Log lines as text, or json: one JSON object per line.",
    )

    subscribers: list[Subscriber] = Field(
        default_factory=list,
        description='Event subscribers, as JSON: [{"name": "billing", "url": '
        '"https://billing.example/hooks", "secret": "whsec_..."}]. Each emitted event is '
        "POSTed to each one, signed per Standard Webhooks.",
    )
    delivery_scan_seconds: float = Field(
        default=1.0, gt=0, description="Seconds between two looks for due event deliveries."
    )
    delivery_timeout_seconds: float = Field(
        default=10.0, gt=0, description="Timeout of one delivery POST to a subscriber."
    )
    delivery_max_tries: int = Field(
        default=12,
        ge=1,
        description="Tries of one delivery (each one POST) before it is failed for good "
        "(listed and retryable over the API).",
    )
    delivery_backoff_seconds: float = Field(
        default=1.0,
        gt=0,
        description="Delay before the second try; doubled for each further one (with "
        "jitter: each delay is drawn between half of it and all of it).",
    )
    delivery_max_backoff_seconds: float = Field(
        default=600.0, gt=0, description="The longest delay between two tries of a delivery."
    )
    retention: str = Field(
        default="P30D",
        description="How long ended instances are kept (ISO-8601 duration, e.g. P30D, "
        "PT12H); older ones are deleted with all their rows by a periodic job. Empty: kept "
        "for ever. Also the idempotency window: a start's Idempotency-Key is free again "
        "once its instance is deleted.",
    )
    retention_scan_seconds: float = Field(
        default=600.0, gt=0, description="Seconds between two runs of the retention purge."
    )
    retention_batch: int = Field(
        default=500,
        ge=1,
        description="Instances deleted per purge transaction (each batch is one short "
        "transaction).",
    )
    signal_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='The secrets of signed signals by name, as JSON: {"ocr": "whsec_...", '
        '"github": "..."}; a signal declared with SignedWebhook("ocr") (or GitHubWebhook, '
        "StripeWebhook, HmacWebhook) is verified with the secret of that name.",
    )
    provider_limits: dict[str, dict[str, float | None]] = Field(
        default_factory=dict,
        description="Overrides of declared provider limits by provider name, as JSON: "
        '{"ocr": {"rate_per_second": 20, "burst": 2}} (keys rate_per_second, 0.001 to '
        "1000000; burst and max_in_flight, whole numbers from 1; floor_ratio, in (0, 1]). "
        "A value out of range stops the node at start; a name no flow of the node declares "
        "is logged as a warning. An operator's live change is kept over it.",
    )

    @field_validator("provider_limits")
    @classmethod
    def _provider_limits_in_range(
        cls, value: dict[str, dict[str, float | None]]
    ) -> dict[str, dict[str, float | None]]:
        check_provider_limits(value)  # a rate of 0 would start a node no call can use
        return value

    @cached_property
    def api_credentials(self) -> tuple[ApiToken, ...]:
        """The accepted bearer tokens with their names and scopes (see
        :func:`parse_api_tokens`)."""
        return tuple(parse_api_tokens(self.api_tokens))

    @property
    def plain_tokens_with_colons(self) -> list[str]:
        """Names (``token-N``) of plain tokens whose value has a colon: entries that look
        like ``name:token:scope+scope`` but are not one (no scope part, a last part that is
        no scope list), so they hold every scope under their whole text. Never values."""
        return [
            t.name
            for t in self.api_credentials
            if ":" in t.value and t.name.startswith("token-") and t.scopes == frozenset(SCOPES)
        ]

    @field_validator("api_tokens")
    @classmethod
    def _api_tokens_parse(cls, value: str) -> str:
        parse_api_tokens(value)  # two entries with one name: refused when the node starts
        return value

    @field_validator("database_schema")
    @classmethod
    def _schema_of_postgresql(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None or not value.strip():
            return None
        from sqlalchemy.exc import ArgumentError

        from flowpark.store.db import check_schema_name, is_sqlite

        check_schema_name(value.strip())
        try:
            sqlite = is_sqlite(info.data.get("database_url", ""))
        except (ArgumentError, ValueError):  # no URL flowpark reads: refused where it is used
            sqlite = False
        if sqlite:
            raise ValueError(
                "SQLite has no schemas: a database schema applies to PostgreSQL only (on "
                "SQLite flowpark's tables are told apart by their flow_ names); unset it"
            )
        return value.strip()

    @field_validator("self_url", "public_base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("it is not an http:// or https:// base URL (a scheme and a host)")
        return value.strip()

    @field_validator("retention")
    @classmethod
    def _retention_is_a_duration(cls, value: str) -> str:
        if value.strip():
            to_timedelta(value.strip(), name="FLOWPARK_RETENTION")
        return value.strip()

    @property
    def retention_period(self) -> timedelta | None:
        """:attr:`retention` as a ``timedelta``; None when off (empty)."""
        return to_timedelta(self.retention, name="retention") if self.retention else None

    @cached_property
    def tokens(self) -> frozenset[str]:
        """The accepted bearer token values."""
        return frozenset(t.value for t in self.api_credentials)

    def secret_values(self) -> frozenset[str]:
        """Every secret these settings hold, to be masked in what the process prints and
        logs (:func:`flowpark.redaction.register_secrets`): the API token values (not the public
        default ``dev-token``), the console's cookie secret, the subscribers' and signed
        signals' webhook secrets and the database password."""
        from sqlalchemy.exc import ArgumentError

        from flowpark.store.db import parse_url

        values = {v for v in self.tokens if v != DEFAULT_API_TOKEN}
        if self.console_secret is not None:
            values.add(self.console_secret.get_secret_value())
        # the Standard Webhooks secrets of subscribers and signed signals
        values.update(s.secret.get_secret_value() for s in self.subscribers)
        values.update(secret.get_secret_value() for secret in self.signal_secrets.values())
        try:
            password = parse_url(self.database_url).password
        except (ArgumentError, ValueError):
            password = None
        if password:
            values.add(str(password))
        return frozenset(values)

    def token_with(self, scope: str) -> str | None:
        """A token value holding ``scope`` (the first by value), or None."""
        held = sorted(t.value for t in self.api_credentials if scope in t.scopes)
        return held[0] if held else None

    @property
    def callback_url(self) -> str:
        """The base URL providers call back on (``public_base_url``, else ``self_url``)."""
        return self.public_base_url or self.self_url

    @property
    def flow_targets(self) -> list[str]:
        """``flows`` split on commas, blanks dropped (see :mod:`flowpark.runtime.loading`)."""
        return [t.strip() for t in self.flows.split(",") if t.strip()]


def overdue_before(settings: Settings, now: datetime) -> datetime:
    """The instant a parked wake must precede to be overdue, as the console, ``/readyz``,
    ``GET /api/v1/nodes`` and the gauges count it.

    Args:
        settings: the node's settings (``timer_scan_interval``, seconds).
        now: the engine clock's instant (aware UTC).

    Returns:
        ``now`` minus two scan intervals, and at least one second before ``now``.
    """
    return now - max(timedelta(seconds=2 * settings.timer_scan_interval), timedelta(seconds=1))


#: ``FLOWPARK_*`` names read outside :class:`Settings`: the operator CLI's node URL and
#: token; and the starts of those the repository's tests and benchmarks read.
OTHER_NAMES = frozenset({"FLOWPARK_URL", "FLOWPARK_TOKEN"})
_DEVELOPMENT = ("FLOWPARK_TEST_", "FLOWPARK_BENCH_", "FLOWPARK_GOLDEN_", "FLOWPARK_MULTINODE_")


def unknown_names(
    environ: Mapping[str, str], known: Iterable[str] = ()
) -> list[tuple[str, str | None]]:
    """The ``FLOWPARK_*`` variables of ``environ`` that name no setting, each with the
    closest setting's name (or None), sorted by name.

    Args:
        environ: the environment (``os.environ``).
        known: more names read from it (a served flow's settings).

    Returns:
        ``[(name, suggestion), ...]``: the names ``Settings``, :data:`OTHER_NAMES` and
        ``known`` do not hold.
    """
    names = {f"FLOWPARK_{field.upper()}" for field in Settings.model_fields}
    names |= OTHER_NAMES | {name.upper() for name in known}
    unknown = sorted(
        n
        for n in environ
        if n.upper().startswith("FLOWPARK_")
        and n.upper() not in names
        and not n.upper().startswith(_DEVELOPMENT)
    )
    tails = [n.removeprefix("FLOWPARK_") for n in names]  # compared without the shared start
    found = []
    for name in unknown:
        close = difflib.get_close_matches(name.upper().removeprefix("FLOWPARK_"), tails, 1, 0.6)
        found.append((name, f"FLOWPARK_{close[0]}" if close else None))
    return found
