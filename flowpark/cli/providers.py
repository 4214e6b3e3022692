"""``flowpark providers list|show|set``: the declared providers, their limits and load, and an
operator's live change of a limit (``/api/v1/providers``)."""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.table import Table

from flowpark.cli._client import (
    DEFAULT_URL,
    AsJson,
    Token,
    Url,
    _api,
    _json,
    _short,
    out,
    print_table,
    segment,
    usage_error,
)
from flowpark.flows.providers import PROVIDER_NAME

__all__ = ["providers_app"]

providers_app = typer.Typer(
    help="Providers: their shared limits, effective rates and what waits on them. "
    "`flowpark providers` alone lists them, as `flowpark providers list` does.",
    invoke_without_command=True,
)

Name = Annotated[str, typer.Argument(metavar="PROVIDER", help="The provider's name.")]


def _checked(name: str) -> str:
    """``name``, or a usage error (exit 2) when no provider can have it."""
    if not PROVIDER_NAME.fullmatch(name):
        usage_error(
            f"{name[:80]!r} is not a provider's name (1 to 64 of a-z 0-9 _ . -, "
            "starting with a letter or digit)"
        )
    return name


def _rate(value: float) -> str:
    return f"{value:g}/s"


def _effective(p: dict[str, Any]) -> str:
    text = _rate(p["effectiveRate"])
    return text + " (lowered)" if p["lowered"] else text


def _calls(calls: dict[str, Any]) -> str:
    return (
        f"{calls['ok']} ok, {calls['pushback']} pushback, {calls['failed']} failed, "
        f"{calls['deferred']} deferred"
    )


@providers_app.callback()
def providers_group(
    ctx: typer.Context, url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False
) -> None:
    """List the providers when no command is given (``flowpark providers``)."""
    if ctx.invoked_subcommand is None:
        providers_list(url, token, as_json)
        return
    given = [
        f"--{name.replace('as_', '')}"
        for name in ("url", "token", "as_json")
        if getattr(ctx.get_parameter_source(name), "name", None) == "COMMANDLINE"
    ]
    if given:  # the command would not see them: say where they go
        usage_error(
            f"give {', '.join(given)} after the command: flowpark providers "
            f"{ctx.invoked_subcommand} {' '.join(given)} ..."
        )


@providers_app.command("list")
def providers_list(url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False) -> None:
    """List the declared providers: the limit in force, the effective rate (lowered by
    pushback), the last minute's calls, and the instances deferred and waiting now."""
    with _api(url, token) as api:
        providers = api.call("GET", "/api/v1/providers")
    if as_json:
        _json(providers)
        return
    table = Table(box=None, header_style="bold")
    table.add_column("PROVIDER", no_wrap=True)
    for column in ("LIMIT", "BURST", "EFFECTIVE", "LAST MINUTE", "DEFERRED", "WAITING"):
        table.add_column(column, overflow="fold")
    table.add_column("SET BY", overflow="fold")
    for p in providers:
        table.add_row(
            p["name"],
            _rate(p["ratePerSecond"]),
            str(p["burst"]),
            _effective(p),
            _calls(p["lastMinute"]),
            f"{p['deferred']} + {p['deferredByPushback']} by pushback",
            str(p["waiting"]),
            p["updatedBy"] or "-",
        )
    print_table(table)


def _print(p: dict[str, Any]) -> None:
    in_flight = p["maxInFlight"] if p["maxInFlight"] is not None else "no cap"
    rows = [
        ("limit", f"{_rate(p['ratePerSecond'])}, burst {p['burst']}, in flight {in_flight}"),
        ("set by", f"{p['updatedBy'] or '-'} at {_short(p['updatedAt'])}"),
        ("effective rate", _effective(p)),
        ("lowered because", p["loweredReason"] if p["lowered"] else "-"),
        ("paused until", _short(p["pausedUntil"]) if p["pausedUntil"] else "-"),
        ("pushbacks", str(p["pushbacks"])),
        ("last minute", _calls(p["lastMinute"])),
        ("deferred now", f"{p['deferred']} (budget), {p['deferredByPushback']} (pushback)"),
        ("waiting", str(p["waiting"])),
        ("flows", ", ".join(p["flows"]) or "-"),
    ]
    oldest = p.get("oldestDeferral")
    if oldest:
        rows.append(
            (
                "oldest deferral",
                f"{oldest['instanceId']} ({oldest['flow']}@{oldest['version']}) since "
                f"{_short(oldest['since'])}, wakes {_short(oldest['wakeAt'])}",
            )
        )
    table = Table(box=None, show_header=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in rows:
        table.add_row(label, value)
    out.print(f"[bold]{p['name']}[/bold]")
    print_table(table)


@providers_app.command("show")
def providers_show(
    name: Name, url: Url = DEFAULT_URL, token: Token = None, as_json: AsJson = False
) -> None:
    """Show one provider, with its calls per minute by outcome over the last hour."""
    with _api(url, token) as api:
        provider = api.call("GET", f"/api/v1/providers/{segment(_checked(name))}")
    if as_json:
        _json(provider)
        return
    _print(provider)
    minutes = provider.get("minutes") or []
    if minutes:
        table = Table(box=None, header_style="bold")
        for column in ("MINUTE", "OK", "PUSHBACK", "FAILED", "DEFERRED", "CALLS/S"):
            table.add_column(column, justify="right", no_wrap=True)
        for m in minutes[-15:]:
            done = m["ok"] + m["pushback"] + m["failed"]
            table.add_row(
                _short(m["minute"]),
                str(m["ok"]),
                str(m["pushback"]),
                str(m["failed"]),
                str(m["deferred"]),
                f"{done / 60:.1f}",
            )
        out.print("calls per minute (the last 15):")
        print_table(table)


@providers_app.command("set")
def providers_set(
    name: Name,
    rate: Annotated[
        float | None,
        typer.Option("--rate", metavar="CALLS_PER_S", help="Calls per second (> 0)."),
    ] = None,
    burst: Annotated[
        int | None, typer.Option("--burst", metavar="N", help="Calls at once above the rate.")
    ] = None,
    max_in_flight: Annotated[
        int | None,
        typer.Option(
            "--max-in-flight", metavar="N", help="Calls in flight on each node; 0 removes the cap."
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Change a provider's limit live, for every node (needs the operate scope): the fields
    given replace the ones in force, the rest are kept. Recorded with the token's name and
    the instant; a later declaration or setting never replaces it."""
    if rate is None and burst is None and max_in_flight is None:
        usage_error("give --rate, --burst or --max-in-flight")
    _checked(name)
    if rate is not None and not math.isfinite(rate):
        usage_error(f"--rate {rate} is not a number of calls per second")
    body = {
        key: value
        for key, value in (
            ("ratePerSecond", rate),
            ("burst", burst),
            ("maxInFlight", max_in_flight),
        )
        if value is not None
    }
    path = f"/api/v1/providers/{segment(name)}"
    with _api(url, token) as api:
        if rate is None:  # the limit's rate is required: keep the one in force
            body["ratePerSecond"] = api.call("GET", path)["ratePerSecond"]
        provider = api.call("PUT", f"{path}/limit", body=body)
    if as_json:
        _json(provider)
        return
    _print(provider)
