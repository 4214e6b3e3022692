"""Operator actions from the console: wake now, extend budget, send signal, cancel, retry
compensations (of an ended instance whose compensations failed for good).

Each action is a confirmation page (``GET /ui/instances/{id}/actions/{name}``) whose form
posts the session's CSRF token back (``POST`` the same URL). Only a token with the
``operate`` scope sees the buttons; any other is refused on both (403), and so is a post
without the session's CSRF token. The action itself is the engine's, as the API's route
calls it (:mod:`flowpark.api.operate`: recorded in the instance's history with the token's name,
idempotent by the form's key); the page then shows the instance again with what happened.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from flowpark.api import actions as api_actions
from flowpark.api.deps import engine_of, settings_of
from flowpark.api.inputs import check_instance_id, check_storable
from flowpark.engine.decide.deadlines import open_budget
from flowpark.engine.node.engine import Engine
from flowpark.engine.records import InstanceRecord
from flowpark.errors import InputInvalid, shown
from flowpark.flows.capability import Signal
from flowpark.flows.plan import AwaitSignalStep, PollStep
from flowpark.ui.pages import ConsoleRoute, need_session, problem_page, render
from flowpark.ui.paths import ui_root
from flowpark.ui.session import Session, check_csrf, notice_signature

__all__ = ["ACTIONS", "Action", "build_actions_router"]


@dataclass(frozen=True)
class Action:
    """One operator action: its URL name, button label and confirmation sentence."""

    name: str
    label: str
    explain: str


ACTIONS = {
    a.name: a
    for a in (
        Action(
            "wake",
            "Wake now",
            "The instance runs its next step or attempt now instead of at its wake instant.",
        ),
        Action(
            "extend",
            "Extend budget",
            "The poll's budget ends later by the chosen amount; attempts go on until then.",
        ),
        Action(
            "signal",
            "Send signal",
            "The signal is delivered as its sender's webhook would deliver it: stored first, "
            "then it ends the wait if the wait's match accepts it (else it is kept, ending "
            "nothing). It is recorded in the instance's history with your token's name.",
        ),
        Action(
            "cancel",
            "Cancel",
            "Compensations of completed steps run once, in reverse order, and the instance "
            "ends cancelled. This cannot be undone.",
        ),
        Action(
            "retry-compensations",
            "Retry compensations",
            "Each compensation that failed for good runs one more try now. The instance ends "
            "again as it was: cleared if every try succeeds, still marked (with the new "
            "error) if one fails. The journal keeps every try.",
        ),
    )
}
#: What the extend form offers (ISO 8601 duration, label).
EXTEND_CHOICES = (
    ("PT15M", "15 minutes"),
    ("PT1H", "1 hour"),
    ("PT4H", "4 hours"),
    ("P1D", "1 day"),
)
#: The durations those choices stand for.
EXTEND_BY = {
    "PT15M": timedelta(minutes=15),
    "PT1H": timedelta(hours=1),
    "PT4H": timedelta(hours=4),
    "P1D": timedelta(days=1),
}


def _engine(request: Request) -> Engine:
    return engine_of(request)


def _refusal(request: Request, session: Session, name: str) -> HTMLResponse | None:
    if name not in ACTIONS:
        return problem_page(
            request, 404, "not_found", "No such action", f"No action {shown(name)!r}."
        )
    if not session.can_operate:
        return problem_page(
            request,
            403,
            "forbidden",
            "Not allowed",
            f"Token {session.principal.name!r} lacks the 'operate' scope.",
        )
    return None


def _key(sent: str) -> str:
    """The action's idempotency key: the one the confirmation form carried (a second post of
    the same form - a double click, a reload - answers the first), or a fresh one.
    """
    sent = sent.strip()
    if sent and len(sent) <= 64 and sent.replace("-", "").replace("_", "").isalnum():
        return f"console-{sent}"
    return f"console-{secrets.token_urlsafe(18)}"


def build_actions_router() -> APIRouter:
    """The confirmation pages and posts of the operator actions."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/instances/{instance_id}/actions/{name}", response_class=HTMLResponse)
    async def confirm(request: Request, instance_id: str, name: str) -> HTMLResponse:
        session = need_session(request)
        refused = _refusal(request, session, name)
        if refused is not None:
            return refused
        check_instance_id(instance_id)
        snap = await _engine(request).store.reads.load(instance_id)
        signal = signal_waited(_engine(request), snap.instance) if name == "signal" else None
        if name == "signal" and signal is None:
            return problem_page(
                request,
                409,
                "no_signal_wait",
                "No signal to send",
                "The instance does not wait for a signal now.",
            )
        return render(
            request,
            "confirm.html",
            {
                "session": session,
                "section": "instances",
                "inst": snap.instance,
                "action": ACTIONS[name],
                "budget": open_budget(snap.instance.state, snap.steps),
                "extend_choices": EXTEND_CHOICES,
                "key": secrets.token_urlsafe(18),
                "signal": signal,
                "fields": signal_fields(signal) if signal is not None else [],
                "errors": [],
                "sent": {},
            },
        )

    @router.post("/instances/{instance_id}/actions/{name}")
    async def perform(
        request: Request,
        instance_id: str,
        name: str,
        csrf: str = Form(""),
        key: str = Form(""),
        extend_by: str = Form(""),
    ) -> Response:
        session = need_session(request)
        refused = _refusal(request, session, name)
        if refused is not None:
            return refused
        if not check_csrf(session, csrf):
            return problem_page(
                request,
                403,
                "csrf_invalid",
                "Refused",
                "The form's CSRF token is not this session's: reload the page and try again.",
            )
        check_instance_id(instance_id)
        if name == "signal":
            form = await request.form()
            sent = await _send_signal(request, session, instance_id, _key(key), form)
            if isinstance(sent, HTMLResponse):
                return sent
            done = sent
        else:
            done = await _act(request, session, name, instance_id, _key(key), extend_by)
        signature = notice_signature(settings_of(request), done)
        target = f"{ui_root(request)}/instances/{instance_id}?done={quote(done)}&ds={signature}"
        return RedirectResponse(target, status_code=303)

    return router


