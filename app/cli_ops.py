"""``flowpark instances ...`` and ``flowpark flows list|show``: the operator's CLI.

Every command talks to a running node over its HTTP API (``--url`` / ``FLOWPARK_URL``,
``--token`` / ``FLOWPARK_TOKEN``), never to the database. Tables for people, ``--json``
for scripts (the API's JSON, unchanged). Errors go to stderr as ``error: <code>: <detail>``.

Exit codes (scripts may rely on them):

====  =====================================================================
0     done (``show --watch``: the instance completed)
1     the node answered another error (4xx/5xx), or ``--watch`` saw it fail or be cancelled
2     bad usage (an unknown option, a missing argument, an unreadable value)
3     the node cannot be reached (connection refused, timeout)
4     not found (``instance_not_found``, ``flow_not_found``, ``signal_not_declared``)
5     conflict: the instance ended (``instance_ended``), is busy, or has no budget
6     unauthorized or forbidden (no token, an unknown one, a missing scope)
====  =====================================================================
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.tree import Tree

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_ERROR",
    "EXIT_FORBIDDEN",
    "EXIT_NOT_FOUND",
    "EXIT_UNREACHABLE",
    "add_operator_commands",
    "instances_app",
]

EXIT_ERROR = 1
EXIT_UNREACHABLE = 3
EXIT_NOT_FOUND = 4
EXIT_CONFLICT = 5
EXIT_FORBIDDEN = 6

_ENDED = ("completed", "failed", "cancelled")

instances_app = typer.Typer(
    help="Find, explain and act on instances, over a node's HTTP API.", no_args_is_help=True
)

out = Console(highlight=False)
err = Console(stderr=True, highlight=False)


class State(StrEnum):
    running = "running"
    suspended = "suspended"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"


class Waiting(StrEnum):
    poll = "poll"
    retry = "retry"
    signal = "signal"
    deadline = "deadline"


Url = Annotated[str, typer.Option("--url", envvar="FLOWPARK_URL", help="The node's base URL.")]
Token = Annotated[
    str | None,
    typer.Option("--token", envvar="FLOWPARK_TOKEN", help="Bearer token.", show_default=False),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]
Key = Annotated[str | None, typer.Option("--key", help="Idempotency-Key: a repeat acts no more.")]
DEFAULT_URL = "http://127.0.0.1:8000"


class _Filters:
    """The list's filters as options (the API's query parameters)."""

    def __init__(
        self,
        flow: str | None,
        version: str | None,
        state: list[State] | None,
        overdue: float | None,
        stuck: bool,
        error_code: str | None,
        waiting: Waiting | None,
        instance_key: str | None,
        created_after: str | None,
        created_before: str | None,
    ) -> None:
        self.values: dict[str, Any] = {
            "flow": flow,
            "version": version,
            "state": [s.value for s in state] if state else None,
            "overdue": overdue,
            "stuck": True if stuck else None,
            "errorCode": error_code,
            "waiting": waiting.value if waiting else None,
            "instanceKey": instance_key,
            "createdAfter": created_after,
            "createdBefore": created_before,
        }

    def query(self) -> dict[str, Any]:
        return {k: v for k, v in self.values.items() if v is not None}

    def body(self) -> dict[str, Any]:
        return self.query()

    def any(self) -> bool:
        return bool(self.query())


FlowOpt = Annotated[str | None, typer.Option("--flow", help="Flow name.")]
VersionOpt = Annotated[str | None, typer.Option("--version", help="Flow version.")]
StateOpt = Annotated[
    list[State] | None, typer.Option("--state", help="State (repeat for any of several).")
]
OverdueOpt = Annotated[
    float | None,
    typer.Option("--overdue", help="Suspended with wakeAt more than this many seconds ago."),
]
StuckOpt = Annotated[bool, typer.Option("--stuck", help="Running with an expired lease.")]
ErrorOpt = Annotated[str | None, typer.Option("--error-code", help="Error code.")]
WaitingOpt = Annotated[Waiting | None, typer.Option("--waiting", help="What it waits for.")]
KeyOpt = Annotated[str | None, typer.Option("--instance-key", help="Instance key.")]
AfterOpt = Annotated[
    str | None, typer.Option("--created-after", help="ISO-8601 instant with an offset.")
]
BeforeOpt = Annotated[
    str | None, typer.Option("--created-before", help="ISO-8601 instant with an offset.")
]


class _Api:
    """A node's HTTP API; every error leaves as ``typer.Exit`` with its exit code."""

    def __init__(self, url: str, token: str | None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30.0)
        self.url = url
        self.token = token

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        key: str | None = None,
    ) -> Any:
        headers = {"Idempotency-Key": key} if key else {}
        try:
            resp = self.client.request(method, path, params=params, json=body, headers=headers)
        except httpx.HTTPError as exc:
            err.print(f"error: unreachable: cannot reach {self.url}: {exc}")
            raise typer.Exit(EXIT_UNREACHABLE) from None
        if resp.status_code >= 400:
            raise _refused(resp, tokenless=not self.token)
        return resp.json()


