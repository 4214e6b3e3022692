"""``FlowHarness.provider_signal``: a provider's webhook delivered through the provider
signal route's own code on the virtual clock (each built-in verifier, the signal's ``adapt``,
its model and key function, the instance found by the correlation key), on the in-memory
store and on SQLite; and a stand-in that records the provider's id (``Scripted(correlate=)``)
or does not (the webhook finds no instance, ``correlation_key_unknown``)."""

from __future__ import annotations

import base64
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from flowpark import (
    Capability,
    Correlate,
    Flow,
    GitHubWebhook,
    HmacWebhook,
    Signal,
    SignedWebhook,
    StepContext,
    StripeWebhook,
    WebhookDelivery,
)
from flowpark.api.models import SignalAnswer
from flowpark.api.problems import status_of
from flowpark.errors import (
    CorrelationKeyUnknown,
    DeliveryIdReused,
    FlowparkError,
    InputInvalid,
    SignalNotDeclared,
    SignatureInvalid,
)
from flowpark.testing import FlowHarness, Scripted, webhook_body, webhook_headers

STANDARD = "whsec_" + base64.b64encode(b"harness-standard-webhooks-key").decode()
SECRETS = {"std": STANDARD, "gh": "gh-secret", "stripe": "whsec_stripe", "hmac": "hmac-secret"}


class Job(BaseModel):
    job_id: str


class JobDone(BaseModel):
    job_id: str
    ok: bool = True


class StartJob(Capability):
    """Stood in for by :class:`Scripted` in every test."""

    id = "job.start"
    puts = (Job,)

    async def execute(self, ctx: StepContext) -> None:  # pragma: no cover - stood in for
        raise AssertionError("stood in for")


def _stripe(delivery: WebhookDelivery) -> JobDone | None:
    if delivery.event != "job.finished":
        return None
    return JobDone(job_id=delivery.payload["data"]["object"]["job"])


def _github(delivery: WebhookDelivery) -> JobDone | None:
    if delivery.event != "check_run":
        return None  # a ping
    return JobDone(job_id=str(delivery.payload["check_run"]["id"]))


def _key(done: JobDone) -> str:
    return done.job_id


SIGNALS = {
    "std": Signal(
        "job.std", JobDone, verify=SignedWebhook("std"), correlate=Correlate("jobs", _key)
    ),
    "gh": Signal(
        "job.gh",
        JobDone,
        verify=GitHubWebhook("gh"),
        adapt=_github,
        correlate=Correlate("jobs", _key),
    ),
    "stripe": Signal(
        "job.stripe",
        JobDone,
        verify=StripeWebhook("stripe"),
        adapt=_stripe,
        correlate=Correlate("jobs", _key),
    ),
    "hmac": Signal(
        "job.hmac",
        JobDone,
        verify=HmacWebhook("hmac", "X-Signature", encoding="base64", id_header="X-Delivery"),
        correlate=Correlate("jobs", _key),
    ),
    "bearer": Signal("job.bearer", JobDone, correlate=Correlate("jobs", _key)),
}


def job_flow(kind: str) -> Flow:
    return (
        Flow(f"job.{kind}.wait", "1.0.0", input=Job)
        .step(StartJob())
        .await_signal(SIGNALS[kind], timeout="PT1H")
        .returns(lambda bag: bag.get(JobDone).model_dump())
    )


def recording(job_id: str = "job-17") -> Scripted:
    """``job.start`` as the real one: it puts the job and records its id for ``jobs``."""
    return Scripted(Job(job_id=job_id), correlate=lambda ctx: {"jobs": ctx.get(Job).job_id})


PAYLOADS: dict[str, tuple[Any, str | None]] = {  # the provider's JSON, GitHub's event
    "std": ({"job_id": "job-17", "ok": True}, None),
    "gh": ({"action": "completed", "check_run": {"id": "job-17"}}, "check_run"),
    "stripe": (
        {"id": "evt_1", "type": "job.finished", "data": {"object": {"job": "job-17"}}},
        None,
    ),
    "hmac": ({"job_id": "job-17"}, None),
    "bearer": ({"job_id": "job-17"}, None),
}


@pytest.mark.parametrize("kind", sorted(SIGNALS))
async def test_each_verifier_delivers_to_the_key_holder_on_the_virtual_clock(kind: str) -> None:
    subs = {"job.start": recording()}
    async with FlowHarness.open([job_flow(kind)], substitutes=subs, signal_secrets=SECRETS) as h:
        assert abs(h.clock.now().year - 2026) <= 1  # the harness's clock, not the machine's
        inst = (await h.start(f"job.{kind}.wait", {"job_id": "ignored"})).instance
        assert inst.state == "suspended"
        payload, event = PAYLOADS[kind]
        name = SIGNALS[kind].name
        answer = await h.provider_signal("jobs", name, payload, event=event, delivery_id="d-1")
        assert isinstance(answer, SignalAnswer)
        assert (answer.instance_id, answer.created, answer.matched) == (inst.id, True, True)
        assert answer.state == "completed"
        assert (await h.instance(inst.id)).result == {"job_id": "job-17", "ok": True}
        again = await h.provider_signal("jobs", name, payload, event=event, delivery_id="d-1")
        assert again is not None and again.created is False
        assert again.signal_id == answer.signal_id


