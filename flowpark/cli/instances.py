"""``flowpark instances ...``: list, count, show, wake, cancel, extend, signal instances and
retry their compensations."""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from flowpark.cli._client import (
    _ENDED,
    DEFAULT_URL,
    EXIT_ERROR,
    AsJson,
    Key,
    Token,
    Url,
    _Api,
    _api,
    _Filters,
    _json,
    _short,
    _waiting,
    err,
    out,
    print_table,
    segment,
    shown_id,
    usage_error,
    with_filters,
)
from flowpark.cli.consoles import json_text
from flowpark.cli.times import DURATION_HELP, duration_seconds

__all__ = ["instances_app"]

#: What an instance id argument takes (see ``_Api.resolve``).
_ID_HELP = (
    "The instance id, its start (4 characters or more) or the console's short form "
    "(01a242e6…3058c5), when one id matches."
)

instances_app = typer.Typer(
    help="Find, explain and act on instances, over a node's HTTP API.", no_args_is_help=True
)


@instances_app.command("list")
@with_filters
def list_instances(
    url: Url = DEFAULT_URL,
    token: Token = None,
    *,
    filters: _Filters,
    limit: Annotated[int, typer.Option(min=1, max=1000, metavar="N", help="Page size.")] = 50,
    cursor: Annotated[
        str | None,
        typer.Option("--cursor", metavar="CURSOR", help="nextCursor of a previous page."),
    ] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="Follow every page.")] = False,
    as_json: AsJson = False,
) -> None:
    """List instances, newest first (the filters of GET /api/v1/instances)."""
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
    table.add_column("KEY", overflow="fold")  # the instanceKey a start gave
    for column in ("DISPLAY", "FLOW", "STATE", "WAITING", "WAKE AT", "BUDGET ENDS", "ERROR"):
        table.add_column(column, overflow="fold")
    for r in rows:
        table.add_row(
            shown_id(r["instanceId"]),
            Text(r.get("instanceKey") or "-"),
            Text(r.get("displayKey") or "-"),
            f"{r['flow']}@{r['version']}",
            r["state"],
            _waiting(r),
            _short(r.get("wakeAt")),
            _short(r.get("budgetEndsAt")),
            r.get("errorCode") or "-",
        )
    print_table(table)
    out.print(f"{len(rows)} instance(s)")
    if cursor:
        err.print(f"more: --cursor {cursor}")


@instances_app.command("counts")
def counts(
    url: Url = DEFAULT_URL,
    token: Token = None,
    overdue: Annotated[
        str,
        typer.Option(
            metavar="DURATION",
            help=f"Count as overdue what is suspended past its wake by more: {DURATION_HELP}.",
        ),
    ] = "0",
    as_json: AsJson = False,
) -> None:
    """Instance counts by flow, version and state, with overdue and stuck totals."""
    seconds = duration_seconds(overdue, "--overdue")
    with _api(url, token) as api:
        answer = api.call("GET", "/api/v1/instances/counts", params={"overdue": seconds})
    if as_json:
        _json(answer)
        return
    table = Table(box=None, header_style="bold")
    for column in ("FLOW", "VERSION", "STATE", "COUNT"):
        table.add_column(column)
    for c in answer["byState"]:
        table.add_row(c["flow"], c["version"], c["state"], str(c["count"]))
    print_table(table)
    out.print(f"overdue: {answer['overdue']}  stuck: {answer['stuck']}  total: {answer['total']}")


def _lateness(seconds: float | None) -> str:
    """An attempt's lateness as the attempts table shows it: ``-`` when unknown, ``<n>
    early`` for an attempt started before it was due (an operator's wake), else ``<n>``."""
    if seconds is None:
        return "-"
    return f"{-seconds:g} early" if seconds < 0 else f"{seconds:g}"


def _deferred(attempt: dict[str, Any]) -> str:
    """How long the attempt's provider deferred it and why (``13 (ocr limit)``), or ``-``."""
    held = attempt.get("deferredSeconds")
    if held is None:
        return "-"
    why = "pushback" if attempt.get("deferredBy") == "pushback" else "limit"
    return f"{held:g} ({attempt.get('provider') or 'provider'} {why})"