def _refused(resp: httpx.Response, *, tokenless: bool = False) -> typer.Exit:
    try:
        problem = resp.json()
        code, detail = str(problem.get("code")), str(problem.get("detail"))
        detail += _field_errors(problem.get("errors"))
    except ValueError:
        code, detail = f"http_{resp.status_code}", resp.text[:200]
    if resp.status_code == 401 and tokenless:
        detail += " (pass --token or set FLOWPARK_TOKEN)"
    err.print(f"error: {code}: {detail}", markup=False)
    if resp.status_code in (401, 403):
        return typer.Exit(EXIT_FORBIDDEN)
    if resp.status_code == 404:
        return typer.Exit(EXIT_NOT_FOUND)
    if resp.status_code == 409:
        return typer.Exit(EXIT_CONFLICT)
    return typer.Exit(EXIT_ERROR)


def _field_errors(errors: Any) -> str:
    """The first few of a problem's field errors, as ``" (extendBy: Input should be ...)"``:
    which parameter the node refused, and why (empty when the problem lists none)."""
    if not isinstance(errors, list) or not errors:
        return ""
    parts = []
    for error in errors[:3]:
        if not isinstance(error, dict):
            continue
        loc = [str(p) for p in error.get("loc", []) if p not in ("body", "query", "path")]
        parts.append(f"{'.'.join(loc) or 'body'}: {error.get('msg')}")
    return f" ({'; '.join(parts)})" if parts else ""


@contextmanager
def _api(url: str, token: str | None) -> Iterator[_Api]:
    api = _Api(url, token)
    try:
        yield api
    finally:
        api.client.close()


def _json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def _short(instant: str | None) -> str:
    if not instant:
        return "-"
    return instant.replace("T", " ").split(".")[0].rstrip("Z") + "Z"


def _waiting(row: dict[str, Any]) -> str:
    waiting = row.get("waiting")
    if not waiting:
        return "-"
    text = str(waiting["kind"])
    if waiting.get("attempt") is not None:
        text += f" #{waiting['attempt']}"
    if waiting.get("capabilityId"):
        text += f" {waiting['capabilityId']}"
    return text