@pytest.mark.parametrize("kind", ["std", "gh", "stripe", "hmac"])
async def test_a_delivery_signed_with_another_secret_or_too_long_ago_is_refused(
    kind: str,
) -> None:
    subs = {"job.start": recording()}
    async with FlowHarness.open([job_flow(kind)], substitutes=subs, signal_secrets=SECRETS) as h:
        inst = (await h.start(f"job.{kind}.wait", {"job_id": "x"})).instance
        payload, event = PAYLOADS[kind]
        name, verifier = SIGNALS[kind].name, SIGNALS[kind].verify
        body = webhook_body(payload)
        other = "whsec_" + base64.b64encode(b"not-the-providers-secret").decode()
        forged = webhook_headers(
            verifier, other, body, at=h.clock.now(), delivery_id="d-2", event=event
        )
        with pytest.raises(SignatureInvalid) as refused:
            await h.provider_signal("jobs", name, body=body, headers=forged)
        assert status_of(refused.value.code) == 401
        if kind in ("std", "stripe"):  # formats with a timestamp: judged by the harness clock
            sent = webhook_headers(
                verifier, SECRETS[kind], body, at=h.clock.now(), delivery_id="d-3"
            )
            h.clock.advance(timedelta(minutes=6))
            with pytest.raises(SignatureInvalid):
                await h.provider_signal("jobs", name, body=body, headers=sent)
        assert (await h.snapshot(inst.id)).signals == []
        assert (await h.instance(inst.id)).state == "suspended"


async def test_a_stand_in_without_the_key_leaves_the_webhook_no_instance_as_the_route_says(
    tmp_path: Path,
) -> None:
    subs = {"job.start": Scripted(Job(job_id="job-17"))}  # forgets ctx.correlate
    url = f"sqlite:///{tmp_path / 'harness.db'}"
    async with FlowHarness.open(
        [job_flow("gh")], substitutes=subs, signal_secrets=SECRETS, database_url=url
    ) as h:
        inst = (await h.start("job.gh.wait", {"job_id": "x"})).instance
        payload, event = PAYLOADS["gh"]
        with pytest.raises(CorrelationKeyUnknown) as refused:
            await h.provider_signal("jobs", "job.gh", payload, event=event)
        assert refused.value.code == "correlation_key_unknown"
        assert status_of(refused.value.code) == 404
        assert (await h.snapshot(inst.id)).signals == []  # nothing stored
        # a ping is no delivery of the signal: the route's 204, here None
        assert await h.provider_signal("jobs", "job.gh", {"zen": "hi"}, event="ping") is None


async def test_a_keyed_stand_in_on_sqlite_and_the_route_refusals_it_shares(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'harness.db'}"
    subs = {"job.start": Scripted(Job(job_id="job-9"), correlate={"jobs": "job-9"})}
    async with FlowHarness.open(
        [job_flow("bearer")], substitutes=subs, signal_secrets=SECRETS, database_url=url
    ) as h:
        inst = (await h.start("job.bearer.wait", {"job_id": "x"})).instance
        assert [(c.provider, c.key) for c in await h.store.correlations.held(inst.id)] == [
            ("jobs", "job-9")
        ]
        with pytest.raises(InputInvalid) as misnamed:  # the payload model's refusal
            await h.provider_signal("jobs", "job.bearer", {"jobid": "job-9"})
        assert "did you mean job_id?" in misnamed.value.message
        with pytest.raises(SignalNotDeclared):
            await h.provider_signal("jobs", "job.nothing", {"job_id": "job-9"})
        answer = await h.provider_signal("jobs", "job.bearer", {"job_id": "job-9"})
        assert answer is not None and answer.instance_id == inst.id
        assert (await h.instance(inst.id)).state == "completed"


async def test_no_secret_to_sign_with_says_so() -> None:
    async with FlowHarness.open([job_flow("gh")], substitutes={"job.start": recording()}) as h:
        await h.start("job.gh.wait", {"job_id": "x"})
        payload, event = PAYLOADS["gh"]
        with pytest.raises(ValueError, match="signal_secrets"):
            await h.provider_signal("jobs", "job.gh", payload, event=event)
        # headers made elsewhere: the node holds no secret, as a node without it refuses
        body = webhook_body(payload)
        headers = webhook_headers(
            SIGNALS["gh"].verify, "gh-secret", body, at=h.clock.now(), delivery_id="d"
        )
        with pytest.raises(FlowparkError) as refused:
            await h.provider_signal("jobs", "job.gh", body=body, headers=headers)
        assert refused.value.code == "signature_invalid"


async def test_a_reused_delivery_id_is_refused_in_the_harness_as_by_the_route() -> None:
    subs = {"job.start": recording()}
    async with FlowHarness.open([job_flow("gh")], substitutes=subs, signal_secrets=SECRETS) as h:
        payload, event = PAYLOADS["gh"]
        first = (await h.start("job.gh.wait", {"job_id": "x"})).instance
        await h.provider_signal("jobs", "job.gh", payload, event=event, delivery_id="d-1")
        assert (await h.instance(first.id)).state == "completed"  # the key is released
        live = (await h.start("job.gh.wait", {"job_id": "x"})).instance  # holds job-17 now
        with pytest.raises(DeliveryIdReused) as refused:
            await h.provider_signal("jobs", "job.gh", payload, event=event, delivery_id="d-1")
        assert (refused.value.code, status_of(refused.value.code)) == ("delivery_id_reused", 409)
        assert (await h.snapshot(live.id)).signals == []
