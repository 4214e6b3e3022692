"""Durations and backoff schedules.

Durations are ``timedelta`` or ISO-8601 strings (``"PT5S"``, ``"PT4H"``), parsed by pydantic.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

from pydantic import TypeAdapter, ValidationError

__all__ = ["Backoff", "DurationLike", "RetryPolicy", "to_timedelta"]

DurationLike = timedelta | str
_TIMEDELTA = TypeAdapter(timedelta)


def to_timedelta(value: DurationLike, *, name: str = "duration") -> timedelta:
    """Turn a ``timedelta`` or an ISO-8601 duration string into a ``timedelta``.

    Args:
        value: ``timedelta(seconds=5)`` or ``"PT5S"``.
        name: what the value is, for the error message.

    Raises:
        ValueError: the string is not an ISO-8601 duration, or the value is negative.
    """
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, str) and value.upper().startswith("P"):
        try:
            result = _TIMEDELTA.validate_python(value)
        except ValidationError as exc:
            raise ValueError(f"{name}: {value!r} is not an ISO-8601 duration") from exc
    else:
        raise ValueError(f"{name}: expected timedelta or ISO-8601 string, got {value!r}")
    if result < timedelta(0):
        raise ValueError(f"{name}: must not be negative, got {value!r}")
    return result


@dataclass(frozen=True)
class Backoff:
    """The schedule of waits between poll attempts.

    The wait after attempt ``n`` (0-based) is ``min(initial * multiplier**n, maximum)``,
    then, with ``jitter`` j > 0, scaled by a factor drawn uniformly from ``[1 - j, 1]``.
    The draw is seeded by (instance id, attempt), so the schedule of one instance is
    reproducible across replays and nodes while instances started together spread apart.

    Attributes:
        initial: first wait.
        maximum: cap on any wait.
        multiplier: growth per attempt (1.0 for a fixed interval).
        jitter: fraction of each wait that may be cut away at random (0 = none, < 1).
    """

    initial: timedelta
    maximum: timedelta
    multiplier: float = 1.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if self.initial <= timedelta(0):
            raise ValueError("Backoff.initial must be positive")
        if self.maximum < self.initial:
            raise ValueError("Backoff.maximum must be at least initial")
        if self.multiplier < 1.0:
            raise ValueError("Backoff.multiplier must be >= 1.0")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("Backoff.jitter must be in [0, 1)")

    @classmethod
    def fixed(cls, interval: DurationLike) -> Backoff:
        """The same wait every time, e.g. ``Backoff.fixed("PT2S")``."""
        every = to_timedelta(interval, name="interval")
        return cls(initial=every, maximum=every)

    @classmethod
    def exponential(
        cls, initial: DurationLike, maximum: DurationLike, multiplier: float = 2.0
    ) -> Backoff:
        """Doubling (by default) waits from ``initial`` up to ``maximum``, no jitter."""
        return cls(
            initial=to_timedelta(initial, name="initial"),
            maximum=to_timedelta(maximum, name="maximum"),
            multiplier=multiplier,
        )

    @classmethod
    def exponential_jitter(
        cls,
        initial: DurationLike,
        maximum: DurationLike,
        multiplier: float = 2.0,
        jitter: float = 0.5,
    ) -> Backoff:
        """Exponential waits with jitter (default: each wait cut by up to half).

        Example: ``Backoff.exponential_jitter("PT5S", "PT5M")``.
        """
        return cls(
            initial=to_timedelta(initial, name="initial"),
            maximum=to_timedelta(maximum, name="maximum"),
            multiplier=multiplier,
            jitter=jitter,
        )

    def base_delay(self, attempt: int) -> timedelta:
        """The un-jittered wait after ``attempt`` (0-based)."""
        seconds = self.initial.total_seconds() * (self.multiplier ** min(attempt, 64))
        return timedelta(seconds=min(seconds, self.maximum.total_seconds()))

    def delay(self, attempt: int, seed: str) -> timedelta:
        """The wait after ``attempt`` for the instance identified by ``seed``."""
        base = self.base_delay(attempt)
        if self.jitter == 0.0:
            return base
        factor = 1.0 - self.jitter * random.Random(f"{seed}:{attempt}").random()
        return timedelta(seconds=base.total_seconds() * factor)


@dataclass(frozen=True)
class RetryPolicy:
    """How a failing capability is tried again; waits between tries are durable parks.

    Delay before try k+1 (after try k fails) is
    ``min(initial_interval * backoff_coefficient**(k-1), maximum_interval)``. Tries stop at
    the first of ``maximum_tries`` (counting the first try) or ``total_duration``
    measured from the first try's start: no try starts past it (the last may end after it).

    Attributes:
        initial_interval: first delay (default 1 s).
        backoff_coefficient: growth per try (default 2.0).
        maximum_interval: cap on a delay (default 100 s).
        maximum_tries: tries in all, or None for no count limit.
        total_duration: bound on when a try may start, or None.

    The three durations may also be given as ISO-8601 strings (``"PT2M"``), as a flow's
    other durations are; they are stored as ``timedelta``.

    Raises:
        ValueError: a duration is not a ``timedelta`` or an ISO-8601 duration, or is
            negative; ``jitter``, ``maximum_tries`` or ``backoff_coefficient`` is out of
            range.
        non_retryable: error type names (``"ValueError"``) that fail at once.
        jitter: fraction of each delay that may be cut away at random (0 = none, < 1), as
            :class:`Backoff` does: the draw is seeded by the execution and the try, so one
            instance's schedule is reproducible while instances that failed together
            come back spread apart, not as one wave.
    """

    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta = timedelta(seconds=100)
    maximum_tries: int | None = None
    total_duration: timedelta | None = None
    non_retryable: tuple[str, ...] = ()
    jitter: float = 0.0

    def __post_init__(self) -> None:
        # an ISO-8601 string ("PT2M") is taken as every other duration of a flow is
        for name in ("initial_interval", "maximum_interval", "total_duration"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, to_timedelta(value, name=f"RetryPolicy.{name}"))
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError("RetryPolicy.jitter must be in [0, 1)")
        if self.maximum_tries is not None and self.maximum_tries < 1:
            raise ValueError("RetryPolicy.maximum_tries must be >= 1")
        if self.backoff_coefficient < 1.0:
            raise ValueError("RetryPolicy.backoff_coefficient must be >= 1.0")

    @property
    def bounded(self) -> bool:
        """True when tries end by count or by time."""
        return self.maximum_tries is not None or self.total_duration is not None

    def delay_after(self, try_number: int) -> timedelta:
        """The wait after try ``try_number`` (1-based) fails."""
        seconds = self.initial_interval.total_seconds() * (
            self.backoff_coefficient ** min(try_number - 1, 64)
        )
        return timedelta(seconds=min(seconds, self.maximum_interval.total_seconds()))

    def jittered_delay_after(self, try_number: int, seed: str) -> timedelta:
        """:meth:`delay_after` with :attr:`jitter` applied, drawn from ``seed`` (the
        execution's key) and the try: the same answer on every node and replay."""
        base = self.delay_after(try_number)
        if self.jitter == 0.0:
            return base
        factor = 1.0 - self.jitter * random.Random(f"{seed}:retry:{try_number}").random()
        return timedelta(seconds=base.total_seconds() * factor)

    def allows_another(
        self, try_number: int, error_type: str, elapsed_at_next_start: timedelta
    ) -> bool:
        """Whether try ``try_number + 1`` may run.

        Args:
            try_number: the try that just failed (1-based).
            error_type: its error type name.
            elapsed_at_next_start: time from the first try's start to the next try's start.
        """
        if error_type in self.non_retryable:
            return False
        if self.maximum_tries is not None and try_number >= self.maximum_tries:
            return False
        return not (self.total_duration is not None and elapsed_at_next_start > self.total_duration)
