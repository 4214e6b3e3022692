"""A harness for testing flows: the production engine, plan, journal and sweep on a store (the
in-memory twin by default, or a SQLite or PostgreSQL database), driven by a virtual clock.

Example (pytest with pytest-asyncio)::

    from flowpark.testing import FlowHarness, Scripted

    async def test_document_waits_then_completes():
        async with FlowHarness.open(
            [my_flow],
            substitutes={"ocr.status": Scripted(pending, pending, done)},
        ) as h:
            started = await h.start("document.process", {"documentId": "d1", "pages": 1})
            assert started.instance.state == "suspended"
            assert not await h.holds_lease(started.instance.id)
            await h.advance_to_next_wake(started.instance.id)   # attempt 1
            await h.advance_to_next_wake(started.instance.id)   # attempt 2: done
            assert (await h.instance(started.instance.id)).state == "completed"
            assert await h.calls(started.instance.id, "ocr.status") == 3

The clock moves to the instant the instance itself recorded (``wake_at``), never to one the
test computes, so jittered schedules need no copy of the random draw.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr

from flowpark.engine.clock import VirtualClock
from flowpark.engine.node.engine import Engine, EngineConfig, StartResult, SweepReport
from flowpark.engine.records import InstanceRecord, Snapshot, StepKind
from flowpark.flows.builder import AwaitItem, Flow, Item, PollItem, StepItem
from flowpark.flows.capability import Capability, Decision, StepContext
from flowpark.flows.catalog import Catalog
from flowpark.store.db import make_async_engine
from flowpark.store.delivery_ids import SqlDeliveryIds
from flowpark.store.memory import MemoryStore
from flowpark.store.memory_delivery_ids import MemoryDeliveryIds
from flowpark.store.migrate import upgrade
from flowpark.store.sql_store import SqlStore
from flowpark.testing_webhooks import webhook_body, webhook_headers

if TYPE_CHECKING:
    from flowpark.api.models import SignalAnswer

__all__ = ["FlowHarness", "Scripted", "substitute", "webhook_body", "webhook_headers"]


class Scripted(Capability):
    """A stand-in capability that plays scripted outcomes, one per call.

    Each outcome is a pydantic model (put in the bag), a :class:`~flowpark.flows.Decision`
    (returned), an exception instance (raised: a failed try), ``None`` (nothing), or a
    callable ``f(ctx)`` (sync or async) whose return value is treated the same way. The
    last outcome repeats when the script runs out.

    ``correlate`` records correlation keys as the stood-in capability does with
    ``ctx.correlate(provider, key)``, on each call whose outcome is not an exception: a
    mapping ``{provider: key}`` (``{"ci": "b-7"}``), or a function of the step's context
    giving one, asked once the outcome was put (``lambda ctx: {"ci":
    ctx.get(BuildStarted).build}``). Without it a stand-in records no key: a provider's
    webhook then finds no instance (``correlation_key_unknown``), as it would if the
    capability forgot to record it.

    Attributes:
        calls: how many times it ran.
    """

    def __init__(
        self,
        *outcomes: Any,
        correlate: Mapping[str, str] | Callable[[StepContext], Mapping[str, str]] | None = None,
    ) -> None:
        if not outcomes:
            raise ValueError("Scripted needs at least one outcome")
        self.outcomes = list(outcomes)
        self.correlate = correlate
        self.calls = 0

    def bind(self, original: Capability) -> Scripted:
        """Take over ``original``'s id, flags, bag types and options."""
        self.id = original.id  # type: ignore[misc]
        self.idempotent = original.idempotent  # type: ignore[misc]
        self.reads = original.reads  # type: ignore[misc]
        self.puts = original.puts  # type: ignore[misc]
        self.options = original.options  # type: ignore[misc]
        self.secret_fields = original.secret_fields  # type: ignore[misc]
        self.provider = original.provider  # type: ignore[misc]
        self._original = original
        return self

    def redact(self, values: dict[str, Any]) -> dict[str, Any]:
        """The stood-in capability's redaction (its own hook, when bound)."""
        original = getattr(self, "_original", None)
        return original.redact(values) if original is not None else super().redact(values)

    async def execute(self, ctx: StepContext) -> Decision | None:
        """Play the next scripted outcome (the last repeats)."""
        outcome = self.outcomes[min(self.calls, len(self.outcomes) - 1)]
        self.calls += 1
        if callable(outcome) and not isinstance(outcome, BaseModel | BaseException):
            outcome = outcome(ctx)
            if hasattr(outcome, "__await__"):
                outcome = await outcome
        if isinstance(outcome, BaseException):
            raise outcome
        if isinstance(outcome, BaseModel):
            ctx.put(outcome)
            outcome = None
        keys = self.correlate(ctx) if callable(self.correlate) else self.correlate
        for provider, key in (keys or {}).items():
            ctx.correlate(provider, key)
        return outcome  # type: ignore[no-any-return]


