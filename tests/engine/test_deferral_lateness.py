"""A provider's deferral is not the sweep's lateness (virtual clock, every store): a poll
attempt its provider's limit (or pushback) held back says so on its row (when the last
deferral woke it, and why); the metrics observe the sweep's lateness of each wake apart from
the time each deferral parked the try; the console's overview counts the provider's
deferral apart from the wake lateness, and the instance's attempts say "deferred 20 s by
provider vendor's limit" with the sweep's lateness after it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from flowpark.api.explain import attempts_view
from flowpark.engine.observe import Observer
from flowpark.flows import Backoff, Flow, Provider, StepContext
from flowpark.testing import FlowHarness, Scripted
from flowpark.ui.overview import lateness
from flowpark.ui.timeline import held_by
from tests.engine.flows import Check, Order, Start, Status, done

T0 = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
S = timedelta(seconds=1)
#: one call every 10 s, for every instance together
VENDOR = Provider("vendor", rate_per_second=0.1, burst=1)


class VendorCheck(Check):
    id = "p.check"
    provider = VENDOR


def vendor_flow() -> Flow:
    flow = Flow("p.vendor", "1.0.0", input=Order)
    flow.step(Start())
    flow.poll_until(VendorCheck(), until=done, interval=Backoff.fixed(5 * S), timeout=10 * 60 * S)
    return flow


def second_attempt_done(ctx: StepContext) -> Status:
    return Status(done=ctx.scope >= 1)


class Recorded(Observer):
    """What the engine told the metrics: wake lateness, and the provider's deferrals."""

    def __init__(self) -> None:
        self.woke_late: list[float] = []
        self.held: list[tuple[str, str, str, float]] = []

    def woke(self, flow: str, lateness_seconds: float) -> None:
        self.woke_late.append(lateness_seconds)

    def provider_held(self, flow: str, provider: str, reason: str, seconds: float) -> None:
        self.held.append((flow, provider, reason, seconds))


async def _run_three(h: FlowHarness) -> list[str]:
    """Three documents whose attempt 0 and 1 all fall due together: the vendor's limit
    (one call per 10 s) defers most of them; each is driven from wake to wake to its end."""
    ids = [(await h.start("p.vendor", {"order_id": f"o-{i}"})).instance.id for i in range(3)]
    for _ in range(40):
        waiting = [i for i in ids if not (await h.instance(i)).state.ended]
        if not waiting:
            break
        await h.advance_to_next_wake()
    assert [(await h.instance(i)).state for i in ids] == ["completed"] * 3
    return ids


async def test_a_deferred_attempt_says_so_and_its_lateness_is_the_sweeps_only() -> None:
    await _deferred_attempts(None)


async def test_the_sql_stores_keep_a_deferral_and_read_it_for_the_overview(
    sql_store_url: str,
) -> None:
    await _deferred_attempts(sql_store_url)


async def _deferred_attempts(database_url: str | None) -> None:
    subs = {"p.check": Scripted(second_attempt_done)}
    observed = Recorded()
    async with FlowHarness.open(
        [vendor_flow()], database_url=database_url, migrate=False, substitutes=subs, start=T0
    ) as h:
        h.engine.observer = observed
        ids = await _run_three(h)
        rows = [r for i in ids for r in (await h.snapshot(i)).steps if r.capability_id == "p.check"]
        deferred = [r for r in rows if r.deferred_until is not None]
        assert deferred, "the limit deferred no attempt"
        assert {r.deferred_by for r in deferred} == {"budget"}
        for row in deferred:  # the sweep woke it at the deferral's end: it ran then
            assert row.started_at == row.deferred_until
        assert all(r.deferred_until is None for r in rows if r not in deferred)

        # the metrics: the harness sweeps at each wake's instant, so the sweep is never
        # late; the provider held tries back, for as long as each deferral parked them
        assert observed.woke_late and max(observed.woke_late) == 0.0
        assert observed.held and {h[:3] for h in observed.held} == {
            ("p.vendor", "vendor", "budget")
        }
        assert max(seconds for *_, seconds in observed.held) >= 10.0

        # the overview: wake lateness is the sweep's (0 s), the deferral apart
        starts = await h.store.overview.attempt_starts(T0)
        overall, by_flow = lateness(h.catalog, starts)
        assert overall.samples == 3 and overall.p99 == 0.0
        assert overall.deferred >= 1 and overall.deferred_p99 is not None
        assert overall.deferred_p99 >= 10.0
        assert by_flow[("p.vendor", "1.0.0")].deferred == overall.deferred

        # the instance's attempts: deferred N s by provider vendor's limit, late 0 s
        plan = h.catalog.get("p.vendor", "1.0.0")
        views = []
        for i in ids:
            snap = await h.snapshot(i)
            views += [
                v.model_dump(mode="json", by_alias=True)
                for v in attempts_view(plan, snap.instance, snap.steps)
            ]
        held = [v for v in views if v["deferredSeconds"] is not None]
        assert held, views
        for view in held:
            assert view["deferredSeconds"] > 0 and view["latenessSeconds"] == 0.0
            assert (view["deferredBy"], view["provider"]) == ("budget", "vendor")
            assert held_by(view) == "provider vendor's limit"
        assert all(v["latenessSeconds"] == 0.0 for v in views if v["outcome"] != "signal")


class StatusError(Exception):
    """What ``httpx.HTTPStatusError`` looks like to the engine (duck typing)."""

    def __init__(self, status: int, retry_after: str) -> None:
        super().__init__(f"HTTP {status}")
        self.response = type(
            "R", (), {"status_code": status, "headers": {"Retry-After": retry_after}}
        )()


async def test_a_pushed_back_attempt_says_it_waited_for_the_providers_pushback() -> None:
    pushed = Scripted(Status(done=False), StatusError(429, "30"), Status(done=True))
    async with FlowHarness.open([vendor_flow()], substitutes={"p.check": pushed}, start=T0) as h:
        inst = (await h.start("p.vendor", {})).instance
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state == "completed"
        snap = await h.snapshot(inst.id)
        (attempt_1,) = [r for r in snap.steps if r.capability_id == "p.check" and r.scope == 1]
        assert attempt_1.deferred_by == "pushback"
        assert attempt_1.deferred_until == attempt_1.started_at
        plan = h.catalog.get("p.vendor", "1.0.0")
        view = attempts_view(plan, snap.instance, snap.steps)[1].model_dump(
            mode="json", by_alias=True
        )
        assert view["deferredBy"] == "pushback" and view["deferredSeconds"] >= 30.0
        assert held_by(view) == "provider vendor's pushback"