def _print_instance(view: dict[str, Any]) -> None:
    out.print(f"[bold]{view['instanceId']}[/bold]  {view['flow']}@{view['version']}")
    out.print(f"state: [bold]{view['state']}[/bold]  created: {_short(view['createdAt'])}")
    if view.get("error"):
        out.print(f"error: {view['error']['code']}: {view['error']['message']}", markup=False)
        step = view["error"].get("step")
        if step:
            out.print(f"failed at: step {step['stepId']} ({step['label']})", markup=False)
    for c in view.get("compensationFailures") or []:
        undone = (c.get("step") or {}).get("label") or "-"
        error = c.get("error") or {}
        out.print(
            f"compensation failed: {c['capabilityId']} undoing step {c['stepId']} ({undone}) "
            f"after {c['tries']} tries: {error.get('code')}: {error.get('message')}",
            markup=False,
        )
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
        columns = ("#", "SCHEDULED", "DEFERRED s", "STARTED", "LATE s", "TOOK s", "OUTCOME")
        for column in (*columns, "TRIES"):
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
                _deferred(a),
                _short(a.get("startedAt")),
                _lateness(a.get("latenessSeconds")),
                f"{a.get('durationSeconds', 0):g}",
                a["outcome"],
                tries or a.get("signal", "-"),
            )
        print_table(table)
    journal = view.get("journal") or []
    if journal:
        failed = (view.get("error") or {}).get("step") or {}
        table = Table(title="journal", box=None, header_style="bold")
        for column in ("#", "STEP", "ATTEMPT", "KIND", "WHAT", "TRY", "OUTCOME", "COMMITTED"):
            table.add_column(column, overflow="fold")
        table.add_column("PUT", overflow="fold")
        for r in journal:
            put = " ".join(
                f"{k}={json.dumps(v, ensure_ascii=False, sort_keys=True)}"
                for k, v in (r.get("values") or {}).items()
            )
            if r.get("errorType"):
                put = f"{r['errorType']}: {r.get('errorDetail')}"
            mark = " <- failed here" if r["stepId"] == failed.get("stepId") else ""
            table.add_row(
                str(r["sequence"]),
                str(r["stepId"]),
                str(r["scope"]),
                r["kind"],
                str(r.get("capabilityId") or "-"),
                str(r["try"]),
                r["outcome"] + mark,
                _short(r.get("committedAt")),
                Text(put or "-"),  # values are data, never rich markup
            )
        print_table(table)
    for action in view.get("actions") or []:
        fate = {
            "refused": f", refused: {action.get('code')}",
            "pending": ", no outcome recorded",
        }.get(str(action.get("outcome")), "")
        out.print(
            Text(
                f"action: {action['action']} by {action['actor']} at "
                f"{_short(action['actedAt'])}{fate}"
            )
        )


