"""Plan a flow's load on its provider before deploying it (``flowpark flows simulate``).

The flow's production plan runs on the production engine, on the in-memory store and a
virtual clock: the same steps, poll schedules (jitter included), retry policies, budgets,
deadlines and compensations, and no real wait. Every capability is stood in for by one that
answers at once: the *scripted* one (by default the body of the flow's first parked poll)
plays a provider timeline per instance (:func:`parse_script`), the others succeed.

Running every instance of a large fleet through the engine takes too long in Python, so
:func:`simulate` runs a *sample* (``min(N, 200)`` instances by default, each with its own
jittered schedule) and scales the calls per second by ``N / sample``; the provider's limit is
then applied to that load as a deferral queue (a call beyond the limit waits for the next
second with budget, the oldest first). That model does not move a deferred call's later
wakes, as the engine's deferral does: with a backlog, the figures are an upper bound of the
burst and a lower bound of the delay.
"""

from __future__ import annotations

import enum
import math
import re
import types
import typing
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
from pydantic import BaseModel

from flowpark.engine.clock import VirtualClock
from flowpark.engine.node.engine import Engine, EngineConfig
from flowpark.engine.observe import Observer, PollEnd
from flowpark.flows.builder import AwaitItem, Flow, Item, PollItem, StepItem
from flowpark.flows.capability import Bag, Capability, Decision, StepContext
from flowpark.flows.catalog import Catalog
from flowpark.flows.providers import MAX_BURST, MAX_RATE, Provider
from flowpark.store.memory import MemoryStore

__all__ = [
    "DEFAULT_SAMPLE",
    "declared_limit",
    "Second",
    "Simulation",
    "ScriptStep",
    "parse_script",
    "placeholder",
    "queue_load",
    "simulate",
]

#: Instances run through the engine when the fleet is larger.
DEFAULT_SAMPLE = 200
#: The virtual instant a simulation starts at.
T0 = datetime(2026, 1, 1, tzinfo=UTC)
#: The most answers a script may name (its counts summed): the last one repeats anyway.
MAX_SCRIPT_ANSWERS = 10_000
_TOKEN = re.compile(r"^(pending|done|fail|429|503)(?::(\d+(?:\.\d+)?))?(?:\*(\d+))?$")


@dataclass(frozen=True)
class ScriptStep:
    """One answer of the scripted provider: ``pending`` (the wait goes on), ``done`` (the
    wait is satisfied), ``fail`` (a failed try) or ``429``/``503`` (a pushback, with
    ``retry_after`` seconds, None: no ``Retry-After``)."""

    answer: str
    retry_after: float | None = None


def parse_script(text: str) -> list[ScriptStep]:
    """Parse a provider timeline: comma-separated answers, each ``pending``, ``done``,
    ``fail``, ``429[:SECONDS]`` or ``503[:SECONDS]``, optionally ``*COUNT``
    (``pending*40,429:60,done``). Each instance plays it from its start; the last answer
    repeats.

    Raises:
        ValueError: an answer that is none of these, a count of 0, or more than
            :data:`MAX_SCRIPT_ANSWERS` answers in all.
    """
    steps: list[ScriptStep] = []
    for raw in text.split(","):
        token = raw.strip()
        match = _TOKEN.match(token)
        if match is None:
            raise ValueError(
                f"{token!r} is no answer: pending, done, fail, 429[:SECONDS] or "
                "503[:SECONDS], each optionally *COUNT"
            )
        answer, seconds, count = match.groups()
        if seconds is not None and answer not in ("429", "503"):
            raise ValueError(f"{token!r}: only 429 and 503 take a Retry-After")
        times = int(count) if count is not None else 1
        if times < 1:
            raise ValueError(f"{token!r}: the count must be at least 1")
        if len(steps) + times > MAX_SCRIPT_ANSWERS:
            raise ValueError(
                f"{token!r}: a script names at most {MAX_SCRIPT_ANSWERS:,} answers "
                "(the last one repeats)"
            )
        steps += [ScriptStep(answer, float(seconds) if seconds is not None else None)] * times
    return steps


# -- placeholder values ---------------------------------------------------------------------


