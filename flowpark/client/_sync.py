# Written by scripts/unasync.py from _async.py: edit that file, then run the script
# (scripts/check fails when this file is not what it writes).
"""The blocking client: :class:`Client`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from flowpark.api.models import (
    BudgetExtension,
    CancelAnswer,
    CompensationRetryAnswer,
    EventView,
    FlowView,
    InstanceList,
    InstanceSummaryView,
    InstanceView,
    SignalAnswer,
    StartAnswer,
    WakeAnswer,
)
from flowpark.client._calls import (
    ENDED,
    Call,
    Requests,
    SseLines,
    list_query,
    read_answer,
    retry_delay,
    retryable,
    route_of,
    seconds,
    stream_of,
    wait_delay,
)
from flowpark.client.errors import ClientError, TransportError, WaitTimeout

__all__ = ["Client"]

M = TypeVar("M", bound=BaseModel)
#: seconds the last read of a wait may take past its deadline at most
_LAST_READ = 2.0
#: a sync wait leaves the stream for reads when less than this remains (seconds): the
#: node's keep-alive comes every 15 s, so a read of the stream can outlast a short rest
_STREAM_MARGIN = 20.0


class Client:
    """A blocking client of a flowpark node's HTTP API.

    Every answer is the API's own model (``flowpark.api.models``: :class:`StartAnswer`,
    :class:`InstanceView`, ...); every error answer raises the
    :mod:`flowpark.client.errors` class of its problem ``code``. Requests that are safe
    to repeat - reads, and writes given an idempotency key - are retried after a
    transport error or a 502/503/504 answer, within the call's ``timeout``.

    Example::

        with Client("http://127.0.0.1:8000", token="dev-token") as client:
            started = client.start(
                "document.process", {"documentId": "inv-42"}, idempotency_key="inv-42"
            )
            done = client.wait(started.instance_id, timeout=60)

    Args:
        base_url: the node's URL, e.g. ``http://127.0.0.1:8000``; None to use
            ``http``'s own ``base_url``.
        token: a bearer token of ``FLOWPARK_API_TOKENS`` (sent on every request), or None.
        http: your own ``httpx.Client`` (its pool, proxies, TLS, event hooks); it is not
            closed by :meth:`close`. Default: one made and owned by this client.
        timeout: seconds one call may take in all, its retries included (default 30).
        retries: how many times a safe call is sent again at most (default 3).

    Raises:
        ValueError: neither ``base_url`` nor ``http`` gives the node's URL, or
            ``timeout`` is not positive.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
        retries: int = 3,
    ) -> None:
        if timeout <= 0:
            raise ValueError("timeout must be positive (seconds)")
        if retries < 0:
            raise ValueError("retries must not be negative")
        if base_url is None and (http is None or not str(http.base_url)):
            raise ValueError("give base_url, or an httpx.Client with a base_url")
        self._owned = http is None
        self._http = http if http is not None else httpx.Client()
        self._base = base_url.rstrip("/") if base_url is not None else ""
        self._auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self.retries = retries
        self._flows: list[FlowView] | None = None

    # -- plumbing ----------------------------------------------------------------------

    def close(self) -> None:
        """Close the HTTP client this client made (not one passed in)."""
        if self._owned:
            self._http.close()

    def __enter__(self) -> Client:
        """The client itself."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close (see :meth:`close`)."""
        self.close()

    def _send(self, call: Call[M], timeout: float | None = None) -> Any:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        kwargs = call.request_kwargs()
        kwargs["headers"].update(self._auth)
        retry = 0
        while True:
            left = deadline - time.monotonic()
            response: httpx.Response | None = None
            try:
                response = self._http.request(
                    call.method, self._base + call.path, timeout=max(left, 0.001), **kwargs
                )
                error: Exception | None = None
            except httpx.TransportError as exc:
                error = exc
            retry += 1
            if retry <= self.retries and retryable(call, response):
                pause = retry_delay(retry, response)
                if time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    continue
            if response is None:
                raise TransportError(
                    f"{call.method} {call.path}: {type(error).__name__}: {error}"
                ) from error
            return read_answer(call, response)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """Send any request of the node's API; answer its JSON as it is.

        For the routes this client has no method of its own (``/api/v1/instances/counts``,
        ``/api/v1/nodes``, bulk actions, a flow's plan ...); the CLI talks to a node
        through it. Retried as the other calls: a read (``GET``, ``HEAD``), or a write
        with ``idempotency_key``.

        Args:
            method: the HTTP method, e.g. ``GET`` or ``POST``.
            path: the path under the base URL, e.g. ``/api/v1/instances/counts``.
            params: query parameters (a list repeats the parameter; None values are
                left out).
            body: the JSON body, or None to send none.
            idempotency_key: the ``Idempotency-Key`` header, or None.

        Returns:
            The answer's decoded JSON (dicts, lists, ...), unchanged; None when the answer
            has no body.

        Raises:
            ProblemError: the node answered a problem: the subclass of its ``code``
                (``InstanceNotFound``, ``Unauthorized`` ...), as every method raises.
            TransportError: the node could not be reached.
            ValueError: an ``idempotency_key`` the node would refuse (before anything is
                sent).
        """
        return self._send(Requests.any(method, path, params, body, idempotency_key))

    # -- flows and instances -----------------------------------------------------------

    def flows(self) -> list[FlowView]:
        """The flow versions the node serves (and unserved ones with unfinished instances).

        Returns:
            One :class:`FlowView` per version (``route``, ``signals``, ``streams``).

        Raises:
            ProblemError: the node refused (e.g. ``Unauthorized``).
            TransportError: the node could not be reached.
        """
        self._flows = self._send(Requests.flows())
        return self._flows

    def start(
        self,
        flow: str,
        input: BaseModel | dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
        instance_key: str | None = None,
    ) -> StartAnswer:
        """Start an instance through a flow's HTTP trigger.

        Args:
            flow: the flow's name (its newest served version's route is looked up once)
                or its route, e.g. ``/api/v1/documents``.
            input: the flow's input: a pydantic model (sent by its aliases) or JSON.
            idempotency_key: the ``Idempotency-Key``: a repeat with the same key and input
                answers the first instance (required by an idempotent trigger). With a
                key the start is retried after a transport error; without one, never.
            instance_key: a business id unique among the flow's running instances.

        Returns:
            :class:`StartAnswer`: ``instance_id``, ``status`` (its state when the node
            answered), ``result`` once completed, ``awaiting`` signals.

        Raises:
            InvalidRequest: ``input_invalid``, ``idempotency_key_missing`` (400),
                ``IdempotencyKeyReused`` (the key with another input).
            InstanceKeyInUse: 409, a running instance holds ``instance_key``.
            NotFound: ``flow_not_found``: no served flow of that name has a route.
            TransportError: the node could not be reached.
        """
        if not flow.startswith("/") and self._flows is None:
            self.flows()
        route = route_of(self._flows or [], flow)
        answer: StartAnswer = self._send(
            Requests.start(route, input, idempotency_key, instance_key)
        )
        return answer

    def get(self, instance_id: str) -> InstanceView:
        """Read one instance: state, result or error, journal, signals, waiting, budget.

        Raises:
            InstanceNotFound: 404, no instance has the id.
            TransportError: the node could not be reached.
        """
        view: InstanceView = self._send(Requests.get(instance_id))
        return view

    def signal(
        self,
        instance_id: str,
        name: str,
        payload: BaseModel | dict[str, Any] | None = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalAnswer:
        """Deliver signal ``name`` (with a bearer token of the ``signal`` scope).

        Args:
            instance_id: the instance.
            name: the signal's name, e.g. ``ocr.completed``.
            payload: the signal's model, or its JSON.
            idempotency_key: a repeat with the same key answers the first signal
                (``created`` false); with a key the delivery is retried when safe.

        Returns:
            :class:`SignalAnswer`: the stored signal, ``created``, ``matched`` and the
            instance's ``state`` after the delivery.

        Raises:
            InstanceNotFound: 404. NotFound: ``signal_not_declared``.
            InstanceEnded: 409, the instance had ended (nothing stored).
            InvalidRequest: ``input_invalid``; IdempotencyKeyReused.
            TransportError: the node could not be reached.
        """
        answer: SignalAnswer = self._send(
            Requests.signal(instance_id, name, payload, idempotency_key)
        )
        return answer

    def cancel(self, instance_id: str, *, idempotency_key: str | None = None) -> CancelAnswer:
        """Cancel an instance: compensations run, it ends ``cancelled``.

        Raises:
            InstanceNotFound: 404. InstanceEnded: 409, it had already ended.
            TransportError: the node could not be reached.
        """
        answer: CancelAnswer = self._send(
            Requests.action(instance_id, "cancel", CancelAnswer, idempotency_key)
        )
        return answer

    def retry_compensations(
        self, instance_id: str, *, idempotency_key: str | None = None
    ) -> CompensationRetryAnswer:
        """Run once more each compensation of an ended instance that failed for good.

        Returns:
            :class:`CompensationRetryAnswer`: ``retried``, the ``state`` after and
            ``still_failed`` (0: every one succeeded, the mark is cleared).

        Raises:
            Conflict: ``compensation_not_failed`` (nothing to retry), ``instance_busy``.
            InstanceKeyInUse: a running instance of its flow holds its key.
            InstanceNotFound: 404. TransportError: the node could not be reached.
        """
        answer: CompensationRetryAnswer = self._send(
            Requests.action(
                instance_id, "compensations/retry", CompensationRetryAnswer, idempotency_key
            )
        )
        return answer

    def wake(self, instance_id: str, *, idempotency_key: str | None = None) -> WakeAnswer:
        """Run a parked instance's next attempt (or retry) now.

        Returns:
            :class:`WakeAnswer`: ``woken``, or ``woken`` false with the ``reason``.

        Raises:
            InstanceNotFound: 404. InstanceEnded: 409.
            TransportError: the node could not be reached.
        """
        answer: WakeAnswer = self._send(
            Requests.action(instance_id, "wake", WakeAnswer, idempotency_key)
        )
        return answer

    def extend_budget(
        self, instance_id: str, by: timedelta | float, *, idempotency_key: str | None = None
    ) -> BudgetExtension:
        """Extend the budget of the poll the instance is parked at.

        Args:
            instance_id: the instance.
            by: how much longer: a ``timedelta`` or seconds (positive, at most 366 days).
            idempotency_key: a repeat with the same key extends once.

        Returns:
            :class:`BudgetExtension`: the stored end before and after (``ends_at``).

        Raises:
            Conflict: ``no_budget`` (not in a poll), ``instance_busy`` (try again).
            InstanceEnded: 409. InstanceNotFound: 404. InvalidRequest: a bad ``by``.
            TransportError: the node could not be reached.
        """
        body = {"extendBy": seconds(by)}
        answer: BudgetExtension = self._send(
            Requests.action(instance_id, "budget", BudgetExtension, idempotency_key, body)
        )
        return answer

    def list_pages(
        self,
        *,
        flow: str | None = None,
        version: str | None = None,
        state: str | Iterable[str] | None = None,
        overdue: float | timedelta | None = None,
        stuck: bool | None = None,
        error_code: str | None = None,
        waiting: str | None = None,
        instance_key: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[InstanceList]:
        """The instance list, page by page (newest first), as :meth:`list` filters it.

        Yields:
            :class:`InstanceList` pages; the last has ``next_cursor`` None.
        """
        query = list_query(
            flow=flow,
            version=version,
            state=state,
            overdue=overdue,
            stuck=stuck,
            error_code=error_code,
            waiting=waiting,
            instance_key=instance_key,
            created_after=created_after,
            created_before=created_before,
            limit=page_size,
        )
        cursor: str | None = None
        while True:
            page: InstanceList = self._send(Requests.page(query, cursor))
            yield page
            cursor = page.next_cursor
            if cursor is None:
                return

    def list(
        self,
        *,
        flow: str | None = None,
        version: str | None = None,
        state: str | Iterable[str] | None = None,
        overdue: float | timedelta | None = None,
        stuck: bool | None = None,
        error_code: str | None = None,
        waiting: str | None = None,
        instance_key: str | None = None,
        created_after: datetime | None = None,
        created_before: datetime | None = None,
        page_size: int = 100,
    ) -> Iterator[InstanceSummaryView]:
        """Every instance the filters select (AND), newest first, read a page at a time
        as the iterator is consumed (keyset pages: rows started meanwhile never shift one).

        Args:
            flow: flow name. version: flow version.
            state: a state, or several (any of).
            overdue: suspended with ``wake_at`` at least this long ago (seconds or
                ``timedelta``).
            stuck: True: running with an expired lease.
            error_code: the failure's code. waiting: ``poll``, ``retry``, ``signal`` or
                ``deadline``. instance_key: the instance key.
            created_after: aware instant. created_before: aware instant.
            page_size: instances per request (1-1000, default 100).

        Yields:
            :class:`InstanceSummaryView` rows.

        Raises:
            InvalidRequest: ``input_invalid``, a filter the node refuses.
            ValueError: a naive ``created_after`` or ``created_before``.
            TransportError: the node could not be reached.
        """
        for page in self.list_pages(
            flow=flow,
            version=version,
            state=state,
            overdue=overdue,
            stuck=stuck,
            error_code=error_code,
            waiting=waiting,
            instance_key=instance_key,
            created_after=created_after,
            created_before=created_before,
            page_size=page_size,
        ):
            yield from page.instances

    def events(self, *, after: int | None = None, page_size: int = 100) -> Iterator[EventView]:
        """The outbox's events in commit order, read a page at a time, up to the newest.

        Args:
            after: a sequence: only events after it (default: from the first).
            page_size: events per request (1-1000, default 100).

        Yields:
            :class:`EventView` events (``sequence``, ``name``, ``payload``, ...).

        Raises:
            TransportError: the node could not be reached.
        """
        while True:
            page: list[EventView] = self._send(Requests.events(after, page_size))
            yield from page
            if len(page) < page_size:
                return
            after = page[-1].sequence

    # -- waiting -----------------------------------------------------------------------

    def wait(self, instance_id: str, *, timeout: float | timedelta = 60.0) -> InstanceView:
        """Follow an instance until it ends (``completed``, ``failed`` or ``cancelled``).

        Where the instance's flow declares a stream, its event stream is followed (each
        message, and its ``end`` event, wakes the wait at once); otherwise, and for the
        last 20 s of ``timeout``, the instance is read with a backoff from 50 ms up to 2 s.

        Args:
            instance_id: the instance.
            timeout: how long to wait in all (seconds or ``timedelta``, default 60 s); the
                read at its end may take up to 2 s more.

        Returns:
            The ended instance's :class:`InstanceView` (check ``state``, ``result`` and
            ``error``: a failed instance is an answer, not an exception).

        Raises:
            WaitTimeout: it had not ended by then; ``.instance`` is the last view read.
            InstanceNotFound: 404, no instance has the id.
            TransportError: the node could not be reached.
        """
        if seconds(timeout) < 0:
            raise ValueError("timeout must not be negative (seconds)")
        deadline = time.monotonic() + seconds(timeout)
        view = self._send(Requests.get(instance_id), self._left(deadline))
        if str(view.state) in ENDED:
            return view  # type: ignore[no-any-return]
        if self._flows is None:
            try:
                self.flows()
            except ClientError:
                self._flows = []
        stream = stream_of(self._flows or [], view.flow, view.version)
        if stream is not None and self._left(deadline) > _STREAM_MARGIN:
            self._follow(instance_id, stream, deadline - _STREAM_MARGIN)
        read = 0
        while True:
            view = self._send(Requests.get(instance_id), self._left(deadline))
            if str(view.state) in ENDED:
                return view  # type: ignore[no-any-return]
            pause = wait_delay(read)
            read += 1
            if time.monotonic() + pause >= deadline:
                raise WaitTimeout(
                    f"instance {instance_id} is still {view.state} after {seconds(timeout):g} s",
                    view,
                )
            time.sleep(pause)

    def _left(self, deadline: float) -> float:
        """A wait's read timeout: what is left, but never under 2 s (or the client's
        timeout), so the read that ends a wait at its deadline can still answer."""
        floor = min(self.timeout, _LAST_READ)
        return max(min(self.timeout, deadline - time.monotonic()), floor)

    def _follow(self, instance_id: str, stream: str, until: float) -> None:
        """Read the instance's event stream until its ``end`` event or ``until``
        (monotonic); any error ends the following quietly (the reads go on)."""
        headers = {"Accept": "text/event-stream", **self._auth}
        last: str | None = None
        url = self._base + Requests.stream_path(instance_id, stream)
        while time.monotonic() < until:
            if last is not None:
                headers["Last-Event-ID"] = last
            try:
                with self._http.stream(
                    "GET", url, headers=headers, timeout=max(until - time.monotonic(), 0.001)
                ) as response:
                    if response.status_code != 200:
                        return
                    events = SseLines()
                    for line in response.iter_lines():
                        event = events.feed(line)
                        if event is not None and event.event == "end":
                            return
                        if event is not None and event.id is not None:
                            last = event.id
                        if time.monotonic() >= until:
                            return
            except httpx.HTTPError:
                return
