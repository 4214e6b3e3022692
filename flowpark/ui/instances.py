"""The console's instance routes: the filtered list, one instance, its live stream messages.

The list reads the operator read model
(:class:`flowpark.engine.ports.operator.OperatorReads`) with the
same filters as ``GET /api/v1/instances``, named in the query string so a filtered list is a
URL to paste. A filter value that cannot be one (an unknown state, a broken cursor) is left
out with a notice, never a 500 or a 422 page.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sse_starlette import EventSourceResponse

from flowpark.api.deps import engine_of, settings_of
from flowpark.api.explain import (
    action_view,
    attempts_view,
    decode_cursor,
    encode_cursor,
    waiting_of,
)
from flowpark.api.inputs import check_instance_id
from flowpark.api.instances import display_fields, summaries
from flowpark.api.streams import SSE_PING_SECONDS, sse_messages
from flowpark.api.values import shown_values
from flowpark.api.views import (
    answer_json,
    awaiting,
    compensation_failures,
    display_value,
    failed_step,
    shown_details,
)
from flowpark.engine.decide.deadlines import POLL_BUDGET, RETRY_TOTAL, SIGNAL_TIMEOUT, open_budget
from flowpark.engine.node.engine import Engine
from flowpark.engine.ports.operator import InstanceFilter
from flowpark.engine.ports.reviews import ReviewFilter
from flowpark.engine.records import (
    COMPENSATION_FAILURES,
    InstanceRecord,
    InstanceState,
    StepRow,
    WakeKind,
)
from flowpark.errors import FlowparkError, StreamNotDeclared, shown
from flowpark.flows.plan import AwaitSignalStep, FailStep, Plan, PollStep
from flowpark.ui.pages import ConsoleRoute, need_session, overdue_threshold, render
from flowpark.ui.paths import ui_root
from flowpark.ui.session import notice_is_signed
from flowpark.ui.timeline import build_timeline, held_by, parse_instant

__all__ = ["PAGE_SIZES", "build_instances_router"]

#: What each stored bound is called on the page.
BUDGET_KINDS = {
    POLL_BUDGET: "poll budget",
    SIGNAL_TIMEOUT: "signal timeout",
    RETRY_TOTAL: "retry window",
}
#: Whether this node can extend a poll's budget (an operator action of the read model).
EXTEND_AVAILABLE = True
#: Page sizes the list offers; the default is the first.
PAGE_SIZES = (50, 25, 100, 200)
#: Largest page the list shows (``?limit=``).
MAX_PAGE = 200
_MAX_TEXT = 200
#: Sort keys of the list's columns: ``created`` / ``-created`` order the whole list (the
#: store's keyset, oldest or newest first); the others sort the rows of the page shown.
SORTS = {
    "created": lambda r: (r["createdAt"], r["instanceId"]),
    "id": lambda r: r["instanceId"],
    "flow": lambda r: (r["flow"], r["version"]),
    "state": lambda r: r["state"],
    "wake": lambda r: (r["wakeAt"] is None, r["wakeAt"] or ""),
}


def _engine(request: Request) -> Engine:
    return engine_of(request)


def _text(value: str | None) -> str | None:
    value = (value or "").strip()
    if not value or len(value) > _MAX_TEXT or any(ord(c) < 32 for c in value):
        return None
    return value


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "on", "yes"}


def parse_filter(request: Request) -> tuple[InstanceFilter, list[str]]:
    """The list's filter from the query string, and a notice per value left out."""
    q = request.query_params
    notices: list[str] = []
    states: list[InstanceState] = []
    for raw in q.getlist("state"):
        if not raw:
            continue
        try:
            states.append(InstanceState(raw))
        except ValueError:
            notices.append(f"state {raw[:40]!r} is not a state: left out")
    waiting = None
    if q.get("waiting"):
        try:
            waiting = WakeKind(q["waiting"])
        except ValueError:
            notices.append(f"waiting {q['waiting'][:40]!r} is not a wait kind: left out")
    where = InstanceFilter(
        flow=_text(q.get("flow")),
        version=_text(q.get("version")),
        states=tuple(dict.fromkeys(states)),
        overdue_seconds=(
            overdue_threshold(request).total_seconds() if _flag(q.get("overdue")) else None
        ),
        stuck=_flag(q.get("stuck")),
        compensation_failed=_flag(q.get("compensation_failed")),
        error_code=_text(q.get("error_code")),
        waiting=waiting,
        instance_key=_text(q.get("instance_key")),
        now=_engine(request).clock.now(),
        display_fields=display_fields(_engine(request).catalog),
        display_value=_text(q.get("key")),
    )
    return where, notices


