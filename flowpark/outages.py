"""One warning line per kind of expected store outage and interval, never a traceback.

A store that cannot be reached (``store_unavailable``: the database is down, restarting,
or its pool is exhausted) is expected in operation: every job, run and request that meets
it would otherwise log its own traceback, ~50 a node in a 15 s outage. Each place that
meets one reports it here under a *kind* (``sweep``, ``delivery``, ``run``, ``api`` ...):

* the first report of a kind logs one warning at once, with the cause's message;
* later reports of that kind within ``interval_seconds`` are counted, not logged;
* the first report after the interval logs one warning with the count of the interval;
* :meth:`OutageLog.recovered` (a job's next success) logs, once, how many reports there
  were since the last line, and that the store answers again.

A traceback in the log therefore means a bug, never an outage. The module imports only
the standard library, so the engine may use it too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flowpark.errors import StoreUnavailable

__all__ = ["OUTAGES", "READY_TIMEOUT_SECONDS", "OutageLog", "store_outage"]

#: Seconds between two lines of one kind (the counts in between are summed).
DEFAULT_INTERVAL_SECONDS = 10.0
#: Seconds a readiness check (``/readyz``) waits for the store before it answers "not
#: ready", and a stopping node for a gauge refresh in flight before it cancels it.
READY_TIMEOUT_SECONDS = 5.0


#: Driver errors (by class, without importing the driver) that mean "not reachable now".
_DRIVER_OUTAGES = frozenset(
    {("sqlalchemy.exc", "OperationalError"), ("sqlalchemy.exc", "InterfaceError")}
)


def store_outage(exc: BaseException) -> bool:
    """``exc`` says the store cannot be reached now - ``StoreUnavailable``, a connection
    fault of the driver, a refused or timed-out connect - rather than a bug.

    Args:
        exc: the error a job, run or request met.

    Returns:
        True for an expected outage (one line per interval here), False for anything else.
    """
    if isinstance(exc, StoreUnavailable | OSError | TimeoutError):
        return True
    return any((c.__module__, c.__name__) in _DRIVER_OUTAGES for c in type(exc).__mro__)


@dataclass
class _Kind:
    since: float  # monotonic instant of the last line logged
    count: int = 0  # reports since that line
    last: str = ""  # the last report's cause


class OutageLog:
    """Rate-limited warnings for expected store unavailability (see the module docstring).

    Args:
        logger: where the lines go.
        interval_seconds: at most one line per kind in this many seconds (default 10).
        monotonic: the clock measuring the interval (default :func:`time.monotonic`).
    """

    def __init__(
        self,
        logger: logging.Logger,
        interval_seconds: float = DEFAULT_INTERVAL_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_seconds = interval_seconds
        self._now = monotonic
        self._kinds: dict[str, _Kind] = {}
        self._lock = threading.Lock()

    def unavailable(self, kind: str, cause: object) -> None:
        """Report that ``kind`` met an unavailable store.

        Args:
            kind: a short, bounded name of what met it (``sweep``, ``run``, ``api``).
            cause: the error (its message is logged; the node's log redacts secrets).
        """
        text = " ".join(str(cause).split())[:500]
        now = self._now()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is None:
                self._kinds[kind] = _Kind(since=now, last=text)
                line: tuple[object, ...] | None = (kind, text)
                many = None
            elif now - seen.since >= self.interval_seconds:
                many = (kind, seen.count + 1, now - seen.since, text)
                seen.since, seen.count, seen.last = now, 0, text
                line = None
            else:
                seen.count += 1
                seen.last = text
                return
        if line is not None:
            self.logger.warning("store unavailable (%s): %s", *line)
        elif many is not None:
            self.logger.warning(
                "store unavailable (%s): %d times in the last %.1f s; last: %s", *many
            )

    def recovered(self, kind: str) -> None:
        """Report that ``kind`` reached the store again (a no-op when it had not failed)."""
        with self._lock:
            seen = self._kinds.pop(kind, None)
        if seen is None:
            return
        if seen.count:
            self.logger.warning(
                "store unavailable (%s): %d more times in the last %.1f s; answering again",
                kind,
                seen.count,
                self._now() - seen.since,
            )
        else:
            self.logger.info("store answering again (%s)", kind)


#: The node's one outage log (logger ``flowpark.store``).
OUTAGES = OutageLog(logging.getLogger("flowpark.store"))
