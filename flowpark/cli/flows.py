"""``flowpark flows list|show``: the flow versions a node runs and their plans."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.tree import Tree

from flowpark.cli._client import (
    DEFAULT_URL,
    AsJson,
    Token,
    Url,
    _api,
    _json,
    out,
    print_table,
    segment,
)

__all__ = ["flows_list", "flows_show"]


def flows_list(url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False) -> None:
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
    for column in ("SERVED", "UNFINISHED", "PROFILE", "ROUTE", "SIGNALS", "PROVIDERS"):
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
            ", ".join(f.get("providers", [])) or "-",
        )
    print_table(table)


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


def _describe(plan: dict[str, Any], step: dict[str, Any]) -> str:
    kind = step["kind"]
    if kind == "capability":
        text = f"step {step['capabilityId']}"
        if step.get("retry"):
            r = step["retry"]
            text += f" (retry: {r.get('maximumTries') or 'unbounded'} tries"
            text += f", from {_seconds(r['initialIntervalSeconds'])})"
        if step.get("compensation"):
            text += f", compensate with {step['compensation']}"
        if step.get("onFailure") is not None:
            text += f", on failure -> {_target(plan, step['onFailure'])}"
        return text
    if kind == "poll":
        interval = step["interval"]
        text = f"poll every {_seconds(interval['initialSeconds'])}"
        if interval["multiplier"] != 1:
            text += f" x{interval['multiplier']:g} up to {_seconds(interval['maximumSeconds'])}"
        if interval.get("jitter"):  # each wait cut by up to this share, at random
            text += f" (jitter {interval['jitter']:.0%})"
        text += f", budget {_seconds(step['timeoutSeconds'])}"
        if step.get("signal"):
            text += f", or signal {step['signal']}"
        text += f"; satisfied -> {_target(plan, step['satisfied'])}"
        text += f"; on timeout -> {_target(plan, step.get('onTimeout'))}"
        return text
    if kind == "await":
        return (
            f"await signal {step['signal']} (timeout {_seconds(step.get('timeoutSeconds'))}); "
            f"on timeout -> {_target(plan, step.get('onTimeout'))}"
        )
    if kind == "fail":
        return f"fail {step['code']}: {step['message']}"
    return f"emit {step['name']}"


def flows_show(
    name: Annotated[str, typer.Argument(metavar="FLOW", help="The flow's name.")],
    version: Annotated[
        str | None, typer.Option("--version", metavar="VERSION", help="Default: the latest.")
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Print a flow's compiled plan as a tree: steps, the poll with its interval and
    budget, signals, on_timeout blocks, fail steps, compensations, and the providers its
    capabilities call."""
    params = {"version": version} if version else None
    with _api(url, token) as api:
        plan = api.call("GET", f"/api/v1/flows/{segment(name)}", params=params)
    if as_json:
        _json(plan)
        return
    deadline = plan.get("deadlineSeconds")
    title = f"[bold]{plan['name']}@{plan['version']}[/bold] ({plan['profile']}"
    title += f", deadline {_seconds(deadline)})" if deadline else ")"
    if plan.get("providers"):
        title += f"; providers: {', '.join(plan['providers'])}"
    tree = Tree(title)
    branches: dict[int, Tree] = {}
    for step in plan["steps"]:
        label = f"[{step['index']}] {_describe(plan, step)}"
        parent_index = step.get("pollIndex")
        if step["kind"] == "capability" and parent_index is not None and parent_index in branches:
            branches[parent_index].add(f"body: {label}", style="cyan")
            continue
        branches[step["index"]] = tree.add(label, style="red" if step["kind"] == "fail" else "")
    out.print(tree)