def signal_waited(engine: Engine, inst: InstanceRecord) -> Signal | None:
    """The signal the instance's current wait accepts (a poll's ``or_signal`` or an
    ``await_signal``), or None."""
    plan = engine.catalog.find(inst.flow_name, inst.flow_version)
    if plan is None or inst.state.ended or inst.wake_step_id is None:
        return None
    if not 0 <= inst.wake_step_id < len(plan.steps):
        return None
    step = plan.steps[inst.wake_step_id]
    return step.signal if isinstance(step, PollStep | AwaitSignalStep) else None


def signal_fields(signal: Signal) -> list[dict[str, Any]]:
    """The form's fields from the signal payload's JSON schema: one per top-level property
    (``name``, ``label``, ``input``: ``text``, ``number``, ``integer``, ``checkbox`` or
    ``json``, ``required``, ``description``, ``choices`` for an enum)."""
    schema = signal.model.model_json_schema(by_alias=True)
    required = set(schema.get("required", ()))
    fields = []
    for name, prop in (schema.get("properties") or {}).items():
        kinds = {p.get("type") for p in prop.get("anyOf", [prop])} - {"null", None}
        kind = next(iter(kinds)) if len(kinds) == 1 else None
        choices = prop.get("enum")
        field = {
            "name": name,
            "label": prop.get("title") or name,
            "input": {"string": "text", "number": "number", "integer": "integer"}.get(
                kind or "", "checkbox" if kind == "boolean" else "json"
            ),
            "required": name in required,
            "description": prop.get("description") or "",
            "choices": choices,
            "default": prop.get("default"),
        }
        fields.append(field)
    return fields


