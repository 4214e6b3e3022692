"""The in-process client: a host application's handlers start, signal, read, list, cancel
and wake instances straight through the engine of the flowpark running in their process,
with no HTTP and no token, and the same answers and errors as :mod:`flowpark.client`.

Every method answers the HTTP API's own model (``StartAnswer``, ``InstanceView``, ...)
and raises the :mod:`flowpark.client.errors` class the HTTP client would raise for the same
problem (``InstanceNotFound``, ``InvalidRequest``, ``IdempotencyKeyReused``, ...), so code
moves between the two clients unchanged.

A start may be written in the caller's own transaction (``session=``): see
:meth:`LocalClient.start`.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from pydantic import BaseModel
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from flowpark.api.actions import cancel as cancel_action
from flowpark.api.actions import wake as wake_action
from flowpark.api.auth import Principal
from flowpark.api.explain import decode_cursor, encode_cursor
from flowpark.api.inputs import (
    MAX_KEY,
    check_instance_id,
    check_storable,
    idempotency_header,
    well_formed,
)
from flowpark.api.instances import display_fields, summaries
from flowpark.api.models import (
    CancelAnswer,
    InstanceList,
    InstanceView,
    SignalAnswer,
    StartAnswer,
    WakeAnswer,
)
from flowpark.api.problems import STATUS, problem_members
from flowpark.api.signals import deliver
from flowpark.api.starts import body_fields, check_body_fields, start_answer
from flowpark.api.views import instance_view
from flowpark.client.errors import ProblemError, problem_error
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.operator import InstanceFilter
from flowpark.engine.records import InstanceState, NewInstance
from flowpark.errors import (
    FlowNotFound,
    FlowparkError,
    IdempotencyKeyInvalid,
    InputInvalid,
    InstanceNotFound,
    TransactionNotShared,
)
from flowpark.flows.plan import Plan, Profile
from flowpark.settings import Settings
from flowpark.store.caller_tx import insert_in, insert_in_sync, same_database


class Owner(Protocol):
    """What the client needs of the flowpark it belongs to
    (:class:`flowpark.embedding.Flowpark`)."""

    settings: Settings
    prefix: str

    @property
    def schema_map(self) -> dict[str | None, str] | None:
        """The PostgreSQL schema translation of flowpark's statements, or None."""
        ...

    def engine(self) -> Engine:
        """The running engine. Raises NotReady (``not_ready``) before the start."""
        ...

    def run_soon(self, new: NewInstance) -> None:
        """Run an instance started in a caller's transaction once it committed."""
        ...


__all__ = ["LocalClient", "Owner", "Transaction", "client_error"]

log = logging.getLogger("flowpark.embedding")

#: What a start can be written in: the caller's session or connection, async or not.
Transaction = AsyncSession | AsyncConnection | Session | Connection

#: Session.info's key for the instances started in its transaction, woken after its commit.
_PENDING = "flowpark.started"
_HOOKED = "flowpark.hooked"


def client_error(exc: FlowparkError) -> ProblemError:
    """The :mod:`flowpark.client.errors` error the HTTP API's answer to ``exc`` would
    raise in the HTTP client (the same class, ``status``, ``code`` and problem document).

    Args:
        exc: a domain error of :mod:`flowpark.errors`.

    Returns:
        The client error, carrying the problem the API would answer.
    """
    if exc.code in STATUS:
        status, body = STATUS[exc.code], problem_members(exc)
    else:  # an engine invariant: the API answers it as internal_error (and logs it)
        status, body = 500, {"code": "internal_error", "detail": exc.message}
    body.update(status=status, type=f"urn:flowpark:problem:{body['code']}", title=body["code"])
    return problem_error(status, body)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except FlowparkError as exc:
        raise client_error(exc) from exc


def _json(value: Any) -> Any:
    """A start's input or a signal's payload as JSON data, held to the body's rules of the
    HTTP API (no U+0000 or lone surrogate in a string, a bounded depth: ``input_invalid``).
    """
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", by_alias=True)
    value = {} if value is None else value
    check_storable(value)
    return value


def _key(value: Any) -> str | None:
    """An ``idempotency_key`` as the HTTP API takes its ``Idempotency-Key`` header: at most
    ``MAX_KEY`` visible ASCII characters, stripped; blank is none.

    Raises:
        IdempotencyKeyInvalid: not a string, too long, or not visible ASCII.
    """
    if value is None:
        return None
    if not isinstance(value, str):
        raise IdempotencyKeyInvalid(f"idempotency_key must be a string, not {type(value).__name__}")
    return idempotency_header(value, required=False)