@instances_app.command("list")
def list_instances(
    url: Url = DEFAULT_URL,
    token: Token = None,
    flow: FlowOpt = None,
    version: VersionOpt = None,
    state: StateOpt = None,
    overdue: OverdueOpt = None,
    stuck: StuckOpt = False,
    error_code: ErrorOpt = None,
    waiting: WaitingOpt = None,
    instance_key: KeyOpt = None,
    created_after: AfterOpt = None,
    created_before: BeforeOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Page size.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="nextCursor of a previous page.")] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow every page.")] = False,
    as_json: AsJson = False,
) -> None:
    """List instances, newest first (the filters of GET /api/v1/instances)."""
    filters = _Filters(
        flow,
        version,
        state,
        overdue,
        stuck,
        error_code,
        waiting,
        instance_key,
        created_after,
        created_before,
    )
    rows: list[dict[str, Any]] = []
    with _api(url, token) as api:
        while True:
            params = {**filters.query(), "limit": limit}
            if cursor:
                params["cursor"] = cursor
            page = api.call("GET", "/api/v1/instances", params=params)
            rows.extend(page["instances"])
            cursor = page["nextCursor"]
            if not all_pages or cursor is None:
                break
    if as_json:
        _json({"instances": rows, "nextCursor": cursor})
        return
    table = Table(box=None, header_style="bold")
    table.add_column("INSTANCE", no_wrap=True)  # whole on one line: it is copied into commands
    for column in ("FLOW", "STATE", "WAITING", "WAKE AT", "BUDGET ENDS", "ERROR"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            r["instanceId"],
            f"{r['flow']}@{r['version']}",
            r["state"],
            _waiting(r),
            _short(r.get("wakeAt")),
            _short(r.get("budgetEndsAt")),
            r.get("errorCode") or "-",
        )
    out.print(table)
    out.print(f"{len(rows)} instance(s)")
    if cursor:
        err.print(f"more: --cursor {cursor}")


@instances_app.command("counts")
def counts(
    url: Url = DEFAULT_URL,
    token: Token = None,
    overdue: Annotated[float, typer.Option(help="Overdue threshold, seconds.")] = 0.0,
    as_json: AsJson = False,
) -> None:
    """Instance counts by flow, version and state, with overdue and stuck totals."""
    with _api(url, token) as api:
        answer = api.call("GET", "/api/v1/instances/counts", params={"overdue": overdue})
    if as_json:
        _json(answer)
        return
    table = Table(box=None, header_style="bold")
    for column in ("FLOW", "VERSION", "STATE", "COUNT"):
        table.add_column(column)
    for c in answer["byState"]:
        table.add_row(c["flow"], c["version"], c["state"], str(c["count"]))
    out.print(table)
    out.print(f"overdue: {answer['overdue']}  stuck: {answer['stuck']}  total: {answer['total']}")


def _print_instance(view: dict[str, Any]) -> None:
    out.print(f"[bold]{view['instanceId']}[/bold]  {view['flow']}@{view['version']}")
    out.print(f"state: [bold]{view['state']}[/bold]  created: {_short(view['createdAt'])}")
    if view.get("error"):
        out.print(f"error: {view['error']['code']}: {view['error']['message']}", markup=False)
    if view.get("waiting"):
        w = view["waiting"]
        out.print(f"waiting: {_waiting(view)}  wake at: {_short(w.get('wakeAt'))}")
    budget = view.get("budget")
    if budget:
        used = budget.get("usedRatio")
        shown = f"{used:.0%}" if isinstance(used, int | float) else "-"
        out.print(
            f"budget: {_short(budget['startedAt'])} -> {_short(budget['endsAt'])} (used {shown})"
        )
    if view.get("result") is not None:
        out.print(f"result: {json.dumps(view['result'])}", markup=False)
    attempts = view.get("attempts") or []
    if attempts:
        table = Table(title="attempts", box=None, header_style="bold")
        for column in ("#", "SCHEDULED", "STARTED", "LATE s", "TOOK s", "OUTCOME", "TRIES"):
            table.add_column(column, overflow="fold")
        for a in attempts:
            tries = "; ".join(
                f"{t['try']}: {t['error']['type']}: {t['error']['detail']}"
                if t.get("error")
                else f"{t['try']}: ok"
                for t in a.get("tries", [])
            )
            table.add_row(
                str(a["attempt"]),
                _short(a.get("scheduledAt")),
                _short(a.get("startedAt")),
                "-" if a.get("latenessSeconds") is None else f"{a['latenessSeconds']:g}",
                f"{a.get('durationSeconds', 0):g}",
                a["outcome"],
                tries or a.get("signal", "-"),
            )
        out.print(table)
    for action in view.get("actions") or []:
        out.print(f"action: {action['action']} by {action['actor']} at {_short(action['actedAt'])}")


