"""``flowpark flows simulate``: a flow's load on its provider at N instances, before deploying.

It loads the flow definitions as ``flows check`` does (no node, no database) and runs the
production plan on the virtual clock (:mod:`flowpark.simulate`).
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Annotated, Any

import typer
from rich.table import Table

from flowpark.cli._client import out, print_table, usage_error

FlowsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--flows",
        metavar="TARGET",
        help="Flows to load, as serve's --flows (default: FLOWPARK_FLOWS, else the samples).",
    ),
]

__all__ = ["flows_simulate"]

_ROWS = 12


def _duration(seconds: float) -> str:
    total = round(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "+" + ("".join(parts) or "0s")


def _windows(sim: Any, rows: int = _ROWS) -> list[dict[str, Any]]:
    """The load over time in at most ``rows`` windows: mean and peak calls/s due and served."""
    seconds = sim.seconds
    if not seconds:
        return []
    width = max(1, -(-len(seconds) // rows))
    windows = []
    for i in range(0, len(seconds), width):
        part = seconds[i : i + width]
        windows.append(
            {
                "fromS": part[0].at,
                "toS": part[-1].at + 1,
                "meanDemandPerS": sum(s.demand for s in part) / len(part),
                "peakDemandPerS": max(s.demand for s in part),
                "meanPerS": sum(s.served for s in part) / len(part),
                "peakPerS": max(s.served for s in part),
                "backlogAtEnd": part[-1].backlog,
            }
        )
    return windows


def _as_json(sim: Any) -> dict[str, Any]:
    calls = sim.calls_per_instance
    return {
        "flow": sim.flow,
        "version": sim.version,
        "instances": sim.instances,
        "sampled": sim.sample,
        "scale": sim.scale,
        "scripted": sim.scripted,
        "providerCapabilities": list(sim.provider_capabilities),
        "limitPerS": sim.limit,
        "callsPerInstance": {
            "min": calls[0],
            "mean": sum(calls) / len(calls),
            "max": calls[-1],
        },
        "callsByCapability": sim.calls_by_capability,
        "peakDemandPerS": sim.peak_demand_per_s,
        "peakPerS": sim.peak_per_s,
        "meanPerS": sim.mean_per_s,
        "maxDeferralS": sim.max_delay_s,
        "spanS": len(sim.seconds),
        "windows": _windows(sim, 60),
        "budgetsFired": {
            "count": round(len(sim.timeouts) * sim.scale),
            "firstS": sim.timeouts[0] if sim.timeouts else None,
            "lastS": sim.timeouts[-1] if sim.timeouts else None,
        },
        "ends": [
            {"state": state, "code": code or None, "count": round(n * sim.scale), "firstS": a}
            | {"lastS": b}
            for (state, code), (n, a, b) in sorted(sim.ends.items())
        ],
        "compensations": {
            cap: {"count": round(len(at) * sim.scale), "firstS": at[0], "lastS": at[-1]}
            for cap, at in sim.compensations.items()
        },
    }


def _print(sim: Any) -> None:
    figures = _as_json(sim)
    calls = figures["callsPerInstance"]
    limit = "none" if sim.limit is None else f"{sim.limit:g} calls/s"
    out.print(
        f"[bold]{sim.flow}@{sim.version}[/bold] at {sim.instances:,} instances "
        f"({sim.sample} run through the engine, each standing for {sim.scale:,.4g}); "
        f"{sim.scripted} plays the script; limit {limit}"
    )
    out.print(
        f"provider calls per instance ({', '.join(sim.provider_capabilities)}): "
        f"min {calls['min']}, mean {calls['mean']:.4g}, max {calls['max']}"
    )
    out.print(
        f"provider calls/s: peak {sim.peak_per_s:,.1f} (due {sim.peak_demand_per_s:,.1f} before "
        f"the limit), mean {sim.mean_per_s:,.1f} over {_duration(len(sim.seconds))[1:]}; "
        f"longest deferral {sim.max_delay_s:,.0f} s"
    )
    table = Table(box=None, header_style="bold")
    for column in ("FROM", "TO", "DUE/S MEAN", "DUE/S PEAK", "CALLS/S MEAN", "PEAK", "BACKLOG"):
        table.add_column(column, justify="right", no_wrap=True)
    for w in _windows(sim):
        table.add_row(
            _duration(w["fromS"]),
            _duration(w["toS"]),
            f"{w['meanDemandPerS']:,.1f}",
            f"{w['peakDemandPerS']:,.1f}",
            f"{w['meanPerS']:,.1f}",
            f"{w['peakPerS']:,.1f}",
            f"{w['backlogAtEnd']:,.0f}",
        )
    print_table(table)
    fired = figures["budgetsFired"]
    if fired["count"]:
        out.print(
            f"poll budgets ran out for {fired['count']:,} instances, "
            f"{_duration(fired['firstS'])} to {_duration(fired['lastS'])}"
        )
    else:
        out.print("no poll budget ran out")
    for end in figures["ends"]:
        what = end["state"] + (f" ({end['code']})" if end["code"] else "")
        out.print(
            f"{end['count']:,} instances {what}, "
            f"{_duration(end['firstS'])} to {_duration(end['lastS'])}"
        )
    for cap, comp in figures["compensations"].items():
        out.print(
            f"compensation {cap} ran {comp['count']:,} times, "
            f"{_duration(comp['firstS'])} to {_duration(comp['lastS'])}"
        )
    if not figures["compensations"]:
        out.print("no compensation ran")
    if sim.max_delay_s >= 1:
        out.print(
            f"[yellow]At this limit calls wait up to {_duration(sim.max_delay_s)[1:]}: the "
            "ends, budgets and compensations above are the run's without the limit; with it "
            "they come later, and budgets or deadlines shorter than the wait run out "
            "(the engine defers a call, never past its deadline).[/yellow]"
        )
    left = sim.seconds[-1].backlog if sim.seconds else 0.0
    if left > 1e-9:
        out.print(
            f"[yellow]{left:,.0f} calls are still deferred where the figures stop, "
            f"{_duration(len(sim.seconds))[1:]} after the first call: the limit is far "
            "below what this fleet asks.[/yellow]"
        )
    out.print(
        f"[dim]The calls per second are the sample's scaled by {sim.scale:,.4g}, the limit "
        "applied as a deferral queue (a deferred call does not move its instance's later "
        "wakes here, as the engine's deferral does).[/dim]"
    )


def flows_simulate(
    name: Annotated[str, typer.Argument(metavar="FLOW", help="The flow's name.")],
    instances: Annotated[
        int, typer.Option("--instances", min=1, metavar="N", help="Instances started at once.")
    ] = 1000,
    script: Annotated[
        str,
        typer.Option(
            "--script",
            metavar="ANSWERS",
            help="The provider's answers to each instance, in order (the last repeats): "
            "pending, done, fail, 429[:SECONDS], 503[:SECONDS], each optionally *COUNT.",
        ),
    ] = "pending*5,done",
    limit: Annotated[
        float | None,
        typer.Option(
            "--limit",
            min=0.001,
            metavar="CALLS_PER_S",
            help="The provider's limit (default: the scripted capability's provider's, "
            "FLOWPARK_PROVIDER_LIMITS applied).",
        ),
    ] = None,
    no_limit: Annotated[
        bool, typer.Option("--no-limit", help="Apply no limit (the herd without one).")
    ] = False,
    sample: Annotated[
        int,
        typer.Option(
            "--sample", min=1, metavar="K", help="Instances run through the engine at most."
        ),
    ] = 200,
    capability: Annotated[
        str | None,
        typer.Option(
            "--capability",
            metavar="ID",
            help="The capability that plays the script (default: the first poll's body).",
        ),
    ] = None,
    payload: Annotated[
        str | None,
        typer.Option(
            "--input", metavar="JSON", help="Each instance's input (default: a placeholder)."
        ),
    ] = None,
    version: Annotated[
        str | None, typer.Option("--version", metavar="VERSION", help="Default: the latest.")
    ] = None,
    flows: FlowsOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Simulate FLOW at N instances against a scripted provider, on the virtual clock.

    The flow's production plan runs on the engine (the in-memory store, no real waits): its
    poll schedules with their jitter, retry policies, budgets, deadlines and compensations.
    Every capability answers at once; the scripted one (the first poll's body unless
    --capability) plays --script for each instance. It prints the provider calls per
    instance, the provider's calls per second over time at N instances (peak and mean, the
    limit applied), when budgets ran out and which compensations ran.

    At large N only a sample runs through the engine (--sample, 200 by default: each with
    its own jittered schedule); its calls per second are scaled to N and the limit is then
    applied as a deferral queue.

    Exit codes: 0 done; 2 bad usage (a bad script, an unknown flow or capability, an input
    the flow refuses); 5 the flows cannot be loaded.
    """
    from flowpark.errors import FlowparkError, FlowsUnloadable
    from flowpark.runtime.http import outbound_client
    from flowpark.runtime.loading import Deps, load_flows
    from flowpark.settings import Settings
    from flowpark.simulate import declared_limit, parse_script, simulate

    try:
        steps = parse_script(script)
    except ValueError as exc:
        usage_error(f"--script: {exc}")
    settings = Settings()
    try:
        loaded = load_flows(
            list(flows or []) or settings.flow_targets,
            Deps(outbound_client(settings.http_timeout_seconds), settings),
        )
    except FlowsUnloadable as exc:
        typer.echo(f"error: {exc.code}: {exc.message}", err=True)
        raise typer.Exit(5) from None
    found = [f for f in loaded if f.name == name and (version is None or f.version == version)]
    if not found:
        usage_error(f"no flow {name}" + (f"@{version}" if version else ""))
    flow = max(
        found, key=lambda f: tuple(int(p) if p.isdigit() else 0 for p in f.version.split("."))
    )
    if limit is None and not no_limit:
        declared = declared_limit(flow, capability)
        if declared is not None:
            override = settings.provider_limits.get(declared[0], {})
            limit = float(override.get("rate_per_second") or declared[1])
    if no_limit:
        limit = None
    if limit is not None and not math.isfinite(limit):
        usage_error(f"--limit {limit} is not a number of calls per second")
    try:
        data = json.loads(payload) if payload is not None else None
        sim = asyncio.run(
            simulate(
                flow,
                instances,
                steps,
                limit=limit,
                sample=sample,
                scripted=capability,
                payload=data,
            )
        )
    except (ValueError, FlowparkError) as exc:  # a JSONDecodeError is a ValueError
        usage_error(str(exc))
    if as_json:
        typer.echo(json.dumps(_as_json(sim), indent=2))
    else:
        _print(sim)
