"""Capabilities: the units of work a flow runs, and what they see while running.

A capability is a class with a stable ``id``; its ``execute`` is async, reads the instance's
input and state bag through a :class:`StepContext`, and puts typed values (pydantic models)
back. It returns ``None`` to continue, or a :class:`Decision` (outcomes are data): ``Fail``
ends the flow with a business error, ``Complete`` ends it early with a result. Raising an
exception is a *failure* of the call, handled by the capability's retry policy.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel

from flowpark.flows.correlation import Correlate
from flowpark.flows.durations import RetryPolicy
from flowpark.flows.providers import Provider
from flowpark.flows.webhooks import WebhookDelivery, WebhookVerifier

__all__ = [
    "Bag",
    "Capability",
    "CapabilityOptions",
    "Complete",
    "Decision",
    "Fail",
    "RecoveryError",
    "Signal",
    "SignalMatch",
    "StepContext",
    "Stream",
    "bag_key",
]

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")


def bag_key(model: type[BaseModel]) -> str:
    """The state-bag key of a model type: its ``bag_key`` class attribute, else its name."""
    key = _BAG_KEYS.get(model)
    if key is None:
        key = _BAG_KEYS[model] = str(getattr(model, "bag_key", None) or model.__name__)
    return key


# model type -> bag key (a pydantic class answers a missing attribute slowly, by raising)
_BAG_KEYS: dict[type[BaseModel], str] = {}


@dataclass(frozen=True)
class CapabilityOptions:
    """Timeouts and retries of a capability. Every duration is a ``timedelta``.

    Attributes:
        execute_timeout: bound on one try; the engine cancels the try at this point
            (error type ``execute_timeout``). Default 30 s.
        heartbeat_timeout: None (default) for no heartbeats; otherwise at least 10 s. A try
            that records no heartbeat for this long is declared lost by any node's sweep
            (error type ``heartbeat_timeout``) and retried from its checkpoint.
        retry: None (default) for a single try; else the :class:`RetryPolicy`.
        poll_interval: declared by heartbeating capabilities that loop in-process; used by
            the rule ``heartbeat.window_too_small``.
        call_timeout: the capability's own timeout on one outbound call (same rule).
    """

    execute_timeout: timedelta = timedelta(seconds=30)
    heartbeat_timeout: timedelta | None = None
    retry: RetryPolicy | None = None
    poll_interval: timedelta | None = None
    call_timeout: timedelta | None = None

    def __post_init__(self) -> None:
        if self.execute_timeout <= timedelta(0):
            raise ValueError("execute_timeout must be positive")
        if self.heartbeat_timeout is not None and self.heartbeat_timeout < timedelta(seconds=10):
            raise ValueError("heartbeat_timeout must be at least 10 seconds")


@dataclass(frozen=True)
class Fail:
    """Decision: fail the flow now with a business error (no retry).

    Attributes:
        code: stable error code, e.g. ``job.failed``.
        message: human-readable sentence.
    """

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Complete:
    """Decision: complete the flow now with ``result`` (a JSON-able value or model)."""

    result: Any


Decision = Fail | Complete


@dataclass(frozen=True)
class RecoveryError:
    """What a failure route's capabilities see: the failure that exhausted the retries.

    Attributes:
        error_type: exception class name, or ``execute_timeout`` / ``heartbeat_timeout``.
        detail: the error's text.
        try_number: the try that failed last (1-based).
    """

    error_type: str
    detail: str
    try_number: int


@dataclass(frozen=True)
class Signal:
    """A named, typed message an instance can receive over HTTP.

    Attributes:
        name: stable name, e.g. ``ocr.completed`` (also the route segment).
        model: pydantic model the payload must validate against.
        verify: None (default): the flow's signal route takes a bearer token with the
            ``signal`` scope; a webhook verifier (:class:`~flowpark.flows.webhooks.SignedWebhook`
            for Standard Webhooks, ``GitHubWebhook``, ``StripeWebhook``, ``HmacWebhook``):
            the route takes the provider's signature instead (no bearer token), refuses a
            missing, stale or wrong one with 401 ``signature_invalid``, and keys the
            delivery's idempotency by the provider's delivery id.
        adapt: None (default): the flow route's body is the payload. Else a function of
            the :class:`~flowpark.flows.webhooks.WebhookDelivery` (the provider's own JSON, its
            event type and delivery id) returning the payload - an instance of ``model``
            or its JSON as a dict - or None for a delivery that is not this signal
            (answered 204, nothing stored: e.g. GitHub's ``ping``). Applies on the flow's
            signal route only; ``match=`` then sees the typed payload.
        instance_key: None (default), or a function of the typed payload giving the
            instance key (a start's ``instanceKey``) of the instance the delivery is for,
            or None for none. A signal with one also has the flow's keyed route
            ``POST {trigger route}/signals/{name}`` - no instance id in the URL, so a
            provider's one webhook URL (or a caller that knows only its business key)
            serves every instance: the delivery goes to the flow's running instance
            holding that key (else the newest that held it, so a retry of a taken
            delivery is still answered as a repeat); none: 404 ``instance_not_found``. The
            keyed route of a verified signal takes the provider's signature; of any other,
            a bearer token of the ``signal`` scope and the typed payload, as the signal's
            instance route does.
        correlate: None (default), or a :class:`~flowpark.flows.correlation.Correlate`
            naming a provider and a function of the typed payload giving the provider's
            id that a step of the instance recorded (``ctx.correlate(provider, key)``).
            A signal with one also has the fixed route
            ``POST /api/v1/providers/{provider}/signals/{name}``, shared by every flow
            declaring it: the delivery goes to the one live instance holding the key;
            none: 404 ``correlation_key_unknown`` (nothing stored). It takes the
            provider's signature when the signal is verified, else a bearer token of the
            ``signal`` scope and the typed payload.
    """

    name: str
    model: type[BaseModel]
    verify: WebhookVerifier | None = None
    adapt: Callable[[WebhookDelivery], BaseModel | dict[str, Any] | None] | None = None
    instance_key: Callable[[Any], str | None] | None = None
    correlate: Correlate | None = None


@dataclass(frozen=True)
class Stream:
    """A best-effort, ordered, size-bounded progress channel of an instance.

    Attributes:
        name: stream name (route segment), e.g. ``JobProgress``.
        model: pydantic model of each message.
        max_bytes: bound on the stream's total JSON size; a write past it is dropped and
            reported False (the stream is best effort; durable state lives elsewhere).
    """

    name: str
    model: type[BaseModel]
    max_bytes: int = 1 << 20


class Bag(Protocol):
    """Read-only view of an instance: its input and its state bag."""

    @property
    def input(self) -> Any:
        """The instance's validated input model."""

    @property
    def instance_id(self) -> str:
        """The instance's id (canonical UUID string)."""

    def get(self, model: type[M]) -> M:
        """The value of ``model``'s type. Raises KeyError when no step put it."""
        ...

    def find(self, model: type[M]) -> M | None:
        """The value of ``model``'s type, or None."""
        ...


SignalMatch = Callable[[Bag, Any], bool]
"""``match(bag, payload) -> bool``: whether a delivered signal belongs to a wait; ``bag``
is the instance's state bag at the wait, ``payload`` the signal's validated model."""


class StepContext(Bag, Protocol):
    """What a capability sees while it runs (implemented by the engine)."""

    @property
    def try_number(self) -> int:
        """1-based try number under the retry policy."""
        ...

    @property
    def scope(self) -> int:
        """Attempt number inside a poll (0-based); 0 elsewhere."""
        ...

    @property
    def execution_key(self) -> str:
        """The stable key of this capability execution: pass it to the provider as its
        idempotency key (an ``Idempotency-Key`` header, a request id, a client token).

        The same on every try and every re-execution of this capability at this
        instance, step and scope (after a crash, an outage, a lease taken over), and
        different for every other execution (another instance, step or poll attempt, or
        the step's compensation). Visible ASCII, at most a few dozen characters, e.g.
        ``"0b6f...9c:2:0"``. A provider that keeps the first answer per key turns the
        engine's at-least-once execution into one effect.
        """
        ...

    @property
    def instance_key(self) -> str | None:
        """The client-chosen business key the instance was started with (``instanceKey``
        in a start body), or None."""
        ...

    @property
    def now(self) -> datetime:
        """The engine clock's instant (aware UTC)."""
        ...

    @property
    def recovery_error(self) -> RecoveryError | None:
        """Set inside a failure route; None elsewhere."""
        ...

    def put(self, value: BaseModel) -> None:
        """Put ``value`` in the state bag (committed with this step's journal row)."""
        ...

    def request_review(
        self, subject: str, reason: str, details: dict[str, Any] | None = None
    ) -> None:
        """Queue an item for human review (committed with this step's journal row)."""
        ...

    def correlate(self, provider: str, key: str) -> None:
        """Record ``key``, the id ``provider`` minted for what this step started (the CI
        run, the OCR job), so that a signal declared with
        ``correlate=Correlate(provider, ...)`` finds this instance by it.

        The key is written with this step's journal row (one transaction), only when the
        try succeeds; it is released when the instance ends. It is unique among the live
        instances of the flow for ``provider``: when another one holds it, the step fails
        for good (no retry) with the error type ``correlation_key_in_use``, its failure
        route (if any) seeing it as the recovery error. The instance may hold several
        keys; recording one it holds already changes nothing.

        Args:
            provider: the provider's name (1 to 64 of ``a-z 0-9 _ . -``).
            key: the provider's id (1 to 200 characters, no control character).

        Raises:
            ValueError: ``provider`` or ``key`` is malformed, or this is a compensation
                (it records nothing): a failed try.
        """
        ...

    async def heartbeat(self, value: Any = None) -> None:
        """Record liveness and a checkpoint ``value`` (JSON-able: a model, enum, str ...);
        renews the lease. An unchanged value is written at most once per third of the
        heartbeat timeout; a changed one at once. Without a ``heartbeat_timeout`` the
        checkpoint is kept for this try only.

        Raises:
            StaleFencingToken: another node took the instance over (the try must stop).
            asyncio.CancelledError: the write learned that the instance is to be
                cancelled: the engine cancels the try's task at this heartbeat, as
                ``execute_timeout`` does. It is no ``Exception``, so ``except Exception``
                does not catch it; a handler that catches it (or ``BaseException``) must
                re-raise it. The try stops, commits nothing, and the instance unwinds.
        """
        ...

    def last_heartbeat_value(self, model: type[T]) -> T | None:
        """The latest checkpoint recorded for this step (by this try, else by an earlier
        one), as ``model`` (a pydantic model, or a type such as an enum called on the stored
        value), or None when none was recorded."""
        ...

    async def write(self, stream: Stream, value: BaseModel) -> bool:
        """Append a message to ``stream`` (declared by the flow's ``streams=``). Best effort
        and bounded: returns False, storing nothing, when the message would take the
        stream past ``stream.max_bytes``; later smaller messages may still fit.

        Raises:
            StreamNotDeclared: the flow does not declare the stream
                (``stream_not_declared``).
            StaleFencingToken: another node took the instance over.
        """
        ...

    async def sleep(self, delay: timedelta) -> None:
        """Wait on the engine clock (virtual in tests)."""
        ...

    def fail(self, code: str, message: str, **details: Any) -> Fail:
        """Build a :class:`Fail` decision to return."""
        ...

    def complete(self, result: Any) -> Complete:
        """Build a :class:`Complete` decision to return."""
        ...


def _masked(value: Any, secret: frozenset[str]) -> Any:
    """``value`` with the fields named in ``secret`` replaced by ``"***"`` at any depth."""
    if isinstance(value, dict):
        return {k: "***" if k in secret else _masked(v, secret) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, secret) for v in value]
    return value


class Capability(ABC):
    """Base class of capabilities.

    Subclasses set the class attributes and implement :meth:`execute`.

    Attributes:
        id: stable id, e.g. ``ocr.status`` (journal rows carry it).
        idempotent: True when running it twice has the effect of running it once; a poll's
            body must be (rule ``poll.body_not_idempotent``).
        reads: bag types it reads (checked against earlier puts at registration).
        puts: bag types it puts.
        options: timeouts and retry policy.
        secret_fields: names of fields whose values the instance views (API, CLI, console)
            show as ``"***"``, at any depth of a value it put; the journal keeps them, since
            later steps read them. Override :meth:`redact` for other rules.
        provider: the :class:`~flowpark.flows.providers.Provider` it calls, or None (default):
            each try then takes a token of the provider's shared budget first (a try without
            one is deferred, not run), and a 429/503 or ``ProviderPushback`` it raises parks
            the instance until the provider's ``Retry-After`` instead of failing the try.
    """

    id: ClassVar[str] = ""
    idempotent: ClassVar[bool] = False
    reads: ClassVar[tuple[type[BaseModel], ...]] = ()
    puts: ClassVar[tuple[type[BaseModel], ...]] = ()
    options: ClassVar[CapabilityOptions] = CapabilityOptions()
    secret_fields: ClassVar[tuple[str, ...]] = ()
    provider: ClassVar[Provider | None] = None

    def redact(self, values: dict[str, Any]) -> dict[str, Any]:
        """The values one execution put, as the instance views show them.

        Args:
            values: ``{bag_key: JSON value}`` as the journal row holds them.

        Returns:
            The same shape with every field named in :attr:`secret_fields` (at any depth)
            replaced by ``"***"``. Must not raise; the journal row is not changed.
        """
        secret = frozenset(self.secret_fields)
        if not secret:
            return values
        return {key: _masked(value, secret) for key, value in values.items()}

    @abstractmethod
    async def execute(self, ctx: StepContext) -> Decision | None:
        """Run once. Return None to continue, or a Decision.

        Raises:
            Exception: any exception is a failed try (its class name is the error type).
        """

    def __repr__(self) -> str:
        return f"<capability {self.id}>"