def _swap(items: list[Item], subs: Mapping[str, Capability]) -> None:
    for item in items:
        if isinstance(item, StepItem):
            cap = item.capability
            if isinstance(cap, Capability) and cap.id in subs:
                item.capability = subs[cap.id]
            if item.compensation is not None and item.compensation.id in subs:
                item.compensation = subs[item.compensation.id]
            if item.on_failure:
                _swap(item.on_failure, subs)
        elif isinstance(item, PollItem):
            if isinstance(item.body, Capability) and item.body.id in subs:
                item.body = subs[item.body.id]
            if item.on_timeout:
                _swap(item.on_timeout, subs)
        elif isinstance(item, AwaitItem) and item.on_timeout:
            _swap(item.on_timeout, subs)


def _originals(items: list[Item]) -> dict[str, Capability]:
    found: dict[str, Capability] = {}
    for item in items:
        if isinstance(item, StepItem):
            if isinstance(item.capability, Capability):
                found[item.capability.id] = item.capability
            if item.compensation is not None:
                found[item.compensation.id] = item.compensation
            found.update(_originals(item.on_failure or []))
        elif isinstance(item, PollItem):
            if isinstance(item.body, Capability):
                found[item.body.id] = item.body
            found.update(_originals(item.on_timeout or []))
        elif isinstance(item, AwaitItem):
            found.update(_originals(item.on_timeout or []))
    return found


def substitute(flow: Flow, substitutes: Mapping[str, Capability]) -> Flow:
    """Replace capabilities of ``flow`` by id (in place; returns the flow).

    :class:`Scripted` stand-ins take over the original's id, flags and options.

    Raises:
        KeyError: an id that the flow does not use.
    """
    originals = _originals(flow.items)
    for cap_id, stand_in in substitutes.items():
        if cap_id not in originals:
            raise KeyError(f"{flow.name} has no capability {cap_id!r}")
        if isinstance(stand_in, Scripted):
            stand_in.bind(originals[cap_id])
    _swap(flow.items, substitutes)
    return flow