def _page_size(raw: str | None, notices: list[str]) -> int:
    """The page size ``?limit=`` asks for, 1..MAX_PAGE; else the default, with a notice."""
    if not raw:
        return PAGE_SIZES[0]
    if raw.isdigit() and 1 <= int(raw[:6]) <= MAX_PAGE:
        return int(raw)
    notices.append(
        f"limit {raw[:40]!r} is not a page size of 1 to {MAX_PAGE}: {PAGE_SIZES[0]} shown"
    )
    return PAGE_SIZES[0]


def _url_with(request: Request, **changes: Any) -> str:
    params = [(k, v) for k, v in request.query_params.multi_items() if k not in changes]
    params += [(k, str(v)) for k, v in changes.items() if v is not None]
    return f"{request.url.path}?{urlencode(params)}" if params else request.url.path


def budget_view(inst: InstanceRecord, steps: list[StepRow], now: datetime) -> dict[str, Any] | None:
    """The bound of the wait the instance is in (its stored end instant, from the
    journal): what it bounds, start, end, used and left at ``now``, or None.
    """
    budget = open_budget(inst.state, steps)
    if budget is None:
        return None
    total = max(budget.ends_at - budget.started_at, timedelta(0))
    used = min(max(now - budget.started_at, timedelta(0)), total)
    return {
        "kind": BUDGET_KINDS.get(budget.name, budget.name),
        "started_at": budget.started_at,
        "ends_at": budget.ends_at,
        "used": used,
        "left": total - used,
        "used_ratio": min(1.0, budget.used_ratio(now)),
        "extensions": budget.extensions,
        "warn_at": budget.warn_at,
        "warned": budget.warned,
        "warn_ratio": (
            None
            if budget.warn_at is None or not total
            else max(0.0, min(1.0, (budget.warn_at - budget.started_at) / total))
        ),
    }