@instances_app.command("show")
def show(
    instance_id: Annotated[str, typer.Argument(help="The instance id.")],
    url: Url = DEFAULT_URL,
    token: Token = None,
    watch: Annotated[bool, typer.Option(help="Follow it until it ends.")] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between looks.")] = 2.0,
    as_json: AsJson = False,
) -> None:
    """Explain one instance: state, what it waits for, budget, attempts with every try's
    error, operator actions. With --watch, print each change until it ends (exit 0 when
    it completed, 1 when it failed or was cancelled)."""
    path = f"/api/v1/instances/{instance_id}"
    with _api(url, token) as api:
        view = api.call("GET", path)
        if not watch:
            _json(view) if as_json else _print_instance(view)
            return
        seen: tuple[Any, ...] = ()
        while True:
            now = (view["state"], view.get("wakeScope"), view.get("wakeAt"), len(view["journal"]))
            if now != seen:
                seen = now
                if as_json:
                    typer.echo(json.dumps(view, ensure_ascii=False))
                else:
                    out.print(
                        f"{_short(view['updatedAt'])}  {view['state']}  {_waiting(view)}  "
                        f"wake at {_short(view.get('wakeAt'))}"
                    )
            if view["state"] in _ENDED:
                break
            time.sleep(interval)
            view = api.call("GET", path)
    if not as_json:
        _print_instance(view)
    if view["state"] != "completed":
        raise typer.Exit(EXIT_ERROR)