def _payload(fields: list[dict[str, Any]], form: Any) -> tuple[dict[str, Any], list[str]]:
    """The payload the form's fields make (each field ``f.<name>``), and what is wrong."""
    payload: dict[str, Any] = {}
    errors: list[str] = []
    for f in fields:
        raw = str(form.get(f"f.{f['name']}", "")).strip()
        if f["input"] == "checkbox":
            payload[f["name"]] = raw == "on"
            continue
        if raw == "":
            if f["required"]:
                errors.append(f"{f['name']}: required")
            continue
        try:
            if f["input"] == "integer":
                payload[f["name"]] = int(raw)
            elif f["input"] == "number":
                payload[f["name"]] = float(raw)
                if not math.isfinite(payload[f["name"]]):
                    raise ValueError("not finite")
            elif f["input"] == "json":
                payload[f["name"]] = json.loads(raw, parse_constant=_no_constant)
            else:
                payload[f["name"]] = raw
        except ValueError:
            errors.append(f"{f['name']}: not a {f['input']} ({raw[:40]!r})")
    return payload, errors


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def _send_signal(
    request: Request, session: Session, instance_id: str, key: str, form: Any
) -> str | HTMLResponse:
    """Validate the form against the signal's model and deliver it as an operator; the
    form again with what is wrong, or the sentence the instance page shows."""
    engine = _engine(request)
    snap = await engine.store.reads.load(instance_id)
    signal = signal_waited(engine, snap.instance)
    if signal is None:
        return problem_page(
            request, 409, "no_signal_wait", "No signal to send", "It waits for no signal now."
        )
    fields = signal_fields(signal)
    payload, errors = _payload(fields, form)
    if not errors:  # what the API's signal route refuses in a body, the form refuses too
        try:
            check_storable(payload)
        except InputInvalid as exc:
            errors = [f"{'.'.join(e['loc'][1:]) or 'payload'}: {e['msg']}" for e in exc.errors]
    if not errors:
        try:
            signal.model.model_validate(payload)
        except ValidationError as exc:
            errors = [
                f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
                for e in exc.errors()[:5]
            ]
    if errors:
        return render(
            request,
            "confirm.html",
            {
                "session": session,
                "section": "instances",
                "inst": snap.instance,
                "action": ACTIONS["signal"],
                "budget": open_budget(snap.instance.state, snap.steps),
                "extend_choices": EXTEND_CHOICES,
                "key": secrets.token_urlsafe(18),
                "signal": signal,
                "fields": fields,
                "errors": errors,
                "sent": {k: str(v) for k, v in form.items()},
            },
            status_code=422,
        )
    _, answer = await api_actions.signal(
        engine, session.principal, instance_id, signal.name, payload, key
    )
    if answer.matched is False:
        return (
            f"Signal {signal.name} sent by {answer.actor}: the wait's match refused it; "
            f"kept, it ended nothing (now {answer.state})."
        )
    return f"Signal {signal.name} sent by {answer.actor}: it is now {answer.state}."


async def _act(
    request: Request, session: Session, name: str, instance_id: str, key: str, extend_by: str
) -> str:
    """Run action ``name`` through the operator API's own service function (recorded in
    the instance's history with the token's name); answers the sentence the instance page
    shows.

    Raises:
        InstanceNotFound: ``instance_not_found``; InstanceEnded: ``instance_ended``;
        InputInvalid: ``input_invalid`` (an extension the form does not offer); the
        extension's refusals (``instance_busy``, ``no_budget``: 409); a retry's
        (``compensation_not_failed``, ``instance_busy``, ``instance_key_in_use``: 409).
    """
    engine, actor = _engine(request), session.principal  # the actor the action is recorded with
    if name == "wake":
        _, woke = await api_actions.wake(engine, actor, instance_id, key)
        if woke.woken:
            return f"Woken by {woke.actor}: it ran and is now {woke.state}."
        return f"Not woken: {woke.reason or 'nothing to do'}."
    if name == "cancel":
        _, cancelled = await api_actions.cancel(engine, actor, instance_id, key)
        return f"Cancel requested by {cancelled.actor}: it is now {cancelled.state}."
    if name == "retry-compensations":
        _, retried = await api_actions.retry(engine, actor, instance_id, key)
        still = retried.still_failed or 0
        outcome = f"{still} still failed" if still else "every one succeeded"
        return f"Compensations retried by {retried.actor}: {outcome} (it is {retried.state})."
    by = EXTEND_BY.get(extend_by)
    if by is None:
        raise InputInvalid(f"extend by {extend_by[:40]!r}: choose one of the offered durations")
    _, extended = await api_actions.extend(engine, actor, instance_id, by, key)
    capped = " (capped by the flow's deadline)" if extended.capped_by_deadline else ""
    ends = extended.model_dump(mode="json", by_alias=True)["endsAt"]
    return f"Budget extended by {extended.actor}: it now ends {ends}{capped}."
