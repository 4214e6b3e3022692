"""``flowpark nodes``: the node processes, from the liveness rows each writes."""

from __future__ import annotations

from rich.table import Table

from flowpark.cli._client import (
    DEFAULT_URL,
    AsJson,
    Token,
    Url,
    _api,
    _json,
    _short,
    err,
    out,
    print_table,
)

__all__ = ["nodes_list"]


def nodes_list(url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False) -> None:
    """List the node processes seen in the last day (the most recently seen first): role,
    version, whether each is live and sweeps, its last sweep and how many instances that
    sweep claimed. Overdue work with no live sweeping node is said on stderr."""
    with _api(url, token) as api:
        answer = api.call("GET", "/api/v1/nodes")
    if as_json:
        _json(answer)
        return
    table = Table(box=None, header_style="bold")
    table.add_column("NODE", no_wrap=True)
    for column in ("ROLE", "VERSION", "STATE", "LAST SWEEP", "CLAIMED", "SEEN", "FLOWS"):
        table.add_column(column, overflow="fold")
    for n in answer["nodes"]:
        if n["stoppedAt"]:
            state = "stopped"
        elif not n["live"]:
            state = "silent"
        elif n["sweeping"]:
            state = "sweeping"
        else:
            state = "not sweeping" if n["sweeps"] else "live, no sweep"
        table.add_row(
            n["id"],
            n["role"],
            n["version"],
            state,
            _short(n["lastSweepAt"]),
            "-" if n["lastClaimed"] is None else str(n["lastClaimed"]),
            _short(n["seenAt"]),
            ", ".join(n["flows"]),
        )
    print_table(table)
    out.print(f"{answer['live']} live, {answer['sweeping']} sweeping, {answer['overdue']} overdue")
    if answer.get("notice"):
        err.print(f"warning: {answer['notice']}", markup=False)