class FlowHarness:
    """The production engine on a store with a virtual clock.

    Build with :meth:`open` (an async context manager). Attributes: ``clock``
    (:class:`VirtualClock`), ``engine``, ``store`` (a :class:`MemoryStore`, or a
    :class:`SqlStore` when opened with a ``database_url``), ``catalog``, ``secrets`` (the
    signal secrets a node would hold in ``FLOWPARK_SIGNAL_SECRETS``) and ``delivery_ids``
    (the first instance each signed delivery id reached).
    """

    def __init__(
        self,
        engine: Engine,
        store: SqlStore | MemoryStore,
        clock: VirtualClock,
        db: Any,
        secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.engine = engine
        self.store = store
        self.clock = clock
        self.catalog = engine.catalog
        self.secrets = {name: SecretStr(value) for name, value in (secrets or {}).items()}
        self.delivery_ids: MemoryDeliveryIds | SqlDeliveryIds = (
            store.delivery_ids if isinstance(store, MemoryStore) else SqlDeliveryIds(db)
        )
        self._db = db

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        flows: Iterable[Flow],
        *,
        database_url: str | None = None,
        substitutes: Mapping[str, Capability] | None = None,
        start: datetime | None = None,
        config: EngineConfig | None = None,
        migrate: bool = True,
        signal_secrets: Mapping[str, str] | None = None,
    ) -> AsyncIterator[FlowHarness]:
        """Open a harness.

        Args:
            flows: flows to register (capabilities substituted first).
            database_url: a store URL (``sqlite:///...``, or ``postgresql://...`` to test on
                PostgreSQL); default the in-memory store, the same answers and errors as the
                SQL stores (they all pass one contract suite), nothing written to disk.
            substitutes: capability id -> stand-in (:class:`Scripted` or any Capability).
            start: the virtual clock's first instant (aware UTC).
            config: engine config (default node ``harness``, 30 s lease).
            migrate: run ``alembic upgrade head`` on ``database_url`` first.
            signal_secrets: secret name -> value, as ``FLOWPARK_SIGNAL_SECRETS`` holds them
                on a node: :meth:`provider_signal` verifies (and signs) a signal's
                deliveries with them.
        """
        if database_url is not None and migrate:
            upgrade(database_url)
        catalog = Catalog()
        for flow in flows:
            if substitutes:
                substitute(
                    flow, {k: v for k, v in substitutes.items() if k in _originals(flow.items)}
                )
            catalog.register(flow)
        db = make_async_engine(database_url) if database_url is not None else None
        clock = VirtualClock(start)
        store = SqlStore(db) if db is not None else MemoryStore()
        engine = Engine(store, catalog, clock, config or EngineConfig(node_id="harness"))
        try:
            yield cls(engine, store, clock, db, signal_secrets)
        finally:
            # runs still going in the background (a test that failed before draining) are
            # cancelled first: a run left going would use the pool after its disposal and
            # leave a connection unreturned into the next test
            await engine.close()
            if db is not None:
                await db.dispose()

    def with_engine(self, *, node_id: str, clock: VirtualClock | None = None) -> Engine:
        """Another engine (another 'node') on the same store and catalog."""
        return Engine(
            self.store,
            self.catalog,
            clock or self.clock,
            replace(self.engine.config, node_id=node_id),
        )

    async def start(
        self,
        flow: str,
        payload: Any,
        *,
        version: str | None = None,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
    ) -> StartResult:
        """Start ``flow`` (latest version unless given) and advance it until it parks or
        ends, or until it starts a try of a heartbeating capability: that run goes on in the
        background (``await h.engine.drain()`` waits for it; the try's ``ctx.sleep`` waits
        on the virtual clock)."""
        plan = self.catalog.get(flow, version) if version else self.catalog.latest(flow)
        return await self.engine.start(
            plan, payload, idempotency_key=idempotency_key, instance_key=instance_key
        )

    async def signal(
        self,
        instance_id: str,
        name: str,
        payload: Any,
        *,
        idempotency_key: str | None = None,
    ) -> SignalAnswer:
        """Deliver signal ``name`` to the instance as its HTTP route does (the same code
        once the route has the payload), and answer what the route answers, typed (the
        API's :class:`~flowpark.api.models.SignalAnswer`, as the client's ``signal``):
        ``signal_id``, ``name``, ``payload``, ``received_at``, ``taken_at``,
        ``taken_step_id``, ``matched`` (True: a wait took it; False: the wait's ``match``
        refused it, kept and ending nothing; None: it waits in the mailbox),
        ``instance_id``, ``created`` (False for a repeat of ``idempotency_key``) and the
        instance's ``state`` after the run it started.

        Raises:
            InstanceNotFound, SignalNotDeclared, InputInvalid (the payload does not
            validate), InstanceEnded, IdempotencyKeyReused: as the route answers them (404,
            404, 422, 409, 422).
        """
        from flowpark.api.signals import deliver_payload

        return await deliver_payload(self.engine, instance_id, name, idempotency_key, payload)

    async def provider_signal(
        self,
        provider: str,
        name: str,
        payload: Any = None,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        delivery_id: str | None = None,
        event: str | None = None,
    ) -> SignalAnswer | None:
        """Deliver a provider's webhook to ``POST /api/v1/providers/{provider}/signals/{name}``
        as the route does, through the route's own code: the signal's verifier checks the
        signature on the virtual clock, each declaring version's ``adapt``, payload model
        and key function read it, and the one live instance holding the correlation key
        the delivery names takes it (a delivery id already seen answers its first signal).

        A verified signal's delivery is signed here, as its provider signs it, with the
        secret ``signal_secrets`` holds under the verifier's name
        (:func:`flowpark.testing_webhooks.webhook_headers`), unless ``headers`` are given
        (to test a refusal, or a verifier of the flow's own). A signal with no verifier
        takes the typed payload, ``delivery_id`` as its ``Idempotency-Key`` (the route's
        bearer token is the API's, not the delivery's: not asked for here).

        Args:
            provider: the provider's name (the route's ``{provider}``).
            name: the signal's name.
            payload: the provider's JSON (GitHub's ``workflow_run`` event, a Stripe
                event), sent as JSON; or ``body``, the raw bytes.
            body: the raw body, instead of ``payload``.
            headers: the delivery's headers as sent (not signed here).
            delivery_id: the delivery's id (``X-GitHub-Delivery``, ``webhook-id``, an
                ``HmacWebhook``'s ``id_header``; the ``Idempotency-Key`` of a signal with
                no verifier); default a new one for a format that requires one.
            event: GitHub's event type (``X-GitHub-Event``).

        Returns:
            The route's answer (as :meth:`signal`'s), or None when the route answers 204:
            ``adapt`` or the key function said it is not this signal (GitHub's ``ping``).

        Raises:
            SignalNotDeclared: no registered flow declares a provider signal
                ``provider``/``name`` (404).
            SignatureInvalid: 401 ``signature_invalid``; CorrelationKeyUnknown: 404
                ``correlation_key_unknown`` (no live instance holds the key: a capability
                that forgot ``ctx.correlate``); CorrelationKeyAmbiguous, InstanceEnded,
                DeliveryIdReused: 409; InputInvalid, SignalPayloadInvalid: 422: as the
                route answers them (each error's ``code``; ``flowpark.api.problems
                .status_of(code)`` is the route's status).
        """
        from flowpark.api.correlated import deliver_provider_signal, provider_signal_groups
        from flowpark.errors import SignalNotDeclared

        groups = provider_signal_groups(self.catalog.plans())
        plans = groups.get((provider, name))
        if plans is None:
            declared = [f"{p}/{n}" for p, n in groups]
            raise SignalNotDeclared(
                f"no registered flow declares the provider signal {provider}/{name}; its "
                f"provider signals: {', '.join(declared) or 'none'}",
                provider=provider,
                signal=name,
                provider_signals=declared,
            )
        raw = body if body is not None else webhook_body(payload)
        verifier = plans[0].signals[name].verify
        if headers is None:
            if verifier is None:
                headers = {"content-type": "application/json"}
                if delivery_id is not None:
                    headers["idempotency-key"] = delivery_id
            else:
                headers = self._signed(verifier, raw, delivery_id, event)
        lowered = {key.lower(): value for key, value in headers.items()}
        return await deliver_provider_signal(
            self.engine, self.secrets, self.delivery_ids, plans, provider, name, raw, lowered
        )

    def _signed(
        self, verifier: Any, raw: bytes, delivery_id: str | None, event: str | None
    ) -> dict[str, str]:
        """The headers the provider signs ``raw`` with (:func:`webhook_headers`)."""
        secret = self.secrets.get(verifier.secret)
        if secret is None:
            raise ValueError(
                f"FlowHarness.open(signal_secrets=...) holds no secret {verifier.secret!r} to "
                "sign the delivery with (pass headers= to send one unsigned)"
            )
        return webhook_headers(
            verifier,
            secret.get_secret_value(),
            raw,
            at=self.clock.now(),
            delivery_id=delivery_id or f"delivery-{uuid.uuid4().hex}",
            event=event,
        )

    async def instance(self, instance_id: str) -> InstanceRecord:
        """The instance row as stored now."""
        return await self.store.reads.get_instance(instance_id)

    async def snapshot(self, instance_id: str) -> Snapshot:
        """The instance, its journal and its untaken signals, as stored now."""
        return await self.store.reads.load(instance_id)

    async def holds_lease(self, instance_id: str) -> bool:
        """True when any node holds a live lease on the instance."""
        inst = await self.instance(instance_id)
        return (
            inst.lease_owner is not None
            and inst.lease_expires_at is not None
            and inst.lease_expires_at > self.clock.now()
        )

    async def calls(
        self, instance_id: str, capability_id: str, kind: StepKind = StepKind.STEP
    ) -> int:
        """Journal rows of ``capability_id`` (one per try) for the instance."""
        snap = await self.snapshot(instance_id)
        return sum(1 for r in snap.steps if r.capability_id == capability_id and r.kind is kind)

    async def sweep(self) -> SweepReport:
        """Sweep once at the virtual clock's now (claims due instances and advances them)."""
        return await self.engine.sweep()

    async def advance_to_next_wake(self, instance_id: str | None = None) -> SweepReport:
        """Move the clock to the recorded ``wake_at`` of ``instance_id`` (or the earliest
        suspended instance's) and sweep.

        Raises:
            AssertionError: the instance is not parked with a wake instant.
        """
        target: datetime | None
        if instance_id is not None:
            inst = await self.instance(instance_id)
            assert inst.wake_at is not None, f"{instance_id} has no wake ({inst.state})"
            target = inst.wake_at
        else:
            target = await self.store.reads.next_wake()
            assert target is not None, "no parked instance has a wake instant"
        if target > self.clock.now():
            self.clock.set(target)
        return await self.sweep()

    async def advance(self, delta: timedelta) -> SweepReport:
        """Move the clock forward by ``delta`` and sweep."""
        self.clock.advance(delta)
        return await self.sweep()

    async def wait_until(
        self, predicate: Callable[[InstanceRecord], bool], instance_id: str, *, limit: int = 1000
    ) -> InstanceRecord:
        """Advance from wake to wake until ``predicate(instance)`` holds (at most ``limit``
        wakes)."""
        for _ in range(limit):
            inst = await self.instance(instance_id)
            if predicate(inst):
                return inst
            await self.advance_to_next_wake(instance_id)
        raise AssertionError(f"{instance_id} did not reach the expected state")