@instances_app.command("show")
def show(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    url: Url = DEFAULT_URL,
    token: Token = None,
    watch: Annotated[bool, typer.Option(help="Follow it until it ends.")] = False,
    interval: Annotated[
        float, typer.Option(min=0.1, metavar="SECONDS", help="Seconds between looks.")
    ] = 2.0,
    as_json: AsJson = False,
) -> None:
    """Explain one instance: state, what it waits for, budget, attempts with every try's
    error, operator actions. With --watch, print each change until it ends (exit 0 when
    it completed, 1 when it failed or was cancelled)."""
    with _api(url, token) as api:
        instance_id = api.resolve(instance_id)
    path = f"/api/v1/instances/{segment(instance_id)}"
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
                    typer.echo(json_text(view, indent=None))
                else:
                    out.print(
                        f"{_short(view['updatedAt'])}  {view['state']}  {_waiting(view)}  "
                        f"wake at {_short(view.get('wakeAt'))}",
                        soft_wrap=True,
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
    api: _Api,
    action: str,
    filters: _Filters,
    every: bool,
    batch: int,
    dry_run: bool,
    key: str | None,
    yes: bool = False,
) -> dict[str, Any]:
    """Run a bulk action batch by batch with a progress bar; returns the totals. ``every``
    sends ``"all": true`` (the node refuses an empty filter without it). A bulk cancel on
    a terminal asks first, unless ``yes``."""
    body: dict[str, Any] = {"action": action, "filter": filters.body()}
    if every:
        body["all"] = True
    counted = api.call("POST", "/api/v1/instances/actions", body={**body, "dryRun": True})
    matched = counted["matched"]
    actionable = counted.get("actionable", matched)
    totals: dict[str, Any] = {
        "action": action,
        "matched": matched,
        "actionable": actionable,
        "acted": 0,
        "skipped": 0,
    }
    if dry_run or actionable == 0:
        totals["dryRun"] = dry_run
        return totals
    # once acting, "matched" counts what the batches matched: each acted on or skipped
    # (the dry run's count is kept as "counted"; instances move between the two reads)
    totals["counted"], totals["matched"] = matched, 0
    asks = action == "cancel" and not yes and _interactive()
    if asks and not typer.confirm(
        f"Cancel {actionable} instance(s)? Their compensations run; this cannot be undone",
        default=False,
        err=True,
    ):
        err.print("aborted: nothing cancelled")
        raise typer.Exit(EXIT_ERROR)
    cursor = None
    with Progress(
        TextColumn(f"{action}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        transient=True,
    ) as progress:
        task = progress.add_task(action, total=actionable)
        while True:
            page = api.call(
                "POST",
                "/api/v1/instances/actions",
                body={**body, "limit": batch, "cursor": cursor},
                key=key,
            )
            totals["matched"] += page["matched"]
            totals["acted"] += page["acted"]
            totals["skipped"] += page["skipped"]
            if page.get("queued"):  # wakes recorded: the sweep runs them
                totals["queued"] = True
            progress.update(task, advance=page["acted"])
            cursor = page["nextCursor"]
            if cursor is None:
                break
    return totals


def _interactive() -> bool:
    """Whether a person can answer a question: stdin and stderr are terminals."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _act(
    action: str,
    instance_id: str | None,
    url: str,
    token: str | None,
    filters: _Filters,
    every: bool,
    batch: int,
    dry_run: bool,
    key: str | None,
    as_json: bool,
    yes: bool = False,
) -> None:
    with _api(url, token) as api:
        if instance_id is not None:
            instance_id = api.resolve(instance_id)
            if filters.any() or every:
                usage_error("give an instance id, or filters or --all, not both")
            answer = api.call("POST", f"/api/v1/instances/{segment(instance_id)}/{action}", key=key)
            if as_json:
                _json(answer)
            elif action == "wake" and not answer.get("woken"):
                out.print(
                    f"{instance_id}: not woken: {answer.get('reason')}",
                    markup=False,
                    soft_wrap=True,
                )
            elif action == "cancel" and answer.get("state") not in _ENDED:
                out.print(
                    f"{instance_id}: cancel requested; it takes effect when the call in flight "
                    f"ends (its compensations then run; state now {answer.get('state')})",
                    soft_wrap=True,
                )
            else:
                out.print(
                    f"{instance_id}: {action} done; state {answer.get('state')}", soft_wrap=True
                )
            return
        if not filters.any() and not every:
            usage_error(
                f"{action} needs an instance id, at least one filter, or --all to act on "
                "every instance"
            )
        totals = _bulk(api, action, filters, every, batch, dry_run, key, yes)
    if as_json:
        _json(totals)
    elif dry_run:
        verb = "woken" if action == "wake" else "cancelled"
        out.print(
            f"{totals['actionable']} instance(s) would be {verb} "
            f"({totals['matched']} match the filter); nothing done (--dry-run)"
        )
    else:
        left = totals.get("counted", totals["matched"]) - totals["actionable"]
        queued = totals.get("queued") and totals["acted"]
        out.print(
            f"{action}: {totals['acted']} acted on, {totals['skipped']} skipped "
            f"of {totals['matched']} matching"
            + (f"; {left} in a state {action} does not act on" if left > 0 else "")
            + (
                "; the wakes are recorded: the sweep runs them at each provider's pace"
                if queued
                else ""
            )
        )


Batch = Annotated[
    int, typer.Option(min=1, max=1000, metavar="N", help="Instances per bulk request.")
]
DryRun = Annotated[bool, typer.Option("--dry-run", help="Count the matches; act on none.")]
Every = Annotated[
    bool,
    typer.Option("--all", help="Act on every instance (required when no filter is given)."),
]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help="Do not ask before a bulk cancel on a terminal.")
]
OptionalId = Annotated[
    str | None, typer.Argument(metavar="ID", help=f"{_ID_HELP} Or use filters for a bulk action.")
]


@instances_app.command("wake")
@with_filters
def wake(
    instance_id: OptionalId = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    *,
    filters: _Filters,
    every: Every = False,
    batch: Batch = 100,
    dry_run: DryRun = False,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Wake one parked instance now (its next attempt runs at once), or every instance the
    filters select (a progress bar; --dry-run counts them): their wakes are recorded at once
    and the sweep runs them at each provider's pace; --all, and no filter, selects every
    instance."""
    _act("wake", instance_id, url, token, filters, every, batch, dry_run, key, as_json)


@instances_app.command("cancel")
@with_filters
def cancel(
    instance_id: OptionalId = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    *,
    filters: _Filters,
    every: Every = False,
    batch: Batch = 100,
    dry_run: DryRun = False,
    key: Key = None,
    yes: Yes = False,
    as_json: AsJson = False,
) -> None:
    """Cancel one instance (compensations run), or every instance the filters select
    (--all, and no filter: every instance)."""
    _act("cancel", instance_id, url, token, filters, every, batch, dry_run, key, as_json, yes)


@instances_app.command("extend")
def extend(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    by: Annotated[
        str, typer.Option("--by", metavar="DURATION", help=f"How much later: {DURATION_HELP}.")
    ],
    url: Url = DEFAULT_URL,
    token: Token = None,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Extend the budget of the poll the instance is parked at (never past the flow
    deadline)."""
    extend_by: Any = duration_seconds(by, "--by", positive=True)
    with _api(url, token) as api:
        instance_id = api.resolve(instance_id)
        answer = api.call(
            "POST",
            f"/api/v1/instances/{segment(instance_id)}/budget",
            body={"extendBy": extend_by},
            key=key,
        )
    if as_json:
        _json(answer)
        return
    capped = " (capped by the flow deadline)" if answer.get("cappedByDeadline") else ""
    out.print(
        f"{instance_id}: budget ends {_short(answer['endsAt'])}, was "
        f"{_short(answer['previousEndsAt'])}{capped}",
        soft_wrap=True,
    )


@instances_app.command("retry-compensations")
def retry_compensations(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    url: Url = DEFAULT_URL,
    token: Token = None,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Retry the compensations of an ended instance that failed for good: each runs one
    more try now, and the instance ends again in its state (exit 0 when every one
    succeeded, 1 when one failed again: it stays marked)."""
    with _api(url, token) as api:
        instance_id = api.resolve(instance_id)
        answer = api.call(
            "POST", f"/api/v1/instances/{segment(instance_id)}/compensations/retry", key=key
        )
    if as_json:
        _json(answer)
    else:
        for c in answer.get("retried") or []:
            undone = (c.get("step") or {}).get("label")
            out.print(
                f"{instance_id}: retried {c['capabilityId']} undoing step {c['stepId']}"
                + (f" ({undone})" if undone else ""),
                markup=False,
                soft_wrap=True,
            )
        still = answer.get("stillFailed") or 0
        out.print(
            f"{instance_id}: {answer.get('state')}, "
            + (f"{still} compensation(s) still failed" if still else "no compensation failed"),
            markup=False,
            soft_wrap=True,
        )
    if answer.get("stillFailed"):
        raise typer.Exit(EXIT_ERROR)


@instances_app.command("signal")
def signal(
    instance_id: Annotated[str, typer.Argument(metavar="ID", help=_ID_HELP)],
    name: Annotated[str, typer.Argument(metavar="SIGNAL", help="The signal's name.")],
    data: Annotated[
        str, typer.Option("--data", metavar="JSON", help="The payload as JSON.")
    ] = "{}",
    url: Url = DEFAULT_URL,
    token: Token = None,
    key: Key = None,
    as_json: AsJson = False,
) -> None:
    """Deliver a signal to an instance."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        usage_error(f"--data is not JSON: {exc}")
    with _api(url, token) as api:
        instance_id = api.resolve(instance_id)
        answer = api.call(
            "POST",
            f"/api/v1/instances/{segment(instance_id)}/signals/{segment(name)}",
            body=payload,
            key=key,
        )
    if as_json:
        _json(answer)
        return
    if answer.get("matched") is False:
        taken = "stored, not matched by the wait (ends nothing)"
    else:
        taken = "taken" if answer.get("takenAt") else "stored"
    out.print(f"{instance_id}: signal {name} {taken}; state {answer.get('state')}", soft_wrap=True)