def _bulk(
    api: _Api, action: str, filters: _Filters, batch: int, dry_run: bool, key: str | None
) -> dict[str, Any]:
    """Run a bulk action batch by batch with a progress bar; returns the totals."""
    body = {"action": action, "filter": filters.body()}
    matched = api.call("POST", "/api/v1/instances/actions", body={**body, "dryRun": True})[
        "matched"
    ]
    totals: dict[str, Any] = {"action": action, "matched": matched, "acted": 0, "skipped": 0}
    if dry_run or matched == 0:
        totals["dryRun"] = dry_run
        return totals
    cursor = None
    with Progress(
        TextColumn(f"{action}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task(action, total=matched)
        while True:
            page = api.call(
                "POST",
                "/api/v1/instances/actions",
                body={**body, "limit": batch, "cursor": cursor},
                key=key,
            )
            totals["acted"] += page["acted"]
            totals["skipped"] += page["skipped"]
            progress.update(task, advance=page["matched"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
    return totals


def _act(
    action: str,
    instance_id: str | None,
    url: str,
    token: str | None,
    filters: _Filters,
    batch: int,
    dry_run: bool,
    key: str | None,
    as_json: bool,
) -> None:
    with _api(url, token) as api:
        if instance_id is not None:
            if filters.any():
                err.print("error: usage: give an instance id or filters, not both")
                raise typer.Exit(2)
            answer = api.call("POST", f"/api/v1/instances/{instance_id}/{action}", key=key)
            if as_json:
                _json(answer)
            elif action == "wake" and not answer.get("woken"):
                out.print(f"{instance_id}: not woken: {answer.get('reason')}", markup=False)
            else:
                out.print(f"{instance_id}: {action} done; state {answer.get('state')}")
            return
        if not filters.any():
            err.print(f"error: usage: {action} needs an instance id or at least one filter")
            raise typer.Exit(2)
        totals = _bulk(api, action, filters, batch, dry_run, key)
    if as_json:
        _json(totals)
    elif dry_run:
        out.print(f"{totals['matched']} instance(s) match; nothing done (--dry-run)")
    else:
        out.print(
            f"{action}: {totals['acted']} acted on, {totals['skipped']} skipped "
            f"of {totals['matched']} matching"
        )


Batch = Annotated[int, typer.Option(min=1, max=1000, help="Instances per bulk request.")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Count the matches; act on none.")]
OptionalId = Annotated[
    str | None, typer.Argument(help="The instance id (or use filters for a bulk action).")
]


@instances_app.command("wake")
def wake(
    instance_id: OptionalId = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    flow: FlowOpt = None,
    version: VersionOpt = None,
    state: StateOpt = None,
    overdue: OverdueOpt = None,
    stuck: StuckOpt = False,
    error_code: ErrorOpt = None,
    waiting: WaitingOpt = None,
    instance_key: KeyOpt = None,
    created_after: AfterOpt = None,
    created_before: BeforeOpt = None,
    batch: Batch = 100,
    dry_run: DryRun = False,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Wake one parked instance now (its next attempt runs at once), or every instance the
    filters select (a progress bar; --dry-run counts them)."""
    filters = _Filters(
        flow,
        version,
        state,
        overdue,
        stuck,
        error_code,
        waiting,
        instance_key,
        created_after,
        created_before,
    )
    _act("wake", instance_id, url, token, filters, batch, dry_run, key, as_json)


@instances_app.command("cancel")
def cancel(
    instance_id: OptionalId = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    flow: FlowOpt = None,
    version: VersionOpt = None,
    state: StateOpt = None,
    overdue: OverdueOpt = None,
    stuck: StuckOpt = False,
    error_code: ErrorOpt = None,
    waiting: WaitingOpt = None,
    instance_key: KeyOpt = None,
    created_after: AfterOpt = None,
    created_before: BeforeOpt = None,
    batch: Batch = 100,
    dry_run: DryRun = False,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Cancel one instance (compensations run), or every instance the filters select."""
    filters = _Filters(
        flow,
        version,
        state,
        overdue,
        stuck,
        error_code,
        waiting,
        instance_key,
        created_after,
        created_before,
    )
    _act("cancel", instance_id, url, token, filters, batch, dry_run, key, as_json)


@instances_app.command("extend")
def extend(
    instance_id: Annotated[str, typer.Argument(help="The instance id.")],
    by: Annotated[str, typer.Option("--by", help="ISO-8601 duration (PT2H) or seconds.")],
    url: Url = DEFAULT_URL,
    token: Token = None,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Extend the budget of the poll the instance is parked at (never past the flow
    deadline)."""
    extend_by: Any = float(by) if by.replace(".", "", 1).isdigit() else by
    with _api(url, token) as api:
        answer = api.call(
            "POST",
            f"/api/v1/instances/{instance_id}/budget",
            body={"extendBy": extend_by},
            key=key,
        )
    if as_json:
        _json(answer)
        return
    capped = " (capped by the flow deadline)" if answer.get("cappedByDeadline") else ""
    out.print(
        f"{instance_id}: budget ends {_short(answer['endsAt'])}, was "
        f"{_short(answer['previousEndsAt'])}{capped}"
    )


@instances_app.command("signal")
def signal(
    instance_id: Annotated[str, typer.Argument(help="The instance id.")],
    name: Annotated[str, typer.Argument(help="The signal's name.")],
    data: Annotated[str, typer.Option("--data", help="The payload as JSON.")] = "{}",
    url: Url = DEFAULT_URL,
    token: Token = None,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Deliver a signal to an instance."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        err.print(f"error: usage: --data is not JSON: {exc}")
        raise typer.Exit(2) from None
    with _api(url, token) as api:
        answer = api.call(
            "POST", f"/api/v1/instances/{instance_id}/signals/{name}", body=payload, key=key
        )
    if as_json:
        _json(answer)
        return
    if answer.get("matched") is False:
        taken = "stored, not matched by the wait (ends nothing)"
    else:
        taken = "taken" if answer.get("takenAt") else "stored"
    out.print(f"{instance_id}: signal {name} {taken}; state {answer.get('state')}")


def _flows_list(url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False) -> None:
    """List the flow versions the node runs, and the versions it does not serve that still
    have unfinished instances (SERVED no)."""
    with _api(url, token) as api:
        flows = api.call("GET", "/api/v1/flows")
    if as_json:
        _json(flows)
        return
    table = Table(box=None, header_style="bold")
    for column in ("FLOW", "VERSION"):
        table.add_column(column, no_wrap=True)  # names are copied into commands: never cut
    for column in ("SERVED", "UNFINISHED", "PROFILE", "ROUTE", "SIGNALS"):
        table.add_column(column, overflow="fold")
    for f in flows:
        table.add_row(
            f["name"],
            f["version"],
            "yes" if f.get("served", True) else "no",
            str(f.get("unfinished", "-")),
            f.get("profile") or "-",
            f.get("route") or "-",
            ", ".join(f.get("signals", [])),
        )
    out.print(table)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    total = int(value)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts) or f"{value:g}s"


def _target(plan: dict[str, Any], index: int | None) -> str:
    if index is None:
        return "-"
    return "end" if index >= plan["end"] else f"[{index}]"


def _describe(plan: dict[str, Any], node: dict[str, Any]) -> str:
    kind = node["kind"]
    if kind == "step":
        text = f"step {node['capabilityId']}"
        if node.get("retry"):
            r = node["retry"]
            text += f" (retry: {r.get('maximumAttempts') or 'unbounded'} tries"
            text += f", from {_seconds(r['initialIntervalSeconds'])})"
        if node.get("compensation"):
            text += f", compensate with {node['compensation']}"
        if node.get("onFailure") is not None:
            text += f", on failure -> {_target(plan, node['onFailure'])}"
        return text
    if kind == "poll":
        interval = node["interval"]
        text = f"poll every {_seconds(interval['initialSeconds'])}"
        if interval["multiplier"] != 1:
            text += f" x{interval['multiplier']:g} up to {_seconds(interval['maximumSeconds'])}"
        text += f", budget {_seconds(node['timeoutSeconds'])}"
        if node.get("signal"):
            text += f", or signal {node['signal']}"
        text += f"; satisfied -> {_target(plan, node['satisfied'])}"
        text += f"; on timeout -> {_target(plan, node.get('onTimeout'))}"
        return text
    if kind == "await":
        return (
            f"await signal {node['signal']} (timeout {_seconds(node.get('timeoutSeconds'))}); "
            f"on timeout -> {_target(plan, node.get('onTimeout'))}"
        )
    if kind == "fail":
        return f"fail {node['code']}: {node['message']}"
    return f"emit {node['name']}"


def _flows_show(
    name: Annotated[str, typer.Argument(help="The flow's name.")],
    version: Annotated[str | None, typer.Option(help="Default: the latest.")] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print a flow's compiled plan as a tree: steps, the poll with its interval and
    budget, signals, on_timeout blocks, fail nodes, compensations."""
    params = {"version": version} if version else None
    with _api(url, token) as api:
        plan = api.call("GET", f"/api/v1/flows/{name}", params=params)
    if as_json:
        _json(plan)
        return
    deadline = plan.get("deadlineSeconds")
    title = f"[bold]{plan['name']}@{plan['version']}[/bold] ({plan['profile']}"
    title += f", deadline {_seconds(deadline)})" if deadline else ")"
    tree = Tree(title)
    branches: dict[int, Tree] = {}
    for node in plan["nodes"]:
        label = f"[{node['index']}] {_describe(plan, node)}"
        parent_index = node.get("pollIndex")
        if node["kind"] == "step" and parent_index is not None and parent_index in branches:
            branches[parent_index].add(f"body: {label}", style="cyan")
            continue
        branches[node["index"]] = tree.add(label, style="red" if node["kind"] == "fail" else "")
    out.print(tree)


def add_operator_commands(app: typer.Typer, flows_app: typer.Typer) -> None:
    """Mount ``instances`` on ``app`` and ``list``/``show`` on the ``flows`` group."""
    app.add_typer(instances_app, name="instances")
    flows_app.command("list")(_flows_list)
    flows_app.command("show")(_flows_show)