def build_instances_router() -> APIRouter:
    """``/ui/instances`` and ``/ui/instances/{id}`` (and its stream events)."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/instances", response_class=HTMLResponse)
    async def instances(request: Request) -> HTMLResponse:
        session = need_session(request)
        engine = _engine(request)
        where, notices = parse_filter(request)
        q = request.query_params
        limit = _page_size(q.get("limit"), notices)
        after = None
        cursor = q.get("cursor") or None
        if cursor:
            try:
                after = decode_cursor(cursor[:400])
            except FlowparkError:
                notices.append("that page link is not one this console gave out: first page")
                cursor = None
        sort = q.get("sort") or "-created"
        if sort.lstrip("-") not in SORTS:
            sort = "-created"
        page = await engine.store.operator.list_instances(
            where, limit=limit, after=after, oldest_first=sort == "created"
        )
        rows = [answer_json(r) for r in await summaries(engine, page.rows)]
        if sort not in ("created", "-created"):  # other columns sort the page shown
            rows.sort(key=SORTS[sort.lstrip("-")], reverse=sort.startswith("-"))
        names = sorted(
            {p.name for p in engine.catalog.plans()} | ({where.flow} if where.flow else set())
        )
        return render(
            request,
            "instances.html",
            {
                "session": session,
                "section": "instances",
                "rows": rows,
                "f": where,
                "notices": notices,
                "flow_names": names,
                "states": [str(s) for s in InstanceState],
                "wake_kinds": [str(k) for k in WakeKind],
                "sort": sort,
                "cursor": cursor,
                "next_cursor": encode_cursor(page.after) if page.after else None,
                "url_with": lambda **changes: _url_with(request, **changes),
                "parse": parse_instant,
            },
        )

    @router.get("/instances/{instance_id}", response_class=HTMLResponse)
    async def instance(request: Request, instance_id: str) -> HTMLResponse:
        session = need_session(request)
        check_instance_id(instance_id)
        engine = _engine(request)
        snap = await engine.store.reads.load(instance_id)
        inst = snap.instance
        signals = await engine.store.reads.list_signals(instance_id)
        plan = engine.catalog.find(inst.flow_name, inst.flow_version)
        now = engine.clock.now()
        suspended = inst.state is InstanceState.SUSPENDED
        waits = waiting_of(plan, inst)
        waiting = answer_json(waits) if waits is not None else None
        attempts = [answer_json(a) for a in attempts_view(plan, inst, snap.steps)]
        next_attempt = waiting.get("attempt") if waiting else None
        reads = engine.store.operator
        history = [answer_json(action_view(a)) for a in await reads.actions_of(instance_id)]
        timeline = build_timeline(
            attempts,
            now,
            inst.wake_at if suspended else None,
            next_attempt,
            actions=history,
            ended_at=inst.updated_at if inst.state.ended else None,
        )
        failed = failed_step(plan, inst, snap.steps)
        failed_at = answer_json(failed) if failed is not None else None
        budget = budget_view(inst, snap.steps, now)
        streams = []
        for name in sorted(plan.streams) if plan is not None else []:
            messages = await engine.store.streams.read_stream(instance_id, name)
            after = messages[-1].sequence if messages else None
            url = f"{ui_root(request)}/instances/{instance_id}/streams/{name}"
            streams.append(
                {
                    "name": name,
                    "messages": messages,
                    "url": url + (f"?after={after}" if after is not None else ""),
                }
            )
        asked = await engine.store.reviews.find_reviews(ReviewFilter(instance_id=inst.id))
        lease = None
        if inst.state is InstanceState.RUNNING and inst.lease_owner is not None:
            lease = {
                "owner": inst.lease_owner,
                "expires_at": inst.lease_expires_at,
                "expired": inst.lease_expires_at is not None and inst.lease_expires_at < now,
            }
        return render(
            request,
            "instance.html",
            {
                "session": session,
                "section": "instances",
                "inst": inst,
                "plan": plan,
                "steps": snap.steps,
                "shown": {
                    (r.step_id, r.scope, str(r.kind), r.try_number): shown_values(plan, r)
                    for r in snap.steps
                },
                "failed_at": failed_at,
                "failure_details": shown_details(inst.failure.details) if inst.failure else {},
                "compensation_failures": [
                    answer_json(c) for c in compensation_failures(snap.steps, plan)
                ],
                "display_key": display_value(plan, inst.input),
                "history": history,
                "action_summary": action_summary,
                "signals": signals,
                "waiting": waiting,
                "awaiting": [answer_json(a) for a in awaiting(plan, inst)],
                "timeline": timeline,
                "budget": budget,
                "streams": streams,
                "lease": lease,
                "reviews": asked,
                "review_at": {r.created_at: r for r in asked},
                "actions": available_actions(plan, inst),
                "budget_outcome": budget_outcome(plan, inst),
                "notices": _signed_notices(request),
                "parse": parse_instant,
                "held_by": held_by,
                "pretty": lambda value, indent=2: json.dumps(
                    value, indent=indent or None, ensure_ascii=False, sort_keys=True
                ),
                "until_text": "",
            },
        )

    @router.get("/instances/{instance_id}/streams/{name}")
    async def stream_events(
        request: Request, instance_id: str, name: str, after: int | None = None
    ) -> EventSourceResponse:
        need_session(request)
        check_instance_id(instance_id)
        engine = _engine(request)
        inst = await engine.store.reads.get_instance(instance_id)
        plan = engine.catalog.find(inst.flow_name, inst.flow_version)
        if plan is None or name not in plan.streams:
            raise StreamNotDeclared(
                f"flow {inst.flow_name}@{inst.flow_version} declares no stream {shown(name)!r}",
                instance_id=instance_id,
                stream=shown(name),
            )
        cursor = after if after is not None and 0 <= after < 2**63 else None
        return EventSourceResponse(
            sse_messages(engine, instance_id, name, cursor), ping=SSE_PING_SECONDS
        )

    return router


def budget_outcome(plan: Plan | None, inst: InstanceRecord) -> str | None:
    """What happens when the budget of the wait the instance is parked at runs out, in one
    sentence (its ``on_timeout`` block's steps, then a failure or the rest of the flow), or
    None when it is parked at no bounded wait."""
    if plan is None or inst.state.ended or inst.wake_step_id is None:
        return None
    if not 0 <= inst.wake_step_id < len(plan.steps):
        return None
    step = plan.steps[inst.wake_step_id]
    if isinstance(step, AwaitSignalStep) and step.timeout is None:
        return None
    if not isinstance(step, PollStep | AwaitSignalStep):
        return None
    if step.timeout_target is None:
        code = (
            "flow.poll_not_satisfied" if isinstance(step, PollStep) else "flow.signal_not_received"
        )
        return f"the instance fails with {code} (no on_timeout block), and compensations run."
    block = plan.steps[step.timeout_target : step.satisfied_target]
    labels = [b.label for b in block if not isinstance(b, FailStep)]
    fail = next((b for b in block if isinstance(b, FailStep)), None)
    ran = (
        f"its on_timeout block runs ({', '.join(labels)})"
        if labels
        else "its on_timeout block runs"
    )
    if fail is not None:
        return f"{ran}, then the instance fails with {fail.code} and compensations run."
    return f"{ran}, then the flow goes on after the wait."


def available_actions(plan: Plan | None, inst: InstanceRecord) -> list[dict[str, str]]:
    """The operator actions that make sense for ``inst`` now (name, button label): on an
    ended instance, only a retry of its compensations that failed for good."""
    if inst.state.ended:
        details = inst.failure.details if inst.failure is not None else {}
        if details.get(COMPENSATION_FAILURES):
            return [{"name": "retry-compensations", "label": "Retry compensations"}]
        return []
    actions = []
    if inst.state is InstanceState.SUSPENDED and inst.wake_kind is not WakeKind.SIGNAL:
        actions.append({"name": "wake", "label": "Wake now"})  # a signal wait has no wake
    step = (
        plan.steps[inst.wake_step_id]
        if plan is not None
        and inst.wake_step_id is not None
        and 0 <= inst.wake_step_id < len(plan.steps)
        else None
    )
    if isinstance(step, PollStep) and EXTEND_AVAILABLE:
        actions.append({"name": "extend", "label": "Extend budget"})
    if (
        inst.state is InstanceState.SUSPENDED
        and isinstance(step, PollStep | AwaitSignalStep)
        and step.signal is not None
    ):
        actions.append({"name": "signal", "label": f"Send {step.signal.name}"})
    actions.append({"name": "cancel", "label": "Cancel"})
    return actions


#: What the history shows of an action's answer, in this order.
_ANSWER_FIELDS = (
    "woken",
    "queued",
    "reason",
    "state",
    "extendedBy",
    "endsAt",
    "cappedByDeadline",
    "wakeAt",
)


def action_summary(action: dict[str, Any]) -> str:
    """One line of what an operator action did, from its recorded answer: the refusal's
    code and detail when it was refused, a note when no outcome was recorded."""
    details = action.get("details") or {}
    if action.get("outcome") == "refused":
        problem = details.get("problem") if isinstance(details, dict) else None
        detail = problem.get("detail") if isinstance(problem, dict) else None
        said = f": {str(detail)[:200]}" if detail else ""
        return f"refused, {action.get('code')}{said}"
    if action.get("outcome") == "pending":
        return "no outcome recorded (in progress, or its request was lost)"
    answer = details.get("answer") if isinstance(details, dict) else None
    if not isinstance(answer, dict):
        return ""
    return ", ".join(
        f"{name}: {_shown_value(answer[name])}"
        for name in _ANSWER_FIELDS
        if answer.get(name) is not None
    )


def _shown_value(value: Any) -> str:
    """A recorded answer's value as a person reads it: ``yes``/``no`` for a boolean,
    JSON for anything else but a string (never Python's ``True`` or ``None``)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _signed_notices(request: Request) -> list[str]:
    """The action's notice of the redirect that led here (``?done=``), when this console
    signed it (``&ds=``); a link that only carries text shows nothing."""
    settings = settings_of(request)
    signature = request.query_params.get("ds")
    return [
        n
        for n in request.query_params.getlist("done")
        if len(n) < 200 and notice_is_signed(settings, n, signature)
    ]