def _instance_id(value: Any) -> str:
    """An instance id as a path would name it (else ``instance_not_found``, no look-up)."""
    if not isinstance(value, str):
        raise InstanceNotFound(f"no instance {value!r}"[:120], instance_id=repr(value)[:100])
    check_instance_id(value)
    return value


def _text(name: str, value: Any) -> None:
    """Refuse a filter the HTTP API's query would refuse (not text, longer than ``MAX_KEY``,
    or holding a control character)."""
    if value is not None and not (isinstance(value, str) and well_formed(value, MAX_KEY)):
        raise InputInvalid(
            f"{name} must be a string of at most {MAX_KEY} characters and no control character"
        )


class LocalClient:
    """A client of the flowpark running in this process (see the module).

    Get it from :attr:`flowpark.embedding.Flowpark.client`, or in a route by dependency
    (``client: Annotated[LocalClient, Depends(fp.get_client)]``). Calls made before the
    host's lifespan started flowpark raise :class:`~flowpark.client.errors.ServerError`
    with code ``not_ready`` at once (never a hang).

    Args:
        owner: the :class:`~flowpark.embedding.Flowpark` whose engine it calls.
        actor: the name recorded as who acted for operator actions (wake, cancel).
    """

    def __init__(self, owner: Owner, actor: str = "in-process") -> None:
        self._owner = owner
        self._actor = Principal(actor, frozenset({"read", "start", "signal", "operate"}))

    # -- starting ----------------------------------------------------------------------
    def _plan(self, engine: Engine, flow: str, version: str | None) -> Plan:
        try:
            if version is not None:
                return engine.catalog.get(flow, version)
            return engine.catalog.latest(flow)
        except (KeyError, LookupError):
            served = f"{flow}@{version}" if version else flow
            raise FlowNotFound(f"no served flow {served!r}", flow=flow) from None

    def _body(self, plan: Plan, input: Any, instance_key: str | None) -> Any:
        body = _json(input)
        check_body_fields(plan, body, body_fields(plan.input_model))
        if instance_key is not None:
            if not isinstance(instance_key, str) or not 0 < len(instance_key) <= MAX_KEY:
                raise InputInvalid(
                    f"instance_key must be a non-empty string of at most {MAX_KEY} characters"
                )
            if "\x00" in instance_key:  # as a start body's instanceKey is refused
                raise InputInvalid("instance_key holds U+0000 (NUL), which cannot be stored")
            try:
                instance_key.encode("utf-8")
            except UnicodeEncodeError:
                raise InputInvalid("instance_key holds a lone surrogate (not Unicode)") from None
        return body

    async def start(
        self,
        flow: str,
        input: BaseModel | dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
        version: str | None = None,
        session: AsyncSession | AsyncConnection | None = None,
    ) -> StartAnswer:
        """Start an instance of ``flow``.

        Without ``session`` the start is the HTTP start's, without HTTP: the instance is
        written and advanced until it parks or ends (or ``FLOWPARK_START_WAIT_SECONDS``
        passed), and the answer tells its state then.

        With ``session`` (the caller's ``AsyncSession`` or ``AsyncConnection`` on
        flowpark's database, in a transaction) the instance is written **in the caller's
        transaction**, by one INSERT (one more statement only when a key conflicts), and
        nothing is called yet: the answer is ``status: running``. On rollback nothing
        exists. On commit of an ``AsyncSession`` this node runs it at once; after a bare
        connection's commit (no commit event to follow), or if this node is gone first, the
        next sweep on any node runs it (within ``FLOWPARK_TIMER_SCAN_INTERVAL``).

        Args:
            flow: the flow's name (its newest served version unless ``version``).
            input: the flow's input: a pydantic model (by its aliases) or JSON data.
            idempotency_key: a repeat with the same key and input answers the first
                instance (``IdempotencyKeyReused`` with another input).
            instance_key: a business id unique among the flow's running instances.
            version: the flow version to start (default: the newest served).
            session: the caller's transaction to write the start in (see above).

        Returns:
            :class:`~flowpark.api.models.StartAnswer` (``instance_id``, ``status``,
            ``result`` once completed, ``awaiting`` signals).

        Raises:
            InvalidRequest: ``input_invalid`` (with the field errors; a bad
                ``instance_key``), ``idempotency_key_invalid`` (not at most 200 visible
                ASCII characters, as the HTTP header), ``transaction_not_shared``
                (``session`` is on another database, or the flow is ephemeral);
                ``IdempotencyKeyReused``.
            InstanceKeyInUse: ``instance_key_in_use``.
            NotFound: ``flow_not_found``.
            ServerError: ``not_ready`` (flowpark has not started: the host's lifespan did
                not run yet).
        """
        with _translated():
            engine = self._owner.engine()
            plan = self._plan(engine, flow, version)
            body = self._body(plan, input, instance_key)
            idempotency_key = _key(idempotency_key)
            if session is None:
                started = await engine.start(
                    plan, body, idempotency_key=idempotency_key, instance_key=instance_key
                )
                return start_answer(plan, started.instance, self._owner.prefix)
            new = self._prepare(engine, plan, body, idempotency_key, instance_key)
            if isinstance(session, AsyncSession):
                conn = await session.connection()
            elif isinstance(session, AsyncConnection):
                conn = session
            else:
                raise TypeError(
                    "start(session=...) takes an AsyncSession or AsyncConnection; for a "
                    f"blocking Session or Connection use start_sync, not {type(session)!r}"
                )
            self._check_database(conn.engine.url)
            record, created = await insert_in(conn, new, self._owner.schema_map)
            if created and isinstance(session, AsyncSession):
                self._wake_after_commit(session.sync_session, new)
            return start_answer(plan, record, self._owner.prefix)

    def start_sync(
        self,
        flow: str,
        input: BaseModel | dict[str, Any] | None = None,
        *,
        session: Session | Connection,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
        version: str | None = None,
    ) -> StartAnswer:
        """:meth:`start` in the caller's blocking ``Session`` or ``Connection`` (code that
        is not async, e.g. a ``def`` route FastAPI runs in a thread): the same one INSERT
        in the caller's transaction; after a ``Session``'s commit this node runs it, else
        the next sweep.

        Args:
            flow: the flow's name. input: its input. session: the caller's transaction.
            idempotency_key / instance_key / version: as :meth:`start`.

        Returns:
            As :meth:`start` (``status: running``).

        Raises:
            As :meth:`start`.
        """
        with _translated():
            engine = self._owner.engine()
            plan = self._plan(engine, flow, version)
            body = self._body(plan, input, instance_key)
            new = self._prepare(engine, plan, body, _key(idempotency_key), instance_key)
            if not isinstance(session, Session | Connection):
                raise TypeError(
                    "start_sync(session=...) takes a Session or Connection; for an "
                    f"AsyncSession or AsyncConnection await start, not {type(session)!r}"
                )
            conn = session.connection() if isinstance(session, Session) else session
            self._check_database(conn.engine.url)
            record, created = insert_in_sync(conn, new, self._owner.schema_map)
            if created and isinstance(session, Session):
                self._wake_after_commit(session, new)
            return start_answer(plan, record, self._owner.prefix)

    def _prepare(
        self,
        engine: Engine,
        plan: Plan,
        body: Any,
        idempotency_key: str | None,
        instance_key: str | None,
    ) -> NewInstance:
        if plan.profile is Profile.EPHEMERAL:
            raise TransactionNotShared(
                f"{plan.name} is ephemeral: it writes no row, so it cannot start in a "
                "transaction (start it without session=)",
                flow=plan.name,
            )
        return engine.prepare_start(
            plan, body, idempotency_key=idempotency_key, instance_key=instance_key
        )

    def _check_database(self, theirs: Any) -> None:
        ours = make_url(self._owner.settings.database_url)
        if not same_database(ours, theirs):
            # what is compared, never a secret: no password, and no query (libpq takes a
            # password, an sslpassword ... there too)
            shown = theirs.set(query={}).render_as_string(hide_password=True)
            raise TransactionNotShared(
                f"the transaction is on {shown}, not on flowpark's database: a start in the "
                "caller's transaction needs a session of flowpark's database "
                "(FLOWPARK_DATABASE_URL)",
                database=shown,
            )

    def _wake_after_commit(self, session: Session, new: NewInstance) -> None:
        """Run ``new`` on this node once ``session``'s transaction commits; forget it on
        rollback (nothing was written)."""
        session.info.setdefault(_PENDING, []).append(new)
        if session.info.get(_HOOKED):
            return
        session.info[_HOOKED] = True
        owner = self._owner

        def committed(s: Session) -> None:
            for started in s.info.pop(_PENDING, []):
                owner.run_soon(started)

        def rolled_back(s: Session) -> None:
            s.info.pop(_PENDING, None)

        event.listen(session, "after_commit", committed)
        event.listen(session, "after_rollback", rolled_back)

    # -- reading -----------------------------------------------------------------------
    async def get(self, instance_id: str) -> InstanceView:
        """One instance, as ``GET /api/v1/instances/{id}`` answers it.

        Raises:
            InstanceNotFound: ``instance_not_found``. ServerError: ``not_ready``.
        """
        with _translated():
            engine = self._owner.engine()
            instance_id = _instance_id(instance_id)
            snap = await engine.store.reads.load(instance_id)
            signals = await engine.store.reads.list_signals(instance_id)
            actions = await engine.store.operator.actions_of(instance_id)
            plan = engine.catalog.find(snap.instance.flow_name, snap.instance.flow_version)
            return instance_view(
                snap.instance,
                snap.steps,
                signals,
                plan,
                engine.clock.now(),
                actions,
                self._owner.prefix,
            )

    async def list(
        self,
        *,
        flow: str | None = None,
        version: str | None = None,
        state: InstanceState | str | builtins.list[InstanceState | str] | None = None,
        instance_key: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> InstanceList:
        """Instances, newest first, as ``GET /api/v1/instances`` lists them.

        Args:
            flow / version / instance_key: filters (AND).
            state: one state or several (any of).
            limit: page size (1 to 1000).
            cursor: the previous page's ``next_cursor``.

        Returns:
            :class:`~flowpark.api.models.InstanceList` (``instances``, ``next_cursor``).

        Raises:
            InvalidRequest: ``input_invalid`` (a bad state, limit or cursor).
        """
        with _translated():
            engine = self._owner.engine()
            if not 1 <= limit <= 1000:
                raise InputInvalid(f"limit must be 1 to 1000, not {limit}")
            for name, value in (
                ("flow", flow),
                ("version", version),
                ("instance_key", instance_key),
            ):
                _text(name, value)
            given = [] if state is None else [state] if isinstance(state, str) else state
            try:
                states = tuple(dict.fromkeys(InstanceState(s) for s in given))
            except ValueError as exc:
                raise InputInvalid(f"state: {exc}") from None
            where = InstanceFilter(
                flow=flow,
                version=version,
                states=states,
                instance_key=instance_key,
                now=engine.clock.now(),
                display_fields=display_fields(engine.catalog),
            )
            after = decode_cursor(cursor) if cursor else None
            page = await engine.store.operator.list_instances(where, limit=limit, after=after)
            return InstanceList(
                instances=await summaries(engine, page.rows),
                next_cursor=encode_cursor(page.after) if page.after else None,
            )

    # -- acting ------------------------------------------------------------------------
    async def signal(
        self,
        instance_id: str,
        name: str,
        payload: BaseModel | dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalAnswer:
        """Deliver signal ``name`` to an instance (stored first; a wait that accepts it
        continues now).

        Returns:
            :class:`~flowpark.api.models.SignalAnswer`.

        Raises:
            InstanceNotFound; NotFound (``signal_not_declared``); InstanceEnded;
            InvalidRequest (``input_invalid``); IdempotencyKeyReused.
        """
        with _translated():
            engine = self._owner.engine()
            return await deliver(
                engine,
                None,
                _instance_id(instance_id),
                name,
                _key(idempotency_key),
                body=_json(payload),
            )

    async def cancel(self, instance_id: str, *, idempotency_key: str | None = None) -> CancelAnswer:
        """Cancel an instance: compensations of completed steps run once, in reverse
        order; recorded in its history with this client's actor.

        Raises:
            InstanceNotFound; InstanceEnded (it had ended); Conflict (``action_in_progress``).
        """
        with _translated():
            engine = self._owner.engine()
            instance_id = _instance_id(instance_id)
            _, answer = await cancel_action(engine, self._actor, instance_id, _key(idempotency_key))
            return answer

    async def wake(self, instance_id: str, *, idempotency_key: str | None = None) -> WakeAnswer:
        """Wake a parked instance now (its wait's next try runs at once); recorded in its
        history with this client's actor.

        Raises:
            InstanceNotFound; InstanceEnded; Conflict (``version_not_served``,
            ``action_in_progress``).
        """
        with _translated():
            engine = self._owner.engine()
            instance_id = _instance_id(instance_id)
            _, answer = await wake_action(engine, self._actor, instance_id, _key(idempotency_key))
            return answer
