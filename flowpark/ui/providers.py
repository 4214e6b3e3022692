"""The console's providers page (``/ui/providers``): each declared provider's limit, effective
rate and what waits on it, as ``GET /api/v1/providers`` says, with a chart of its calls per
second against the limit over the last hour, drawn here as SVG from the per-minute tallies
(no script, no chart library)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from flowpark.api.deps import engine_of
from flowpark.api.providers import provider_views, provider_waits_of
from flowpark.engine.ports import ProviderMinute
from flowpark.ui.pages import ConsoleRoute, need_session, render

__all__ = ["CallsChart", "build_providers_router", "calls_chart"]

#: The chart's drawing area (SVG user units) and its margins for the axis labels.
WIDTH, HEIGHT, LEFT, BOTTOM, TOP = 600, 160, 44, 22, 10
MINUTES = 60


@dataclass(frozen=True)
class Bar:
    """One minute's bar: its box and what it says on hover."""

    x: float
    y: float
    width: float
    height: float
    title: str
    pushback: bool


@dataclass(frozen=True)
class CallsChart:
    """A provider's calls per second, minute by minute over the last hour, against its limit.

    Attributes:
        width / height: the SVG's size (user units).
        bars: one per minute with calls (oldest on the left).
        limit_y / effective_y: the height of the limit and of the effective rate lines.
        top: the calls/s at the top of the drawing area.
        base_y / left: where the axes are.
        peak: the highest calls/s of a minute.
    """

    width: int
    height: int
    bars: list[Bar]
    limit_y: float
    effective_y: float
    top: float
    base_y: float
    left: int
    peak: float


def calls_chart(
    minutes: list[ProviderMinute], now: datetime, limit: float, effective: float
) -> CallsChart:
    """Lay out the chart of ``minutes`` (calls per minute) for the hour ending at ``now``.

    Args:
        minutes: the per-minute tallies (any order; older than an hour: left out).
        now: the engine clock's now (aware UTC).
        limit: the provider's limit (calls/s).
        effective: its effective rate (calls/s).

    Returns:
        The :class:`CallsChart`: a bar per minute of calls made (ok, pushback and failed,
        over 60 s), the limit and the effective rate as horizontal lines.
    """
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES - 1)
    plot_w = WIDTH - LEFT
    plot_h = HEIGHT - BOTTOM - TOP
    slot = plot_w / MINUTES
    rates = {
        m.minute: ((m.ok + m.pushback + m.failed) / 60.0, m) for m in minutes if m.minute >= start
    }
    peak = max((rate for rate, _ in rates.values()), default=0.0)
    top = max(limit, peak) * 1.15 or 1.0

    def y(rate: float) -> float:
        return round(TOP + plot_h * (1 - rate / top), 1)

    bars = []
    for minute, (rate, m) in sorted(rates.items()):
        index = int((minute - start).total_seconds() // 60)
        title = (
            f"{minute:%H:%M} UTC: {rate:.1f} calls/s ({m.ok} ok, {m.pushback} pushback, "
            f"{m.failed} failed, {m.deferred} deferred)"
        )
        bars.append(
            Bar(
                x=round(LEFT + index * slot + 1, 1),
                y=y(rate),
                width=round(max(slot - 2, 1), 1),
                height=round(plot_h * rate / top, 1),
                title=title,
                pushback=m.pushback > 0,
            )
        )
    return CallsChart(
        width=WIDTH,
        height=HEIGHT,
        bars=bars,
        limit_y=y(limit),
        effective_y=y(effective),
        top=top,
        base_y=TOP + plot_h,
        left=LEFT,
        peak=peak,
    )


def build_providers_router() -> APIRouter:
    """``GET /ui/providers``."""
    router = APIRouter(prefix="/ui", include_in_schema=False, route_class=ConsoleRoute)

    @router.get("/providers", response_class=HTMLResponse)
    async def providers(request: Request) -> HTMLResponse:
        session = need_session(request)
        engine = engine_of(request)
        now = engine.clock.now()
        rows = []
        for view, minutes in await provider_views(engine, provider_waits_of(request)):
            chart = calls_chart(minutes, now, view.rate_per_second, view.effective_rate)
            rows.append({"p": view, "chart": chart})
        return render(
            request,
            "providers.html",
            {"session": session, "section": "providers", "rows": rows},
        )

    return router
