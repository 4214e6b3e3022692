"""document.process on the virtual clock, through the production engine and store."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx

from flowpark.engine.records import Ack, InstanceState, StepKind, StepRow
from flowpark.flows import Flow
from flowpark.samples.document_processing import (
    NOT_READ_IN_TIME,
    OcrClient,
    OcrJob,
    OcrStatus,
    Waits,
    build_document_flow,
)
from flowpark.samples.document_processing.models import ExtractedFields
from flowpark.testing import FlowHarness, Scripted
from tests.support.harness import sql_of

DOC = {"documentId": "doc-1", "contentType": "application/pdf", "pages": 3}


def _flow() -> Flow:
    # the client is never used: every capability below is substituted
    return build_document_flow(OcrClient(httpx.AsyncClient(), "http://unused.invalid"))


def pending() -> OcrStatus:
    return OcrStatus(job_id="job-1", status="pending")


def done() -> OcrStatus:
    return OcrStatus(job_id="job-1", status="completed", text="a: 1\nb: 2")


def scripted(status: Scripted) -> dict[str, Scripted]:
    return {
        "ocr.upload": Scripted(OcrJob(job_id="job-1")),
        "ocr.status": status,
        "ocr.cancel": Scripted(None),
        "document.extract": Scripted(ExtractedFields(values={"a": "1", "b": "2"})),
    }


async def test_waiting_costs_one_row_and_holds_no_lease() -> None:
    status = Scripted(pending())
    async with FlowHarness.open([_flow()], substitutes=scripted(status)) as h:
        started = await h.start("document.process", DOC)
        inst = started.instance
        assert inst.state is InstanceState.SUSPENDED
        assert inst.wake_at is not None and inst.wake_at > h.clock.now()
        assert (inst.wake_step_id, inst.wake_scope) == (1, 1)
        assert not await h.holds_lease(inst.id)
        assert inst.lease_owner is None
        assert status.calls == 1  # one attempt per invocation, never a loop in-process
        assert await h.store.reads.count_instances() == 1


async def test_each_wake_makes_exactly_one_attempt_then_completes() -> None:
    status = Scripted(pending(), pending(), done())
    async with FlowHarness.open([_flow()], substitutes=scripted(status)) as h:
        inst = (await h.start("document.process", DOC)).instance
        await h.advance_to_next_wake(inst.id)
        assert status.calls == 2
        assert (await h.instance(inst.id)).wake_scope == 2
        await h.advance_to_next_wake(inst.id)
        final = await h.instance(inst.id)
        assert final.state is InstanceState.COMPLETED
        assert final.result == {"documentId": "doc-1", "fieldCount": 2}
        snap = await h.snapshot(inst.id)
        status_rows = [(r.step_id, r.scope) for r in snap.steps if r.capability_id == "ocr.status"]
        assert status_rows == [(2, 0), (2, 1), (2, 2)]
        events = await h.store.reads.list_events()
        assert [e["name"] for e in events] == ["document.processed"]


async def test_the_emit_writes_the_extract_row_with_its_own(sql_store_url: str) -> None:
    status = Scripted(pending(), done())
    async with FlowHarness.open(
        [_flow()], database_url=sql_store_url, migrate=False, substitutes=scripted(status)
    ) as h:
        inst = (await h.start("document.process", DOC)).instance
        commits: list[tuple[str, str | None]] = []
        runs = sql_of(h).runs  # the SQL store's one-statement commit
        commit_step = runs.commit_step

        async def spied(token: int, row: StepRow, *args: Any, **kwargs: Any) -> Ack:
            deferred = kwargs.get("deferred")
            commits.append((row.capability_id, deferred and deferred.capability_id))
            return await commit_step(token, row, *args, **kwargs)

        runs.commit_step = spied  # type: ignore[method-assign]
        await h.advance_to_next_wake(inst.id)
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED
        # the status row before the extract runs, carrying the extract's retry window
        # (stored before its first try, inside the row written with it), then the emit
        # with the extract row
        assert commits == [
            ("retry.total", None),  # the status attempt's retry window, a write of its own
            ("ocr.status", None),
            ("document.processed", "document.extract"),
        ]
        steps = (await h.snapshot(inst.id)).steps
        calls = [r.capability_id for r in steps if r.capability_id != "retry.total"]
        assert calls[-3:] == [
            "ocr.status",
            "document.extract",
            "document.processed",
        ]
        assert [r.sequence for r in steps] == sorted(r.sequence for r in steps)  # type: ignore[type-var]
        assert [e["name"] for e in await h.store.reads.list_events()] == ["document.processed"]


async def test_waits_follow_the_jittered_backoff_and_never_pass_the_budget() -> None:
    status = Scripted(pending())
    async with FlowHarness.open([_flow()], substitutes=scripted(status)) as h:
        inst = (await h.start("document.process", DOC)).instance
        t0 = (await h.snapshot(inst.id)).steps[1].started_at
        budget_end = t0 + Waits.OCR_BUDGET
        previous = h.clock.now()
        # the sample's schedule, pinned: 5 s doubling to 5 min, each wait cut by up to half
        bases = [5, 10, 20, 40, 80, 160, 300, 300, 300, 300, 300, 300]
        for attempt in range(12):
            wake = (await h.instance(inst.id)).wake_at
            assert wake is not None and wake <= budget_end
            base = timedelta(seconds=bases[attempt])
            gap = wake - previous
            assert base * 0.5 - timedelta(milliseconds=1) <= gap <= base
            await h.advance_to_next_wake(inst.id)
            previous = h.clock.now()


async def test_a_resume_past_a_satisfied_poll_makes_no_further_call() -> None:
    status = Scripted(pending(), done())
    extract = Scripted(RuntimeError("extract down"), ExtractedFields(values={"a": "1"}))
    subs = scripted(status)
    subs["document.extract"] = extract
    extract_policy_tries = 1  # the sample retries extract up to 3 tries
    async with FlowHarness.open([_flow()], substitutes=subs) as h:
        inst = (await h.start("document.process", DOC)).instance
        await h.advance_to_next_wake(inst.id)  # attempt 1 satisfies; extract fails once
        parked = await h.instance(inst.id)
        assert parked.state is InstanceState.SUSPENDED
        assert extract.calls == extract_policy_tries
        calls_before = status.calls
        await h.advance_to_next_wake(inst.id)  # resume: replays the poll, retries extract
        assert status.calls == calls_before == 2
        assert (await h.instance(inst.id)).state is InstanceState.COMPLETED


async def test_budget_runs_out_escalates_fails_and_cancels_the_real_ocr_job(
    fake_ocr_server: tuple[str, object], http: httpx.AsyncClient
) -> None:
    base, ocr = fake_ocr_server
    flow = build_document_flow(OcrClient(http, base))
    async with FlowHarness.open([flow]) as h:
        inst = (await h.start("document.process", DOC)).instance
        upload = next(
            r for r in (await h.snapshot(inst.id)).steps if r.capability_id == "ocr.upload"
        )
        job_id = upload.values["OcrJob"]["jobId"]
        final = await h.wait_until(lambda i: i.state.ended, inst.id)
        assert final.state is InstanceState.FAILED
        assert final.failure is not None and final.failure.code == NOT_READ_IN_TIME
        reviews = await h.store.reads.list_reviews()
        assert [r["subject"] for r in reviews] == ["doc-1"]
        job = (await http.get(f"{base}/fake/ocr/jobs/{job_id}")).json()
        assert job["status"] == "cancelled"
        assert await h.calls(inst.id, "ocr.cancel", StepKind.COMPENSATION) == 1
        # the budget is 4 h from attempt 0's engine-clock instant; nothing ran past it
        snap = await h.snapshot(inst.id)
        t0 = snap.steps[1].started_at
        polls = [r for r in snap.steps if r.capability_id == "ocr.status"]
        assert all(r.started_at < t0 + Waits.OCR_BUDGET for r in polls)
        assert h.clock.now() - t0 == Waits.OCR_BUDGET