def _value(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _value(args[0])
    if origin in (typing.Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        return _value(kept[0]) if len(kept) == len(args) else None
    if origin is typing.Literal:
        return args[0]
    if origin in (list, tuple, set, frozenset, Sequence):
        return []
    if origin in (dict, Mapping):
        return {}
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            return placeholder(annotation)
        if issubclass(annotation, enum.Enum):
            return next(iter(annotation))
        if issubclass(annotation, bool):
            return False
        if issubclass(annotation, int | float):
            return annotation(1)
        if issubclass(annotation, str):
            return "simulated"
        if issubclass(annotation, datetime):
            return T0
        if issubclass(annotation, date):
            return T0.date()
        if issubclass(annotation, timedelta):
            return timedelta(seconds=1)
    return None


def placeholder(model: type[BaseModel]) -> BaseModel:
    """A value of ``model`` with every required field set to a plain placeholder (``1``,
    ``"simulated"``, an empty list, a nested placeholder ...), defaults kept, unvalidated:
    what a stood-in capability puts in the bag."""
    values = {
        name: _value(info.annotation)
        for name, info in model.model_fields.items()
        if info.is_required()
    }
    return model.model_construct(**values)


# -- the stand-ins --------------------------------------------------------------------------


@dataclass
class _Record:
    """What the stand-ins and the observer saw, in offsets (seconds) from :data:`T0`."""

    clock: VirtualClock
    calls: list[tuple[float, str, str]] = field(default_factory=list)  # at, capability, id
    satisfied: dict[str, bool] = field(default_factory=dict)
    played: Counter[str] = field(default_factory=Counter)
    timeouts: list[float] = field(default_factory=list)
    ends: list[tuple[float, str, str]] = field(default_factory=list)  # at, state, code

    def now(self) -> float:
        return (self.clock.now() - T0).total_seconds()


_UNBOUNDED: dict[str, Provider] = {}


def _unbounded(provider: Provider) -> Provider:
    """``provider`` without a limit (one object per name): the sample's calls are not
    deferred for budget (the limit is applied to the scaled load), while a pushback still
    pauses the provider for every sampled instance, as it does for every instance."""
    key = f"{provider.name}:{provider.floor_ratio}"
    if key not in _UNBOUNDED:
        unbounded: dict[str, Any] = {"rate_per_second": MAX_RATE, "burst": MAX_BURST}
        _UNBOUNDED[key] = replace(provider, **unbounded, max_in_flight=None, limit=None, per=None)
    return _UNBOUNDED[key]


class _StandIn(Capability):
    """Answers at once in place of ``original`` (its id, flags, bag types, options); the
    scripted one plays ``script`` per instance."""

    def __init__(
        self, original: Capability, record: _Record, script: Sequence[ScriptStep] | None
    ) -> None:
        self.id = original.id  # type: ignore[misc]
        self.idempotent = original.idempotent  # type: ignore[misc]
        self.reads = original.reads  # type: ignore[misc]
        self.puts = original.puts  # type: ignore[misc]
        self.options = original.options  # type: ignore[misc]
        provider = getattr(original, "provider", None)
        if provider is not None:  # its pushbacks pause the provider; its limit is the queue's
            self.provider = _unbounded(provider)  # type: ignore[misc]
        self._record = record
        self._script = script

    async def execute(self, ctx: StepContext) -> Decision | None:
        record = self._record
        record.calls.append((record.now(), self.id, ctx.instance_id))
        if self._script is not None:
            played = record.played[ctx.instance_id]
            record.played[ctx.instance_id] += 1
            step = self._script[min(played, len(self._script) - 1)]
            if step.answer in ("429", "503"):
                headers = (
                    {} if step.retry_after is None else {"Retry-After": f"{step.retry_after:g}"}
                )
                request = httpx.Request("GET", "http://provider.invalid/simulated")
                response = httpx.Response(int(step.answer), headers=headers, request=request)
                raise httpx.HTTPStatusError(
                    f"simulated {step.answer}", request=request, response=response
                )
            if step.answer == "fail":
                raise RuntimeError("simulated failure")
            record.satisfied[ctx.instance_id] = step.answer == "done"
        for model in self.puts:
            ctx.put(placeholder(model))
        return None


def _stand_in(
    items: list[Item], scripted: str, record: _Record, script: Sequence[ScriptStep]
) -> None:
    def swap(cap: Any) -> Any:
        if not isinstance(cap, Capability):
            return cap
        return _StandIn(cap, record, script if cap.id == scripted else None)

    for item in items:
        if isinstance(item, StepItem):
            item.capability = swap(item.capability)
            item.compensation = swap(item.compensation)
            _stand_in(item.on_failure or [], scripted, record, script)
        elif isinstance(item, PollItem):
            body_id = getattr(item.body, "id", None)
            item.body = swap(item.body)
            item.compensation = swap(item.compensation)
            if body_id == scripted:
                item.until = lambda bag: record.satisfied.get(bag.instance_id, False)
            else:
                item.until = _always
            _stand_in(item.on_timeout or [], scripted, record, script)
        elif isinstance(item, AwaitItem):
            _stand_in(item.on_timeout or [], scripted, record, script)


def _always(bag: Bag) -> bool:
    return True


def _capabilities(items: list[Item]) -> tuple[list[str], list[str], str | None]:
    """(every capability id, the compensations' ids, the first poll body's id)."""
    ids: list[str] = []
    compensations: list[str] = []
    first_poll: str | None = None
    for item in items:
        if isinstance(item, StepItem | PollItem):
            main = item.capability if isinstance(item, StepItem) else item.body
            if isinstance(main, Capability):
                ids.append(main.id)
                if isinstance(item, PollItem) and first_poll is None:
                    first_poll = main.id
            if item.compensation is not None:
                ids.append(item.compensation.id)
                compensations.append(item.compensation.id)
        nested = (
            item.on_failure
            if isinstance(item, StepItem)
            else item.on_timeout
            if isinstance(item, PollItem | AwaitItem)
            else None
        )
        if nested:
            more, comp, poll = _capabilities(nested)
            ids += more
            compensations += comp
            first_poll = first_poll or poll
    return ids, compensations, first_poll


def _providers(items: list[Item]) -> dict[str, str]:
    """Capability id -> the name of the provider it declares (those that declare one)."""
    found: dict[str, str] = {}
    for item in items:
        caps: list[Any] = []
        nested: list[Item] = []
        if isinstance(item, StepItem):
            caps = [item.capability, item.compensation]
            nested = item.on_failure or []
        elif isinstance(item, PollItem):
            caps = [item.body, item.compensation]
            nested = item.on_timeout or []
        elif isinstance(item, AwaitItem):
            nested = item.on_timeout or []
        for cap in caps:
            provider = getattr(cap, "provider", None)
            if isinstance(cap, Capability) and provider is not None:
                found[cap.id] = provider.name
        found.update(_providers(nested))
    return found


def declared_limit(flow: Flow, scripted: str | None = None) -> tuple[str, float] | None:
    """The provider the scripted capability (default: the first poll's body) declares and
    its declared rate (calls/s), or None when it declares none."""
    _ids, _comps, first_poll = _capabilities(flow.items)
    wanted = scripted or first_poll
    for cap in _originals(flow.items):
        provider = getattr(cap, "provider", None)
        if cap.id == wanted and provider is not None:
            return str(provider.name), float(provider.rate_per_second)
    return None


def _originals(items: list[Item]) -> list[Capability]:
    found: list[Capability] = []
    for item in items:
        if isinstance(item, StepItem | PollItem):
            main = item.capability if isinstance(item, StepItem) else item.body
            found += [c for c in (main, item.compensation) if isinstance(c, Capability)]
            found += _originals(
                (item.on_failure if isinstance(item, StepItem) else item.on_timeout) or []
            )
        elif isinstance(item, AwaitItem):
            found += _originals(item.on_timeout or [])
    return found


class _Watch(Observer):
    def __init__(self, record: _Record) -> None:
        self.record = record

    def poll_ended(self, flow: str, used_ratio: float, how: str) -> None:
        if how == PollEnd.TIMED_OUT:
            self.record.timeouts.append(self.record.now())

    def ended(self, flow: str, version: str, state: str, code: str | None) -> None:
        self.record.ends.append((self.record.now(), state, code or ""))


# -- the load model -------------------------------------------------------------------------


@dataclass(frozen=True)
class Second:
    """One second of the provider's load at the full fleet.

    Attributes:
        at: the second's offset from the fleet's start (seconds).
        demand: calls that fell due in it (scaled).
        served: calls the limit let through in it.
        backlog: calls still deferred at its end.
    """

    at: int
    demand: float
    served: float
    backlog: float


def queue_load(
    demand: Mapping[int, float], limit: float | None, *, until: int | None = None
) -> list[Second]:
    """Apply ``limit`` (calls/s; None: none) to the calls due per second as a deferral
    queue: each second serves up to the limit, the oldest deferred first; the rest waits.

    Args:
        demand: calls due per second offset (seconds without calls may be absent).
        limit: calls per second (> 0), or None.
        until: the offset (s) where the seconds stop even with a backlog left (the last
            one's ``backlog`` is then what remains), or None: until the backlog is empty.
            A fleet far above a low limit drains for years: this bounds the list.

    Returns:
        One :class:`Second` per second from the first call until the backlog is empty
        (or ``until``).
    """
    if not demand:
        return []
    seconds: list[Second] = []
    backlog = 0.0
    at = min(demand)
    last = max(demand)
    while (at <= last or backlog > 1e-9) and (until is None or at < until):
        due = demand.get(at, 0.0)
        waiting = backlog + due
        served = waiting if limit is None else min(limit, waiting)
        backlog = waiting - served
        seconds.append(Second(at, due, served, backlog))
        at += 1
    return seconds


@dataclass(frozen=True)
class Simulation:
    """What :func:`simulate` found.

    Attributes:
        flow / version: the flow simulated.
        instances: the fleet size N.
        sample: instances run through the engine.
        scripted: the capability that played the script.
        provider_capabilities: the capabilities counted as the provider's calls.
        limit: calls per second applied (None: none).
        calls_per_instance: provider calls of each sampled instance.
        calls_by_capability: calls per capability per instance (mean over the sample).
        seconds: the provider's load per second at N instances, the limit applied.
        timeouts: offsets (s) at which a poll's budget ran out, in the sample.
        ends: final (state, code) -> (count in the sample, first offset, last offset).
        compensations: compensation capability -> offsets (s) of its calls in the sample.
    """

    flow: str
    version: str
    instances: int
    sample: int
    scripted: str
    provider_capabilities: tuple[str, ...]
    limit: float | None
    calls_per_instance: list[int]
    calls_by_capability: dict[str, float]
    seconds: list[Second] = field(repr=False)  # up to 7 days of seconds: no repr
    timeouts: list[float]
    ends: dict[tuple[str, str], tuple[int, float, float]]
    compensations: dict[str, list[float]]

    @property
    def scale(self) -> float:
        """Fleet instances each sampled one stands for."""
        return self.instances / self.sample

    @property
    def peak_demand_per_s(self) -> float:
        """The highest calls due in one second, before the limit."""
        return max((s.demand for s in self.seconds), default=0.0)

    @property
    def peak_per_s(self) -> float:
        """The highest calls served in one second, the limit applied."""
        return max((s.served for s in self.seconds), default=0.0)

    @property
    def mean_per_s(self) -> float:
        """Calls per second over the span from the first call to the last one served."""
        return sum(s.served for s in self.seconds) / len(self.seconds) if self.seconds else 0.0

    @property
    def max_delay_s(self) -> float:
        """The longest a deferred call waited (the largest backlog over the limit)."""
        if self.limit is None:
            return 0.0
        return max((s.backlog / self.limit for s in self.seconds), default=0.0)


async def simulate(
    flow: Flow,
    instances: int,
    script: Sequence[ScriptStep],
    *,
    limit: float | None = None,
    sample: int = DEFAULT_SAMPLE,
    scripted: str | None = None,
    provider_capabilities: Sequence[str] | None = None,
    payload: Any = None,
    horizon: timedelta = timedelta(days=7),
) -> Simulation:
    """Run ``min(instances, sample)`` instances of ``flow`` on the engine and scale.

    ``flow``'s capabilities are replaced in place (build a fresh flow for each call).

    Args:
        flow: the flow, as its definition builds it.
        instances: the fleet size N (>= 1).
        script: the scripted provider's timeline (:func:`parse_script`).
        limit: the provider's limit, calls/s (None: none).
        sample: instances run through the engine at most.
        scripted: the capability that plays the script (default: the first poll's body).
        provider_capabilities: the capabilities whose calls count as the provider's
            (default: every capability declaring the scripted one's provider; when it
            declares none, the scripted one and every capability sharing its id's prefix
            before the first dot, e.g. ``ocr.*``).
        payload: each instance's input (default: a placeholder of the flow's input model).
        horizon: virtual time after which the run stops.

    Returns:
        The :class:`Simulation`.

    Raises:
        ValueError: ``instances`` or ``sample`` < 1, no capability to script, an unknown
            ``scripted`` id, or a placeholder input the flow's model refuses (give
            ``payload``).
    """
    if instances < 1 or sample < 1:
        raise ValueError("instances and sample must be at least 1")
    ids, compensations, first_poll = _capabilities(flow.items)
    scripted = scripted or first_poll
    if scripted is None or scripted not in ids:
        raise ValueError(
            f"{flow.name} has no capability {scripted!r} to script"
            if scripted
            else f"{flow.name} has no parked poll: name the capability to script"
        )
    prefix = scripted.split(".", 1)[0] + "."
    declared = _providers(flow.items)
    provider = declared.get(scripted)
    same = (
        {i for i, name in declared.items() if name == provider}
        if provider is not None
        else {i for i in ids if i == scripted or i.startswith(prefix)}
    )
    counted = tuple(provider_capabilities or sorted(same))
    clock = VirtualClock(T0)
    record = _Record(clock)
    _stand_in(flow.items, scripted, record, script)
    catalog = Catalog()
    catalog.register(flow)
    plan = catalog.get(flow.name, flow.version)
    engine = Engine(
        MemoryStore(),
        catalog,
        clock,
        EngineConfig(node_id="simulate"),
        observer=_Watch(record),
    )
    if payload is None:
        payload = placeholder(flow.input_model).model_dump(mode="json", by_alias=True)
    runs = min(instances, sample)
    try:
        for _ in range(runs):
            await engine.start(plan, payload)
        store = engine.store
        end = T0 + horizon
        while (wake := await store.reads.next_wake()) is not None and wake <= end:
            if wake > clock.now():
                clock.set(wake)
            await engine.sweep()
        await engine.drain()
    finally:
        await engine.close()
    return _figures(flow, instances, runs, scripted, counted, limit, record, compensations, horizon)


def _figures(
    flow: Flow,
    instances: int,
    runs: int,
    scripted: str,
    counted: tuple[str, ...],
    limit: float | None,
    record: _Record,
    compensations: list[str],
    horizon: timedelta,
) -> Simulation:
    scale = instances / runs
    per_instance: Counter[str] = Counter()
    by_capability: Counter[str] = Counter()
    demand: defaultdict[int, float] = defaultdict(float)
    comp_calls: dict[str, list[float]] = {c: [] for c in dict.fromkeys(compensations)}
    for at, capability, instance_id in record.calls:
        by_capability[capability] += 1
        if capability in comp_calls:
            comp_calls[capability].append(at)
        if capability in counted:
            per_instance[instance_id] += 1
            demand[math.floor(at)] += scale
    ends: dict[tuple[str, str], tuple[int, float, float]] = {}
    for at, state, code in record.ends:
        count, first, last = ends.get((state, code), (0, at, at))
        ends[(state, code)] = (count + 1, min(first, at), max(last, at))
    calls = sorted(per_instance.values()) + [0] * (runs - len(per_instance))
    return Simulation(
        flow=flow.name,
        version=flow.version,
        instances=instances,
        sample=runs,
        scripted=scripted,
        provider_capabilities=counted,
        limit=limit,
        calls_per_instance=sorted(calls),
        calls_by_capability={k: v / runs for k, v in sorted(by_capability.items())},
        seconds=queue_load(demand, limit, until=math.ceil(horizon.total_seconds())),
        timeouts=sorted(record.timeouts),
        ends=ends,
        compensations={k: v for k, v in comp_calls.items() if v},
    )
