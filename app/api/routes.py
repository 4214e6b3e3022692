"""HTTP routes: flow triggers and their signal routes, instances, reviews, events.

Routes are thin: they authenticate, parse, call the engine or the store's read side, and
shape JSON. Every error leaves as problem+json (see ``app.api.problems``).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse

from app.api.auth import require_token
from app.api.problems import ApiProblem
from app.api.views import (
    API,
    awaiting,
    event_view,
    instance_view,
    review_view,
    signal_view,
)
from app.engine.engine import Engine
from app.engine.journal import InstanceState
from app.errors import InputInvalid
from app.flows.plan import Plan, Profile

__all__ = ["add_trigger_routes", "build_router"]

MAX_KEY = 200
#: Largest sequence a cursor may name (a signed 64-bit column).
MAX_SEQUENCE = 2**63 - 1
#: Deepest JSON nesting a body may have (payloads are stored and serialized again).
MAX_DEPTH = 64


async def _json_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        # ValueError: JSONDecodeError, UnicodeDecodeError, and integers longer than
        # Python's int/str digit limit; RecursionError: absurdly deep nesting
        raise InputInvalid(f"the body is not JSON: {exc}") from None
    if _depth(value) > MAX_DEPTH:
        raise InputInvalid(f"the body nests deeper than {MAX_DEPTH} levels")
    return value


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: any depth is safe to measure)."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _key(value: str | None, *, required: bool) -> str | None:
    if value is None or not value.strip():
        if required:
            raise ApiProblem(400, "idempotency_key_missing",
                             "this route requires an Idempotency-Key header")
        return None
    if len(value) > MAX_KEY:
        raise ApiProblem(400, "idempotency_key_invalid",
                         f"Idempotency-Key is longer than {MAX_KEY} characters")
    return value.strip()


def _engine(request: Request) -> Engine:
    return request.app.state.engine  # type: ignore[no-any-return]


def _start_handler(plan: Plan):  # type: ignore[no-untyped-def]
    async def start(request: Request,
                    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key"),
                    _: str = Depends(require_token)) -> JSONResponse:
        engine = _engine(request)
        key = _key(idempotency_key, required=bool(plan.trigger and plan.trigger.idempotent))
        body = await _json_body(request)
        instance_key = None
        if isinstance(body, dict) and "instanceKey" in body:
            body = dict(body)
            instance_key = body.pop("instanceKey")
            if not isinstance(instance_key, str) or not 0 < len(instance_key) <= MAX_KEY:
                raise InputInvalid("instanceKey must be a non-empty string of at most "
                                   f"{MAX_KEY} characters")
        started = await engine.start(plan, body, idempotency_key=key,
                                     instance_key=instance_key)
        inst = started.instance
        if plan.profile is Profile.EPHEMERAL:
            payload: dict[str, Any] = {"instanceId": inst.id, "status": str(inst.state),
                                       "result": inst.result}
            if inst.failure is not None:
                payload["error"] = {"code": inst.failure.code, "message": inst.failure.message}
            return JSONResponse(payload, status_code=200)
        payload = {"instanceId": inst.id, "status": str(inst.state)}
        if inst.state is InstanceState.COMPLETED:
            payload["result"] = inst.result
        waits = awaiting(plan, inst)
        if waits:
            payload["awaiting"] = waits
        return JSONResponse(payload, status_code=202,
                            headers={"Location": f"{API}/instances/{inst.id}"})

    start.__doc__ = (f"Start `{plan.name}` {plan.version}. Requires a bearer token"
                     + (" and an `Idempotency-Key` header" if plan.trigger
                        and plan.trigger.idempotent else "")
                     + ". Answers 202 with the instance id once it parks or ends.")
    return start


async def _deliver(request: Request, instance_id: str, name: str, key: str | None
                   ) -> JSONResponse:
    engine = _engine(request)
    body = await _json_body(request)
    record, created = await engine.deliver_signal(instance_id, name, body, _key(key,
                                                                                required=False))
    inst = await engine.journal.get_instance(instance_id)
    view = signal_view(record)
    view.update(instanceId=instance_id, created=created, state=str(inst.state))
    return JSONResponse(view, status_code=202)


def add_trigger_routes(app: FastAPI, plans: list[Plan]) -> None:
    """One start route per flow with an HTTP trigger, plus a signal route per declared
    signal at ``{route}/{instanceId}/signals/{name}``."""
    for plan in plans:
        trigger = plan.trigger
        if trigger is None:
            continue
        schema = plan.input_model.model_json_schema(by_alias=True)
        app.add_api_route(
            trigger.route, _start_handler(plan), methods=[trigger.method.upper()],
            tags=["flows"], name=f"start {plan.name}@{plan.version}", status_code=202,
            openapi_extra={"requestBody": {"required": True, "content": {
                "application/json": {"schema": schema}}}},
        )
        for signal in plan.signals.values():
            def make(sig_name: str, flow_name: str):  # type: ignore[no-untyped-def]
                async def deliver(request: Request, instance_id: str,
                                  idempotency_key: str | None = Header(
                                      default=None, alias="Idempotency-Key"),
                                  _: str = Depends(require_token)) -> JSONResponse:
                    return await _deliver(request, instance_id, sig_name, idempotency_key)
                deliver.__doc__ = (f"Deliver the `{sig_name}` signal to an instance of "
                                   f"`{flow_name}`. Stored before anything else happens; "
                                   "idempotent by `Idempotency-Key`.")
                return deliver
            app.add_api_route(
                f"{trigger.route}/{{instance_id}}/signals/{signal.name}",
                make(signal.name, plan.name),
                methods=["POST"], tags=["signals"], status_code=202,
                name=f"signal {signal.name} ({plan.name}@{plan.version})",
                openapi_extra={"requestBody": {"content": {"application/json": {
                    "schema": signal.model.model_json_schema(by_alias=True)}}}},
            )


def build_router() -> APIRouter:
    """The generic ``/api/v1`` routes."""
    router = APIRouter(prefix=API, dependencies=[Depends(require_token)])

    @router.get("/instances/{instance_id}", tags=["instances"])
    async def get_instance(request: Request, instance_id: str) -> JSONResponse:
        """One instance: state, wake (``wakeAt``, ``wakeStepId``, ``wakeScope``), attempts,
        result or error (``code``, ``message``), lease and journal rows."""
        engine = _engine(request)
        snap = await engine.journal.load(instance_id)
        signals = await engine.journal.list_signals(instance_id)  # type: ignore[attr-defined]
        plan = engine.catalog.find(snap.instance.flow_name, snap.instance.flow_version)
        return JSONResponse(instance_view(snap.instance, snap.steps, signals, plan))

    @router.post("/instances/{instance_id}/cancel", tags=["instances"])
    async def cancel_instance(request: Request, instance_id: str) -> JSONResponse:
        """Cancel: compensations of completed steps run once, in reverse order, and the
        instance ends ``cancelled`` (202 while another node finishes the unwind). 409
        ``instance_ended`` when it had already ended."""
        inst = await _engine(request).cancel(instance_id)
        status = 200 if inst.state.ended else 202
        return JSONResponse({"instanceId": inst.id, "state": str(inst.state)},
                            status_code=status)

    @router.post("/instances/{instance_id}/signals/{name}", tags=["signals"],
                 status_code=202)
    async def signal_instance(request: Request, instance_id: str, name: str,
                              idempotency_key: str | None = Header(default=None,
                                                                   alias="Idempotency-Key")
                              ) -> JSONResponse:
        """Deliver signal ``name``: 404 ``instance_not_found`` / ``signal_not_declared``,
        409 ``instance_ended`` (nothing stored), 422 ``input_invalid``."""
        return await _deliver(request, instance_id, name, idempotency_key)

    @router.get("/reviews", tags=["reviews"])
    async def reviews(request: Request, limit: int = Query(100, ge=1, le=1000)
                      ) -> JSONResponse:
        """The human review queue, oldest first."""
        items = await _engine(request).journal.list_reviews(limit)  # type: ignore[attr-defined]
        return JSONResponse([review_view(i) for i in items])

    @router.get("/events", tags=["events"])
    async def events(request: Request, limit: int = Query(100, ge=1, le=1000),
                     after: int | None = Query(None, ge=0, le=MAX_SEQUENCE)) -> JSONResponse:
        """The outbox of emitted events, in commit order (``after``: a sequence)."""
        journal = _engine(request).journal
        items = await journal.list_events(limit, after)  # type: ignore[attr-defined]
        return JSONResponse([event_view(i) for i in items])

    @router.get("/flows", tags=["flows"])
    async def flows(request: Request) -> JSONResponse:
        """Registered flows and versions."""
        return JSONResponse([
            {"name": p.name, "version": p.version, "profile": str(p.profile),
             "route": p.trigger.route if p.trigger else None,
             "signals": sorted(p.signals), "streams": sorted(p.streams),
             "deadlineSeconds": p.deadline.total_seconds() if p.deadline else None}
            for p in _engine(request).catalog.plans()])

    return router

