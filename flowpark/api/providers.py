"""Provider routes: the declared providers, their limits and load (``GET /api/v1/providers``,
``GET /api/v1/providers/{name}``) and an operator's live change of a limit (``PUT
/api/v1/providers/{name}/limit``).

A provider's figures come from three reads: its row of the shared limits (the limit, the
effective rate, why it was lowered), its per-minute call tallies, and the parked instances
grouped by the step they wake at (:class:`~flowpark.engine.ports.provider_waits.ProviderWaits`),
which the plans map to the provider each step's capability calls.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, cast

from fastapi import APIRouter, Depends, Path, Request

from flowpark.api.deps import EngineDep, OperateToken, ReadToken
from flowpark.api.inputs import JsonBodyRoute
from flowpark.api.models.providers import (
    LimitChangeBody,
    OldestDeferralView,
    ProviderCalls,
    ProviderDetail,
    ProviderMinuteView,
    ProviderView,
)
from flowpark.api.openapi import problem_responses
from flowpark.api.views import API
from flowpark.engine.execute.budget import declared_state
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports import LimitChange, ProviderMinute, ProviderState
from flowpark.engine.ports.provider_waits import DEFERRAL_KINDS, ProviderWaits, WaitGroup
from flowpark.errors import ErrorCode, InputInvalid, ProviderNotFound
from flowpark.flows.plan import CapabilityStep, Plan, PollStep

__all__ = [
    "ProviderWaitsDep",
    "build_providers_router",
    "provider_minutes",
    "provider_views",
    "provider_waits_of",
]

log = logging.getLogger(__name__)

#: How far back the per-minute tallies of one provider go.
HOUR = timedelta(hours=1)
_MINUTE = timedelta(minutes=1)


def provider_waits_of(request: Request) -> ProviderWaits:
    """What waits on providers (set by the app's lifespan)."""
    return cast(ProviderWaits, request.app.state.provider_waits)


async def _waits(request: Request) -> ProviderWaits:
    return provider_waits_of(request)


#: A provider's name in a path.
ProviderName = Annotated[str, Path(description="The provider's name.", max_length=64)]
#: What waits on providers (the parked instances by wake step).
ProviderWaitsDep = Annotated[ProviderWaits, Depends(_waits)]


def _provider_at(plan: Plan, step_id: int) -> str | None:
    """The provider the step ``step_id`` of ``plan`` calls when it wakes (a poll: its
    body's), or None."""
    if not 0 <= step_id < len(plan.steps):
        return None
    step = plan.steps[step_id]
    if isinstance(step, PollStep):
        step = plan.steps[step.body_index]
    if not isinstance(step, CapabilityStep):
        return None
    for capability in (step.capability, step.compensation):
        provider = getattr(capability, "provider", None)
        if provider is not None:
            return str(provider.name)
    return None


@dataclass
class _Load:
    waiting: int = 0
    deferred: int = 0
    pushed: int = 0
    deferral_groups: list[WaitGroup] = field(default_factory=list)


def _loads(plans: list[Plan], groups: list[WaitGroup]) -> dict[str, _Load]:
    by_key = {(p.name, p.version): p for p in plans}
    loads: defaultdict[str, _Load] = defaultdict(_Load)
    for group in groups:
        plan = by_key.get((group.flow, group.version))
        name = _provider_at(plan, group.step_id) if plan is not None else None
        if name is None:
            continue
        load = loads[name]
        load.waiting += group.count
        if group.wake_kind == DEFERRAL_KINDS[0]:
            load.deferred += group.count
        elif group.wake_kind == DEFERRAL_KINDS[1]:
            load.pushed += group.count
        if group.wake_kind in DEFERRAL_KINDS:
            load.deferral_groups.append(group)
    return loads


def _calls(minute: ProviderMinute | None) -> ProviderCalls:
    if minute is None:
        return ProviderCalls(ok=0, pushback=0, failed=0, deferred=0)
    return ProviderCalls(
        ok=minute.ok, pushback=minute.pushback, failed=minute.failed, deferred=minute.deferred
    )


def provider_minutes(minutes: list[ProviderMinute]) -> list[ProviderMinuteView]:
    """The per-minute tallies as the API shows them."""
    return [ProviderMinuteView(minute=m.minute, **_calls(m).model_dump()) for m in minutes]


async def provider_views(
    engine: Engine, waits: ProviderWaits, *, name: str | None = None
) -> list[tuple[ProviderView, list[ProviderMinute]]]:
    """Every declared provider (or only ``name``) with its figures as of the engine clock's
    now, each with its per-minute tallies over the last hour.

    Raises:
        ProviderNotFound: ``name`` is given and no provider of that name is declared.
        StoreUnavailable: the database could not be reached.
    """
    now = engine.clock.now()
    stored = {s.name: s for s in await engine.store.providers.states(now)}
    for provider in engine.catalog.providers():  # declared here, not yet called: no row
        if provider.name not in stored:
            stored[provider.name] = _declared(engine, provider.name, now)
    states: list[ProviderState] = [
        state for key, state in sorted(stored.items()) if name is None or key == name
    ]
    if name is not None and not states:
        raise ProviderNotFound(f"no provider {name!r} is declared", provider=name)
    plans = engine.catalog.plans()
    flows: defaultdict[str, list[str]] = defaultdict(list)
    for plan in sorted(plans, key=lambda p: p.key):
        for provider in plan.providers:
            flows[provider.name].append(f"{plan.name}@{plan.version}")
    loads = _loads(plans, await waits.wait_groups())
    last_minute = now.replace(second=0, microsecond=0) - _MINUTE
    views = []
    for state in states:
        load = loads.get(state.name, _Load())
        minutes = await engine.store.providers.tallies(state.name, now - HOUR)
        previous = next((m for m in minutes if m.minute == last_minute), None)
        views.append(
            (
                _view(state, flows[state.name], load, previous, await _oldest(waits, load), now),
                minutes,
            )
        )
    return views


def _declared(engine: Engine, name: str, now: datetime) -> ProviderState:
    """The state a node declares for the provider ``name`` its flows call (its
    ``FLOWPARK_PROVIDER_LIMITS`` override applied), as the store will hold it from the first
    call on."""
    provider = next(p for p in engine.catalog.providers() if p.name == name)
    return declared_state(provider, now, engine.config.provider_limits.get(name))


async def _oldest(waits: ProviderWaits, load: _Load) -> OldestDeferralView | None:
    if not load.deferral_groups:
        return None
    group = min(load.deferral_groups, key=lambda g: g.oldest_since)
    found = await waits.oldest(group.flow, group.version, group.step_id, DEFERRAL_KINDS)
    if found is None:  # taken meanwhile
        return None
    return OldestDeferralView(
        instance_id=found.instance_id,
        flow=group.flow,
        version=group.version,
        since=found.since,
        wake_at=found.wake_at,
    )


def _view(
    state: ProviderState,
    flows: list[str],
    load: _Load,
    previous: ProviderMinute | None,
    oldest: OldestDeferralView | None,
    now: datetime,
) -> ProviderView:
    paused = state.paused_until

    return ProviderView(
        name=state.name,
        rate_per_second=state.rate_per_second,
        burst=state.burst,
        max_in_flight=state.max_in_flight,
        floor_ratio=state.floor_ratio,
        effective_rate=state.effective_rate,
        lowered=state.effective_rate < state.rate_per_second,
        lowered_reason=state.lowered_reason,
        paused_until=paused if paused is not None and paused > now else None,
        pushbacks=state.pushbacks,
        updated_at=state.updated_at,
        updated_by=state.updated_by,
        flows=flows,
        last_minute=_calls(previous),
        deferred=load.deferred,
        deferred_by_pushback=load.pushed,
        waiting=load.waiting,
        oldest_deferral=oldest,
    )


async def _change(
    engine: Engine, waits: ProviderWaits, name: str, body: LimitChangeBody, by: str
) -> ProviderView:
    change = LimitChange(
        name=name,
        by=by,
        at=engine.clock.now(),
        rate_per_second=body.rate_per_second,
        burst=body.burst,
        max_in_flight=body.max_in_flight,
    )
    limits = engine.store.providers
    if name not in {s.name for s in await limits.states()} and name in {
        p.name for p in engine.catalog.providers()
    }:  # declared by this node's flows but never called yet: its row first
        await limits.declare([_declared(engine, name, change.at)], change.at)
    try:
        state = await limits.set_limit(change)
    except ValueError as exc:
        raise InputInvalid(str(exc)) from exc
    engine.providers.limit_changed(name)
    log.info(
        "provider %s: limit set to %g calls/s (burst %d, in flight %s) by %s",
        name,
        state.rate_per_second,
        state.burst,
        state.max_in_flight if state.max_in_flight is not None else "uncapped",
        by,
    )
    view, _ = (await provider_views(engine, waits, name=name))[0]
    return view


def build_providers_router() -> APIRouter:
    """``GET /api/v1/providers``, ``GET /api/v1/providers/{name}`` and ``PUT
    /api/v1/providers/{name}/limit``."""
    router = APIRouter(prefix=API, route_class=JsonBodyRoute, tags=["providers"])

    @router.get("/providers", operation_id="list_providers", responses=problem_responses())
    async def list_providers(
        token: ReadToken, engine: EngineDep, waits: ProviderWaitsDep
    ) -> list[ProviderView]:
        """The providers this node's flows declare, and any other the shared limits hold,
        by name (one not called yet shows its declaration): the limit in force
        (`ratePerSecond`, `burst`, `maxInFlight`, who set it and when), the
        `effectiveRate` the nodes hold to now and why it is `lowered`, `pausedUntil` (a
        pushback's Retry-After), `pushbacks` seen, the calls of the last complete minute
        by outcome, the instances `deferred` now (no budget) or parked by a pushback, every
        parked instance `waiting` for it, and the `oldestDeferral`."""
        return [view for view, _ in await provider_views(engine, waits)]

    @router.get(
        "/providers/{name}",
        operation_id="get_provider",
        responses=problem_responses(ErrorCode.PROVIDER_NOT_FOUND),
    )
    async def show_provider(
        token: ReadToken,
        engine: EngineDep,
        waits: ProviderWaitsDep,
        name: ProviderName,
    ) -> ProviderDetail:
        """One provider as the list shows it, with its calls per minute by outcome over
        the last hour (`minutes`). 404 `provider_not_found`."""
        view, minutes = (await provider_views(engine, waits, name=name))[0]
        return ProviderDetail(**view.model_dump(), minutes=provider_minutes(minutes))

    limit_responses: dict[Any, Any] = problem_responses(
        ErrorCode.PROVIDER_NOT_FOUND, ErrorCode.INPUT_INVALID
    )

    @router.put(
        "/providers/{name}/limit", operation_id="set_provider_limit", responses=limit_responses
    )
    async def put_limit(
        token: OperateToken,
        engine: EngineDep,
        waits: ProviderWaitsDep,
        name: ProviderName,
        body: LimitChangeBody,
    ) -> ProviderView:
        """Set a provider's limit live, for every node (`ratePerSecond` required; `burst`
        and `maxInFlight`, 0 removing the cap, replaced when given, kept when left out):
        recorded with the token's name and the instant (`updatedBy`, `updatedAt`); a later
        declaration or setting never replaces it. The new limit takes effect from now (no
        slot the old one placed ahead is kept; every node asks the store again within a
        second). The effective rate becomes the new limit unless a pushback holds it lower.
        404 `provider_not_found`; 422 `input_invalid` for a rate that is not a JSON number
        from 0.001 to 1000000, a burst outside 1 to 1000000. Needs the `operate` scope."""
        return await _change(engine, waits, name, body, token.name)

    return router
