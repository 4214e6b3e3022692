"""``/api/v1/providers``: a provider's limit, effective rate and why it is lowered, its calls
of the last minute, what waits on it and the oldest deferral; an operator's live change of
its limit (who and when); the flows that call it. On both stores, over real HTTP."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel

from flowpark.engine.ports import Commit, GrantRequest, Park, PushbackReport
from flowpark.engine.ports.providers import ProviderState
from flowpark.engine.records import NewInstance, WakeKind
from flowpark.flows import Backoff, Capability, Flow, Provider, StepContext
from tests.api.operator_support import Operated, operated

OCR = Provider("ocr", rate_per_second=10, burst=20)  # the starts below take no deferral
LIST = "/api/v1/providers"


class Order(BaseModel):
    order_id: str = "o-1"


class Job(BaseModel):
    job_id: str = "j"


class Status(BaseModel):
    done: bool = False


class Upload(Capability):
    id = "p.upload"
    provider = OCR
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Job,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Job())


class Check(Capability):
    id = "p.check"
    idempotent = True
    provider = OCR
    puts: ClassVar[tuple[type[BaseModel], ...]] = (Status,)

    async def execute(self, ctx: StepContext) -> None:
        ctx.put(Status())


def flow() -> Flow:
    f = Flow("p.poll", "1.0.0", input=Order)
    f.step(Upload())
    f.poll_until(
        Check(),
        until=lambda bag: bag.get(Status).done,
        interval=Backoff.fixed(timedelta(minutes=1)),
        timeout=timedelta(hours=1),
        reads=(Status,),
    )
    return f


async def deferred(op: Operated, seconds: float, kind: WakeKind) -> str:
    """An instance of p.poll parked at its poll for ``kind``, ``seconds`` ago."""
    h = op.h
    now = h.clock.now()
    new = NewInstance(
        id=h.engine.new_id(),
        flow_name="p.poll",
        flow_version="1.0.0",
        input={"order_id": "o-d"},
        created_at=now - timedelta(seconds=seconds),
        deadline_at=None,
        lease_owner="n-1",
        lease_expires_at=now + timedelta(seconds=30),
    )
    record, _ = await h.store.intake.create_instance(new)
    poll = h.catalog.get("p.poll", "1.0.0").steps[1].index
    park = Park(now + timedelta(seconds=2), poll, 1, "n-1", kind=kind)
    at = now - timedelta(seconds=seconds)
    await h.store.runs.commit(Commit(record.id, 1, at, at + timedelta(seconds=30), park=park))
    return record.id


async def test_a_provider_shows_its_limit_load_and_waits(store_url: str) -> None:
    async with operated(store_url, [flow()]) as op:
        h = op.h
        now = h.clock.now()
        state = ProviderState("ocr", 10, 20, None, 10, None, None, 0, now, "declared")
        await h.store.providers.declare([state], now)
        for n in range(3):
            started = await h.start("p.poll", {"order_id": f"o-{n}"})
            assert started.instance.state == "suspended"
        oldest = await deferred(op, 40, WakeKind.PROVIDER_BUDGET)
        await deferred(op, 10, WakeKind.PROVIDER_BUDGET)
        await deferred(op, 5, WakeKind.PROVIDER_PUSHBACK)
        previous = now.replace(second=0, microsecond=0) - timedelta(minutes=1)
        request = GrantRequest("ocr", "n-1", 1, previous, ok=7, pushback=1, failed=2, deferred=3)
        await h.store.providers.grant(request)
        reason = "429 from p.check; Retry-After 5 s"
        await h.store.providers.pushback(
            PushbackReport("ocr", now, now + timedelta(seconds=5), reason)
        )

        async with op.client() as client:
            listed = await client.get(LIST)
            assert listed.status_code == 200, listed.text
            [ocr] = listed.json()
            assert ocr["name"] == "ocr" and ocr["ratePerSecond"] == 10 and ocr["burst"] == 20
            assert ocr["effectiveRate"] == 5 and ocr["lowered"] is True
            assert ocr["loweredReason"] == reason and ocr["pushbacks"] == 1
            assert ocr["pausedUntil"] is not None and ocr["updatedBy"] == "declared"
            assert ocr["flows"] == ["p.poll@1.0.0"]
            assert ocr["lastMinute"] == {"ok": 7, "pushback": 1, "failed": 2, "deferred": 3}
            assert (ocr["deferred"], ocr["deferredByPushback"], ocr["waiting"]) == (2, 1, 6)
            assert ocr["oldestDeferral"]["instanceId"] == oldest
            assert ocr["oldestDeferral"]["flow"] == "p.poll"

            detail = (await client.get(f"{LIST}/ocr")).json()
            assert {k: v for k, v in detail.items() if k != "minutes"} == ocr
            minutes = {m["minute"][:16]: m for m in detail["minutes"]}
            assert minutes[previous.isoformat()[:16]]["ok"] == 7
            # this minute: the three starts' calls (upload and check 0 each) as reported
            current = minutes.get(now.isoformat()[:16])
            assert current is None or current["ok"] <= 6

            # once the pause is over it is not shown as if it still held
            h.clock.advance(timedelta(seconds=6))
            later = (await client.get(f"{LIST}/ocr")).json()
            assert later["pausedUntil"] is None and later["loweredReason"] == reason
            # back at the limit (5 s clean, then 5 % of it per second): no reason is left
            h.clock.advance(timedelta(seconds=30))
            recovered = (await client.get(f"{LIST}/ocr")).json()
            assert (recovered["effectiveRate"], recovered["lowered"]) == (10, False)
            assert recovered["loweredReason"] is None  # it stayed after the rate recovered

            missing = await client.get(f"{LIST}/nope")
            assert missing.status_code == 404
            assert missing.headers["content-type"] == "application/problem+json"
            assert missing.json()["code"] == "provider_not_found"

            plan = (await client.get("/api/v1/flows/p.poll")).json()
            assert plan["providers"] == ["ocr"]
            flows = (await client.get("/api/v1/flows")).json()
            assert [f["providers"] for f in flows if f["name"] == "p.poll"] == [["ocr"]]


async def test_an_operator_changes_a_limit_live(store_url: str) -> None:
    async with operated(store_url, [flow()]) as op:
        h = op.h
        now = h.clock.now()
        state = ProviderState("ocr", 10, 20, None, 10, None, None, 0, now, "declared")
        await h.store.providers.declare([state], now)
        async with op.client() as client:
            put = await client.put(f"{LIST}/ocr/limit", json={"ratePerSecond": 20, "burst": 4})
            assert put.status_code == 200, put.text
            body: dict[str, Any] = put.json()
            assert (body["ratePerSecond"], body["burst"], body["effectiveRate"]) == (20, 4, 20)
            assert body["updatedBy"] == "token-1"  # the test token's name
            assert body["updatedAt"].startswith(now.isoformat()[:19])

            assert body["maxInFlight"] is None
            patched = await client.put(
                f"{LIST}/ocr/limit", json={"ratePerSecond": 20, "maxInFlight": 8}
            )
            assert patched.status_code == 200, patched.text
            # burst left out: kept
            assert (patched.json()["burst"], patched.json()["maxInFlight"]) == (4, 8)
            # a declaration after the operator's change does not replace it
            await h.store.providers.declare([state], now + timedelta(seconds=1))
            again = (await client.get(f"{LIST}/ocr")).json()
            assert again["ratePerSecond"] == 20

            for bad in (
                {"ratePerSecond": 0},
                {"ratePerSecond": -1},
                {"ratePerSecond": 1e300},  # accepted, it failed every call of the provider
                {"ratePerSecond": 1e-300},  # accepted, an overflow in every grant after it
                {"ratePerSecond": 5e-324},  # accepted, an underflow on PostgreSQL
                {"ratePerSecond": 0.0009},  # below the floor
                {"ratePerSecond": True},  # JSON true is not a number
                {"ratePerSecond": "1e3"},  # nor is a string
                {"burst": 0},
                {},
            ):
                refused = await client.put(f"{LIST}/ocr/limit", json=bad)
                assert refused.status_code == 422, bad
                assert refused.json()["code"] == "input_invalid"
            no_rate = await client.put(f"{LIST}/ocr/limit", json={"burst": 3})
            assert no_rate.status_code == 422 and no_rate.json()["code"] == "input_invalid"
            # snake_case is an unknown field, as in every body (it was taken as the field)
            for snake in (
                {"rate_per_second": 3},
                {"ratePerSecond": 3, "max_in_flight": 2},
            ):
                refused = await client.put(f"{LIST}/ocr/limit", json=snake)
                assert refused.status_code == 422, (snake, refused.text)
                assert refused.headers["content-type"].startswith("application/problem+json")
                problem = refused.json()
                assert problem["code"] == "input_invalid"
                unknown_fields = {
                    e["loc"][-1]: e["msg"]
                    for e in problem["errors"]
                    if e["type"] == "extra_forbidden"
                }
                (name,) = [k for k in snake if "_" in k]
                assert (
                    "did you mean " + {"rate_per_second": "ratePerSecond"}.get(name, "maxInFlight")
                    in unknown_fields[name]
                )
            unknown = await client.put(f"{LIST}/nope/limit", json={"ratePerSecond": 1})
            assert unknown.status_code == 404 and unknown.json()["code"] == "provider_not_found"
            assert (await client.get(f"{LIST}/ocr")).json()["burst"] == 4


async def test_a_provider_not_called_yet_shows_its_declaration_and_takes_a_change(
    store_url: str,
) -> None:
    setting = {"ocr": {"rate_per_second": 7}}
    async with operated(store_url, [flow()], provider_limits=setting) as op:
        assert await op.h.store.providers.states() == []  # no call yet: no row
        async with op.client() as client:
            [ocr] = (await client.get(LIST)).json()
            assert (ocr["name"], ocr["ratePerSecond"], ocr["burst"]) == ("ocr", 7, 20)
            assert ocr["updatedBy"] == "setting" and ocr["flows"] == ["p.poll@1.0.0"]
            assert ocr["waiting"] == 0 and ocr["lastMinute"]["ok"] == 0
            assert (await client.get(f"{LIST}/ocr")).json()["minutes"] == []

            put = await client.put(f"{LIST}/ocr/limit", json={"ratePerSecond": 5})
            assert put.status_code == 200, put.text
            assert (put.json()["ratePerSecond"], put.json()["updatedBy"]) == (5, "token-1")
        [state] = await op.h.store.providers.states()
        assert (state.rate_per_second, state.burst, state.updated_by) == (5, 20, "token-1")


async def test_a_limit_at_the_floor_then_restored_holds_from_now(store_url: str) -> None:
    """A live limit at the floor then 100/s: nothing fails, and a document started just
    after the restore is called within a second (the schedule the floor placed ahead is
    dropped, and the nodes ask the store again)."""
    async with operated(store_url, [flow()]) as op:
        h = op.h
        first = (await h.start("p.poll", {"order_id": "o-first"})).instance
        h.clock.advance(timedelta(seconds=2))  # the slots the node holds lapse
        async with op.client() as client:
            floor = {"ratePerSecond": 0.001, "burst": 1}
            put = await client.put(f"{LIST}/ocr/limit", json=floor)
            assert put.status_code == 200, put.text
            slow = [(await h.start("p.poll", {"order_id": f"o-{n}"})).instance for n in range(3)]
            assert all(i.state == "suspended" for i in slow)
            # at the floor: a call every 1,000 s, the others deferred a call's time apart
            assert sum([await h.calls(i.id, "p.upload") for i in slow]) <= 1
            assert max(i.wake_at for i in slow if i.wake_at) >= h.clock.now() + timedelta(
                seconds=999
            )
            await h.advance(timedelta(seconds=10))
            restore = await client.put(f"{LIST}/ocr/limit", json={"ratePerSecond": 100})
            assert restore.status_code == 200, restore.text
        h.clock.advance(timedelta(milliseconds=11))
        after = (await h.start("p.poll", {"order_id": "o-after"})).instance
        restored_at = h.clock.now()
        if after.wake_kind is WakeKind.PROVIDER_BUDGET:  # deferred: not past a second
            assert after.wake_at is not None
            assert after.wake_at <= restored_at + timedelta(seconds=1), after.wake_at
            await h.advance_to_next_wake(after.id)
        assert await h.calls(after.id, "p.upload") == 1
        assert h.clock.now() <= restored_at + timedelta(seconds=1)
        for inst in [first, *slow, after]:
            assert (await h.instance(inst.id)).state == "suspended", inst.id
